"""What is exported: the model folder (a saved model, or one fold of a run), loaded, and wrapped for tracing."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import SafetensorError
from torch import Tensor, nn
from transformers import AutoTokenizer

from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.model.card import CARD_FILE
from attnpool.model.sources import adapter_advice, file_given
from attnpool.pooling import available_poolers, get_pooler_class
from attnpool.pooling.registry import unknown_pooler_in
from attnpool.runs.run import Run

logger = logging.getLogger("attnpool.exporters")

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class ExportError(ValueError):
    """A model that cannot be exported as asked, or whose exported graph disagrees with PyTorch."""


class ExporterFailure(ExportError):
    """``torch.onnx.export`` raised; ``reason`` is what failed and why, without the advice the message adds."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class ModelLoadError(ExportError):
    """A model folder that does not load as an attnpool model: another kind of model, or damaged files."""


class OnnxWrapper(nn.Module):
    """The model as exporters want it: positional tensors in, a tuple of tensors out.

    Args:
        model: An :class:`~attnpool.AttnPoolForSequenceClassification` (output ``logits``) or
            :class:`~attnpool.AttnPoolModel` (output ``pooler_output``).
        with_weights: Also return the pooler's token weights.
        use_token_types: Take ``token_type_ids`` as a third input.

    Shapes:
        - input_ids, attention_mask, token_type_ids: ``(B, T)`` int64
        - logits: ``(B, num_labels)``; pooler_output: ``(B, output_dim)``
        - pooling_weights: ``(B, T)`` or ``(B, heads, T)``
    """

    def __init__(self, model: nn.Module, *, with_weights: bool = False, use_token_types: bool = False) -> None:
        super().__init__()
        self.model = model
        self.with_weights = with_weights
        self.use_token_types = use_token_types
        self.main_output = "pooler_output" if isinstance(model, AttnPoolModel) else "logits"

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the graph inputs."""
        return ("input_ids", "attention_mask", *(("token_type_ids",) if self.use_token_types else ()))

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the graph outputs."""
        return (self.main_output, *(("pooling_weights",) if self.with_weights else ()))

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, ...]:
        """Run the model; return the main output and, when asked, the pooling weights."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_pooling_weights=self.with_weights,
            return_dict=True,  # a config saved with return_dict=False would give a tuple, without names
        )
        if not self.with_weights:
            return (getattr(out, self.main_output),)
        return getattr(out, self.main_output), out.pooling_weights


def resolve_model_dir(path: str | os.PathLike, fold: int | None = None) -> Path:
    """The saved model folder meant by ``path``: a ``save_pretrained`` folder, or a fold of a train run.

    Args:
        path: A folder holding ``config.json`` (and ``model.safetensors``), the output directory of
            ``attnpool train`` holding ``fold_K/model/`` folders, or one ``fold_K`` folder of it.
        fold: Which fold of a run; default: its first trained fold (one graph holds one model).

    Returns:
        The model folder.

    Raises:
        FileNotFoundError: ``path`` does not exist, is a file, is a peft adapter (to merge first), or is neither a
            model folder nor a run.
        ValueError: ``fold`` given for a model folder, or not a trained fold of the run (one that did not finish
            training too); a RunError for a run of another format (as ``predict`` refuses it).
    """
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model folder {str(path)!r} does not exist; give a folder saved with save_pretrained (config.json + "
            "model.safetensors) or the --output-dir of attnpool train"
        )
    if not path.is_dir():
        raise file_given(os.fspath(path), "model")
    if (path / "config.json").is_file():
        if fold is not None:
            raise ValueError(f"fold={fold} is for a train run, but {path} is a single saved model; drop the fold")
        return path
    if (path / "model" / "config.json").is_file():  # one fold's folder of a run (fold_K): its model
        if fold is not None:
            raise ValueError(f"fold={fold} is for a train run, but {path} is one fold's folder (its model is in "
                             f"{path / 'model'}); drop the fold, or give the run's folder with the fold")
        return path / "model"
    if advice := adapter_advice(path):  # a peft save_pretrained: LoRA weights, without the base model's
        raise FileNotFoundError(f"{path} has no config.json{advice}; then export that folder: attnpool export "
                                "--model my-model ...")
    run = Run.open(path) if Run.is_run(path) else Run(path)  # a run of another format: refused, as predict does
    if not run.trained_folds():
        present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
        raise FileNotFoundError(
            f"{path} is neither a saved model folder (no config.json) nor a train run (no fold_K/model/); it "
            f"contains: {present}"
        )
    if fold is not None:
        return run.model_dir(run.select_fold(fold))
    usable = run.select_folds()  # the finished folds (one that did not finish: left out, with a warning)
    if len(usable) > 1:
        logger.info("%s has %d trained folds (%s); exporting fold %d (one graph holds one model; --fold K for "
                    "another)", path, len(usable), ", ".join(map(str, usable)), usable[0])
    return run.model_dir(usable[0])


def run_fold(model_dir: Path) -> tuple[int, int] | None:
    """``(K, N)`` when ``model_dir`` is fold K's model of a train run (``RUN/fold_K/model``) that has N usable folds.

    N counts the run's folds with a saved model that did not stop short of their results: those ``attnpool predict
    --run RUN`` averages. ``None`` for a model folder of another kind (a copy outside a run), or for a fold that did
    not finish (``predict`` leaves it out).
    """
    found = re.fullmatch(r"fold_(\d+)", model_dir.parent.name) if model_dir.name == "model" else None
    if found is None or not Run.is_run(model_dir.parent.parent):
        return None
    fold, run = int(found.group(1)), Run(model_dir.parent.parent)
    finished = [k for k in run.trained_folds() if not run.fold_unfinished(k)]
    return (fold, len(finished)) if fold in finished else None


def load_for_export(model_dir: str | os.PathLike) -> nn.Module:
    """Load a saved attnpool model in float32 on the CPU, as the class its ``config.json`` names.

    Raises:
        FileNotFoundError: No ``config.json`` or no safetensors weights (see ``from_pretrained``).
        ModelLoadError: The folder holds another kind of model (a plain encoder), or files that do not load.
    """
    model_dir = Path(model_dir)
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{model_dir / 'config.json'} is not readable JSON ({err}): the folder was cut short or "
                             "damaged; save or copy the model again") from err
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind != "attnpool":  # a plain encoder's config.json fails deep inside AttnPoolConfig otherwise
        raise ModelLoadError(
            f"{model_dir} holds a {kind or 'non-attnpool'} model (config.json model_type {kind!r}), not an attnpool "
            "one: export takes a model saved by attnpool (AttnPoolForSequenceClassification.save_pretrained) or a run "
            "of attnpool train; to export this encoder, build one first: "
            f"AttnPoolForSequenceClassification.from_encoder({str(model_dir)!r}, pooling=...), train and save it"
        )
    cls = AttnPoolModel if "AttnPoolModel" in (config.get("architectures") or []) else AttnPoolForSequenceClassification
    try:
        # float32 whatever the weights were saved in: onnxruntime's CPU kernels and the 1e-4 check want it.
        return cls.from_pretrained(model_dir, dtype=torch.float32).eval()
    except FileNotFoundError:
        raise  # no weights: from_pretrained's message names the folder and what it holds
    except (OSError, SafetensorError) as err:  # truncated or unreadable files
        raise ModelLoadError(
            f"cannot load the model in {model_dir}: {type(err).__name__}: {err}. Its files are damaged or incomplete "
            "(an interrupted save or copy): save or copy the model again (a fold of a run: re-train it, deleting the "
            "fold folder and running train --resume)"
        ) from err
    except Exception as err:  # noqa: BLE001 - the files read, the model did not build: the environment
        unknown = unknown_pooler_in(err)
        if unknown is not None:  # its message says what to import; the environment is not at fault
            raise ModelLoadError(f"cannot load the model in {model_dir}: {unknown}") from err
        raise ModelLoadError(
            f"cannot load the model in {model_dir}: {type(err).__name__}: {err}. Its files are readable, so keep "
            f"them: check that this environment can build it (transformers {transformers.__version__} knows its "
            "encoder, the packages it needs are installed, there is memory for it)"
        ) from err


def _load_tokenizer(model_dir: Path) -> Any:
    """The tokenizer saved in ``model_dir``; ``None`` without tokenizer files; ModelLoadError for damaged ones."""
    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except Exception as err:  # noqa: BLE001 - JSONDecodeError, tokenizers' bare Exception, a missing file's ValueError
        missing = [name for name in _TOKENIZER_FILES if not (model_dir / name).is_file()]
        # without tokenizer.json, transformers' error advises installing sentencepiece, which does not help here
        error = " ".join(str(err).split())[:300]  # on one line
        why = f"{', '.join(missing)} missing" if missing else f"{type(err).__name__}: {error}"
        raise ModelLoadError(
            f"cannot load the tokenizer saved in {model_dir} (to save it beside the graph): {why}. Its tokenizer "
            f"files ({', '.join(_TOKENIZER_FILES)}) are incomplete or damaged (an interrupted save or copy): copy "
            "them again from the encoder the model was trained from (AutoTokenizer.from_pretrained(ENCODER)"
            ".save_pretrained(FOLDER)), or, to export the graph without a tokenizer, delete them from the folder"
        ) from err


def _base_model(model: nn.Module) -> nn.Module:
    return model._base() if hasattr(model, "_base") else model


def _uses_token_types(model: nn.Module) -> bool:
    """Whether the encoder takes ``token_type_ids`` and has more than one token type to tell apart."""
    base = _base_model(model)
    types = getattr(base.config.encoder, "type_vocab_size", 0) or 0
    return bool(getattr(base, "_accepts_token_type_ids", False)) and types > 1


def _check_weights(model: nn.Module) -> None:
    pooler = _base_model(model).pooler
    if pooler.has_weights:
        return
    with_weights = [n for n in available_poolers() if get_pooler_class(n).has_weights]
    raise ExportError(
        f"pooler {pooler.name!r} gives no token weights, so there is no pooling_weights output to export; export "
        f"without with_weights (--with-weights), or train with a pooler that has them: {', '.join(with_weights)}"
    )


def _check_recurrent(model: nn.Module) -> None:
    """Refuse a model with ``recurrent``: its packed LSTM/GRU (lengths from the mask) does not trace to ONNX."""
    cell = getattr(_base_model(model).config, "recurrent", None)
    if cell is None:
        return
    raise ExportError(
        f"this model has recurrent={cell!r} (a bidirectional {cell.upper()} between encoder and pooler), which runs "
        "as a packed sequence whose lengths come from the attention mask; torch.onnx.export cannot trace that into "
        "a graph, so there is no ONNX export (or --backend onnx) for it. Serve it with the PyTorch backend "
        "(--backend torch), or train without recurrent"
    )


def _max_tokens(model: nn.Module) -> int | None:
    """Longest sequence the encoder's position embeddings allow (RoBERTa-style offsets take two)."""
    positions = getattr(_base_model(model).config.encoder, "max_position_embeddings", None)
    return positions - 2 if isinstance(positions, int) and positions > 2 else None


def source_stamp(model_dir: str | os.PathLike) -> str:
    """What a graph was exported from: each file of the model folder, its size and time (not the card), as JSON.

    Stored in the graph (``metadata_props["attnpool_source"]``): a graph whose stamp differs from its folder's is
    stale (retrained, copied over with older times, or an earlier model), whatever the files' times say.
    """
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.name != CARD_FILE)
    return json.dumps([[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files])
