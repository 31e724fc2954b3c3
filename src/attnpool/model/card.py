"""Model cards: the ``README.md`` of a saved model folder, written as Hugging Face and sentence-transformers do.

A card has a YAML metadata header that the Hub indexes (``library_name``, ``pipeline_tag``, ``base_model``,
``tags``, ``metrics`` and, once validation scores are known, ``model-index``), built with
:class:`huggingface_hub.ModelCardData`, and Markdown sections: the model (encoder, pooler and its options, head,
task and labels), how to use it (Auto classes, ``pipeline``, ``attnpool`` commands, ONNX), its evaluation, how it
was trained (data file and size, recipe options) and the library versions.

What a model config alone tells is enough for a card (:meth:`AttnPoolPreTrainedModel.save_pretrained` writes that
one); training adds :class:`TrainingFacts`, and an ONNX export adds :class:`ExportFacts`. The training facts are
also kept, machine-readable, under the ``attnpool`` key of the header, so that a card written from a trained
folder (the export's) can repeat them.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path

import huggingface_hub
import torch
import transformers
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.constants import REPOCARD_NAME

from attnpool._version import __version__
from attnpool.model.card_facts import (
    HUB_METRICS,
    ExportFacts,
    TrainingFacts,
    display_name,
    encoder_source,
    hub_name,
    metric_values,
    pooler_has_weights,
)
from attnpool.model.card_sections import (
    description_section,
    evaluation_section,
    export_section,
    training_section,
    usage_section,
)
from attnpool.model.configuration import AttnPoolConfig
from attnpool.tasks import task_of

CARD_FILE = REPOCARD_NAME  # "README.md": the file the Hub reads a model card from
LIBRARY_NAME = "attnpool"
# The last line of a card ``save_pretrained`` generated: a hash of the rest of the card, so that an edited one is told
# from an unchanged one (an HTML comment: the Hub shows nothing of it).
_STAMP = re.compile(r"^<!-- attnpool generated card, sha256:([0-9a-f]{64}) -->$", re.M)  # a line anywhere
TASK_METRICS = {"regression": ("pearson", "spearman", "rmse")}
CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "auc")


def card_data(config: AttnPoolConfig, *, training: TrainingFacts | None = None, export: ExportFacts | None = None,
              with_head: bool = True, tags: Sequence[str] = ()) -> ModelCardData:
    """The YAML header: library, pipeline tag, base model, tags, metrics, and the validation scores as model-index.

    ``tags``: more tags, after attnpool's (the model's ``model_tags``, those given to ``push_to_hub``).
    """
    task = task_of(config.problem_type, config.num_labels)
    pooling = str(config.pooling.get("type", "attention"))
    name = title(config, with_head=with_head)  # the model-index name
    ours = [LIBRARY_NAME, "attention-pooling", f"pooling:{pooling}", "transformers"]
    if with_head:
        ours += ["text-classification", f"task:{task}"]
    if training is not None:
        ours.append("generated_from_trainer")
        if training.rows:
            ours.append(f"dataset_size:{training.rows}")
    if export is not None:
        ours.append("onnx")
    tags = list(dict.fromkeys([*ours, *tags]))  # in order, each once
    metrics = TASK_METRICS.get(task, CLASSIFICATION_METRICS) if with_head else ()
    scores = metric_values(training)
    results = None
    if scores:
        data = Path(training.valid_file or training.data_file or "training data").name
        split = (f"validation fold {training.fold} of {training.folds}" if training.fold is not None and training.folds
                 else "validation")
        kind = "Text Regression" if task == "regression" else "Text Classification"
        results = [EvalResult(task_type="text-classification", task_name=kind, dataset_type=data, dataset_name=data,
                              dataset_split=split, metric_type=HUB_METRICS[k][0], metric_value=round(v, 6),
                              metric_name=HUB_METRICS[k][1]) for k, v in scores.items()]
    recorded = {"version": __version__, **({"training": training.to_dict()} if training is not None else {})}
    return ModelCardData(library_name=LIBRARY_NAME, base_model=hub_name(encoder_source(config)),
                         pipeline_tag="text-classification" if with_head else "feature-extraction", tags=tags,
                         metrics=[HUB_METRICS[m][0] for m in metrics] or None,
                         model_name=name if results else None, eval_results=results,
                         attnpool=recorded)


def title(config: AttnPoolConfig, *, with_head: bool = True) -> str:
    """The card's heading: encoder + pooler, and the task."""
    pooling = config.pooling.get("type", "attention")
    what = f"{display_name(encoder_source(config))} + {pooling} pooling"
    return f"{what} ({task_of(config.problem_type, config.num_labels)})" if with_head else f"{what} (embeddings)"


def model_card(config: AttnPoolConfig, *, architecture: str | None = None, num_parameters: int | None = None,
               training: TrainingFacts | None = None, export: ExportFacts | None = None,
               tags: Sequence[str] = (), has_weights: bool | None = None) -> str:
    """The text of a model card (YAML header + Markdown) for a model with this config.

    Args:
        config: The model's config (encoder, pooler, head, task).
        architecture: The model class name, e.g. ``AttnPoolForSequenceClassification`` (default: the config's).
        num_parameters: The parameter count, when known.
        training: What training adds (data, split, recipe, validation scores).
        export: What an ONNX export wrote.
        tags: Hub tags added to attnpool's own (the model's ``model_tags``, those given to ``push_to_hub``).
        has_weights: Whether the model's pooler gives token weights (its ``pooler.has_weights``); by default the
            pooler is built from the config to find out (:func:`pooler_has_weights`).
    """
    architecture = architecture or (config.architectures or ["AttnPoolForSequenceClassification"])[0]
    with_head = architecture != "AttnPoolModel"
    data = card_data(config, training=training, export=export, with_head=with_head, tags=tags)
    source = hub_name(encoder_source(config))
    encoder = (f"[{source}](https://huggingface.co/{source})" if source else
               f"`{display_name(encoder_source(config))}`" if encoder_source(config) else "(randomly initialised)")
    trained = (f", fine-tuned on `{Path(training.data_file).name}`" if training is not None and training.data_file
               else "")
    task = task_of(config.problem_type, config.num_labels)
    weighted = pooler_has_weights(config) if has_weights is None else has_weights
    what = ("text embeddings" if not with_head else "text regression" if task == "regression"
            else f"{task} text classification")
    lines = [
        "---",
        "# For reference on model card metadata, see the spec: "
        "https://github.com/huggingface/hub-docs/blob/main/modelcard.md?plain=1",
        "# Doc / guide: https://huggingface.co/docs/hub/model-cards",
        data.to_yaml(),
        "---",
        "",
        f"# {title(config, with_head=with_head)}",
        "",
        f"This is an **attnpool** model{' exported to ONNX' if export else ''}: the "
        f"encoder {encoder} with a learned `{config.pooling.get('type')}` pooler"
        f"{' and a task head' if with_head else ''}{trained}, for {what}."
        + (" The pooler's token weights (how much each token counts in the text's vector) can be read out with "
           "every prediction." if weighted else ""),
        "",
        "## Model Details",
        "",
        "### Model Description",
        "",
        *description_section(config, architecture, num_parameters, with_head, training),
        "",
        *usage_section(with_head, training, export, weighted=weighted, recurrent=getattr(config, "recurrent", None)),
        *export_section(export),
        *evaluation_section(training),
        *training_section(training),
        "## Framework Versions",
        "",
        f"- Python: {platform.python_version()}",
        f"- attnpool: {__version__}",
        f"- Transformers: {transformers.__version__}",
        f"- PyTorch: {torch.__version__}",
        f"- huggingface_hub: {huggingface_hub.__version__}",
        "",
    ]
    return "\n".join(lines)


def read_card(folder: str | os.PathLike) -> ModelCard | None:
    """The model card in ``folder``, or ``None`` when it has none.

    A ``README.md`` whose metadata header does not parse is not attnpool's: it reads as a card without metadata,
    so that it is kept as the user's text (never overwritten, no training facts read from it).
    """
    path = Path(os.fspath(folder)) / CARD_FILE
    if not path.is_file():
        return None
    try:
        return ModelCard.load(path)
    except (yaml.YAMLError, ValueError):  # bad YAML, or a header that is not a mapping
        return ModelCard("---\n{}\n---\n")  # no metadata: not attnpool's


def is_attnpool_card(card: ModelCard | None) -> bool:
    """Whether a card was written by attnpool (so it may be rewritten without losing a user's text)."""
    return card is not None and card.data.to_dict().get("library_name") == LIBRARY_NAME


def stamp_card(text: str) -> str:
    """``text`` with a fingerprint (a hash of it) as its last line: a card :func:`may_rewrite_card` rewrites."""
    text = text if text.endswith("\n") else text + "\n"
    return f"{text}<!-- attnpool generated card, sha256:{hashlib.sha256(text.encode()).hexdigest()} -->\n"


def is_stamped(folder: str | os.PathLike) -> bool:
    """Whether ``folder``'s ``README.md`` has a fingerprint line (:func:`stamp_card`), edited since or not."""
    try:
        text = (Path(os.fspath(folder)) / CARD_FILE).read_text(encoding="utf-8")
        return _STAMP.search(text) is not None
    except (OSError, UnicodeDecodeError):
        return False


def may_rewrite_card(folder: str | os.PathLike) -> bool:
    """Whether a plain ``save_pretrained`` into ``folder`` may write attnpool's card over its ``README.md``.

    Yes when there is none, when it is the card ``save_pretrained`` generated (its fingerprint line,
    :func:`stamp_card`, matches the rest of the text: it was not edited since), or when it is peft's generic card
    ("Model Card for Model ID", ``library_name: peft``: an adapter saved there). Any other is kept: a README of the
    user's own, a card given with ``model_card=`` (a fold's card with its training facts too), an edited generated
    card, and cards of attnpool versions that wrote no fingerprint (they cannot be told from a card the user wrote or
    edited with ``library_name: attnpool`` kept).
    """
    path = Path(os.fspath(folder)) / CARD_FILE
    if not path.exists():
        return True
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # unreadable: not rewritten blindly
        return False
    found = next(reversed(list(_STAMP.finditer(text))), None)
    if found is not None and text[found.end():] in ("", "\n"):  # the card's last line
        return hashlib.sha256(text[:found.start()].encode()).hexdigest() == found.group(1)
    card = read_card(folder)
    return card is not None and card.data.to_dict().get("library_name") == "peft"


def card_graph(card: ModelCard | None) -> str | None:
    """The ``.onnx`` file an attnpool export card describes (its "ONNX Export" section), or ``None``."""
    if not is_attnpool_card(card):
        return None
    found = re.search(r"^- \*\*Graph:\*\* `([^`]+)`", card.text, re.M)
    return found.group(1) if found else None


def training_facts(folder: str | os.PathLike) -> TrainingFacts | None:
    """The training facts an attnpool card in ``folder`` recorded, or ``None``."""
    card = read_card(folder)
    if not is_attnpool_card(card):
        return None
    recorded = (card.data.to_dict().get("attnpool") or {}).get("training")
    return TrainingFacts.from_dict(recorded) if isinstance(recorded, dict) else None


def write_model_card(folder: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as the folder's ``README.md`` (plain write: callers that need atomicity stage the folder)."""
    path = Path(os.fspath(folder)) / CARD_FILE
    path.write_text(text, encoding="utf-8")
    return path
