"""Inference with one or several models: length-sorted, dynamically padded batches, and fold ensembling.

The notebook recipe pads every batch to the data set's maximum length and runs the batches in file order. Here the
rows are sorted by token length so that each batch pads only to its own longest row, batches are larger, and
the output is put back in the input order.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import transformers
from safetensors import SafetensorError
from tqdm.auto import tqdm
from transformers import AutoTokenizer
from transformers.pytorch_utils import Conv1D

from attnpool.data.batching import padded_batches
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.pooling.registry import unknown_pooler_in
from attnpool.precision import AUTOCAST_DTYPES, autocast, emulated_on_cpu, inference_device, resolve_precision
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import oof_scores
from attnpool.tasks import primary_metric, scores_from_logits

logger = logging.getLogger("attnpool.predict")

# The encoder modules whose weight and bias CPU autocast casts at every matrix product (F.linear; Conv1D's addmm)
LOWERED_MODULES = (torch.nn.Linear, Conv1D)


@torch.inference_mode()
def predict_encoded(models: Sequence[torch.nn.Module], encodings: dict[str, list], rows: np.ndarray | None,
                    batch_size: int, tokenizer: Any, device: str | torch.device | None = None,
                    progress: bool = False, *, precision: str = "fp32",
                    on_batch: Callable[[int], object] | None = None) -> list[np.ndarray]:
    """Logits of each model for the given rows of pre-tokenised inputs, in the order of ``rows``.

    Args:
        models: Models returning ``.logits``.
        encodings: ``{"input_ids": [...], "attention_mask": [...], ...}`` lists of token lists (unpadded).
        rows: Which rows (default: all).
        batch_size: Rows per forward pass.
        tokenizer: Pads the batches (``tokenizer.pad``).
        device: Where to run; default: CUDA when available.
        progress: Show a progress bar over the batches.
        precision: ``fp32`` (default), ``bf16``, ``fp16`` (``torch.autocast``) or ``auto`` (see
            :func:`attnpool.precision.resolve_precision`).
        on_batch: Called with the number of rows of each batch once it is predicted (a progress bar's ``update``).

    Returns:
        One ``(len(rows), num_labels)`` float32 array per model.
    """
    count = len(encodings["input_ids"]) if rows is None else len(rows)
    device = inference_device(device)
    context = autocast(precision, device)
    outputs = [np.zeros((count, 0), dtype=np.float32) for _ in models]
    for m in models:
        m.eval().to(device)
    batches = padded_batches(encodings, batch_size, tokenizer, rows=rows)
    if progress:
        batches = tqdm(batches, desc="predict", unit="batch", total=-(-count // batch_size))
    for batch, features in batches:
        features = {k: v.to(device) for k, v in features.items()}
        for j, m in enumerate(models):
            with context:
                logits = m(**features).logits
            logits = logits.float().cpu().numpy()
            if outputs[j].shape[1] == 0:
                outputs[j] = np.zeros((count, logits.shape[1]), dtype=np.float32)
            outputs[j][batch] = logits
        if on_batch is not None:
            on_batch(len(batch))
    return outputs


def with_encoder_in(model: AttnPoolForSequenceClassification, dtype: torch.dtype
                    ) -> AttnPoolForSequenceClassification:
    """A copy of ``model`` for inference under ``dtype`` autocast on a CPU: its encoder's linear weights in ``dtype``.

    Under ``torch.autocast`` on a CPU every matrix product casts its float32 weight to bf16 again, at every batch;
    with those weights already in bf16 a MiniLM prediction of 1,000 PPPM rows ran 1.20-1.25x faster than autocast
    alone (an Intel CPU with AMX, batches of 32 to 128). Only the weights and biases that autocast would cast anyway
    are stored lowered: those of ``nn.Linear`` and of transformers' ``Conv1D`` (GPT-2's projections, an ``addmm``),
    so the outputs are those of autocast over the float32 model. Embeddings, layer norms (which CPU autocast does not
    lift back to float32), any other encoder parameter, the pooler and the head stay float32, shared with ``model``
    (not copied: the copy costs only the lowered weights); a linear weight tied to one of them (an embedding) stays
    float32 too.
    """
    encoder = model.attnpool.encoder
    lowered, kept = set(), set()
    for module in encoder.modules():
        names = ("weight", "bias") if isinstance(module, LOWERED_MODULES) else ()
        for name, param in module.named_parameters(recurse=False):
            (lowered if name in names else kept).add(id(param))
    # The lowered parameters enter the copy already cast and the others as themselves (deepcopy takes them from its
    # memo), so no second float32 copy of any is made; tied weights stay tied.
    lowered -= kept  # a weight tied to a parameter kept float32 (an embedding) stays float32 with it
    memo = {id(p): torch.nn.Parameter(p.detach().to(dtype), requires_grad=False) if id(p) in lowered else p
            for p in model.parameters()}
    return copy.deepcopy(model, memo).eval()


def load_fold_models(run: Run, folds: int | Sequence[int] | None = None
                     ) -> tuple[list[int], list[torch.nn.Module], Any, list[dict]]:
    """The chosen folds of a run (default: every trained fold), their models, the tokenizer and the fold metrics.

    Raises:
        RunError: No such trained fold, or a model folder that cannot be loaded.
    """
    fold_ids = run.select_folds(folds)
    models = []
    for fold in fold_ids:
        folder = run.model_dir(fold)
        try:
            models.append(AttnPoolForSequenceClassification.from_pretrained(folder))
        except (OSError, json.JSONDecodeError, SafetensorError) as err:  # missing, truncated or unreadable files
            raise RunError(f"cannot load the fold model in {folder}: {err}. The checkpoint is corrupt or incomplete; "
                           "re-train that fold (delete the fold folder and run train --resume)") from err
        except Exception as err:  # noqa: BLE001 - the files read, the model did not build: the environment
            unknown = unknown_pooler_in(err)
            if unknown is not None:  # its message says what to import; the environment is not at fault
                raise RunError(f"cannot load the fold model in {folder}: {unknown}") from err
            raise RunError(f"cannot load the fold model in {folder}: {type(err).__name__}: {err}. Its files are "
                           f"readable, so keep them: check that this environment can build it (transformers "
                           f"{transformers.__version__} knows its encoder, the packages it needs are installed, "
                           "there is memory for it)") from err
    return fold_ids, models, fold_tokenizer(run, fold_ids[0]), [run.fold_metrics(f) for f in fold_ids]


def fold_tokenizer(run: Run, fold: int) -> Any:
    """The tokenizer saved with a fold's model, or a RunError naming its folder (missing or damaged files)."""
    folder = run.model_dir(fold)
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError; a missing tokenizer.json, too
        raise RunError(f"cannot load the tokenizer saved in {folder}: {type(err).__name__}: {err}. Its tokenizer "
                       "files (tokenizer.json, tokenizer_config.json) are missing or damaged: copy them from the "
                       "encoder the run trained, or re-train that fold") from err


def ensemble_weights(fold_metrics: list[dict], metric: str, how: str, folds: Sequence[int] | None = None,
                     where: Any = None) -> np.ndarray:
    """``mean``: equal weights. ``score``: weights proportional to each fold's validation ``metric`` (clipped at 0).

    ``folds`` and ``where`` (the run) name the folds in errors.

    A fold whose ``metric`` was saved as null (NaN: constant predictions, or validation targets that do not vary)
    finished its validation: it gets weight 0, with a warning naming it. When no fold scored above 0 (every weight
    clipped or null), the folds are weighed equally, as ``mean``, with a warning saying so.

    Raises:
        RunError: With ``score``, a fold whose metrics lack ``metric`` (no metrics file: a fold killed before its
            validation finished), which would otherwise get weight 0 unnoticed.
    """
    n = len(fold_metrics)
    if how == "mean":
        return np.full(n, 1.0 / n)
    if how != "score":
        raise ValueError(f"ensemble must be 'mean' or 'score', got {how!r}")
    names = list(folds) if folds is not None else list(range(n))
    missing = [str(fold) for fold, m in zip(names, fold_metrics, strict=True) if metric not in m]
    if missing:
        raise RunError(f"--ensemble score weighs each fold by its validation {metric}, but fold(s) "
                       f"{', '.join(missing)}{f' of {where}' if where is not None else ''} have no {metric} in their "
                       "metrics (a fold stopped before its validation finished?): finish them with attnpool train "
                       "--resume, leave them out with --folds, or use --ensemble mean")
    if unscored := [str(fold) for fold, m in zip(names, fold_metrics, strict=True) if not _finite_number(m[metric])]:
        logger.warning("--ensemble score: fold(s) %s%s scored no %s on validation (saved as null: constant predictions?"
                       "); they get weight 0", ", ".join(unscored), f" of {where}" if where is not None else "", metric)
    scores = np.array([max(float(m[metric]), 0.0) if _finite_number(m[metric]) else 0.0 for m in fold_metrics])
    if scores.sum() == 0:
        logger.warning("--ensemble score: no fold%s scored above 0 on validation (%s): the folds are weighed equally, "
                       "as --ensemble mean", f" of {where}" if where is not None else "", ", ".join(
                           f"fold {fold} {m[metric]}" for fold, m in zip(names, fold_metrics, strict=True)))
        return np.full(n, 1.0 / n)
    return scores / scores.sum()


def fold_weights(run: Run, folds: int | Sequence[int] | None = None, how: str = "mean"
                 ) -> tuple[str, list[int], np.ndarray]:
    """The run's task, the chosen folds (default: every trained fold) and their ensemble weights, loading no model."""
    task = run.config().task
    fold_ids = run.select_folds(folds)
    return task, fold_ids, ensemble_weights([run.fold_metrics(f) for f in fold_ids], primary_metric(task)[0], how,
                                            fold_ids, run.path)


def _finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a bool, ``None``, text or NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and bool(np.isfinite(value))


def standardised_mean(scores: Sequence[np.ndarray], weights: np.ndarray, center: np.ndarray,
                      scale: np.ndarray) -> np.ndarray:
    """The weighted mean of each member's ``scores`` standardised by its own ``center`` and ``scale``: ``(N, T)``.

    What a blend of runs (:class:`~attnpool.prediction.blend.RunBlend`) and a Pearson-loss run's folds
    (:class:`FoldScales`) average before putting the mean back on a scale of their choosing. ``scores``: one
    ``(N,)`` or ``(N, T)`` array per member; ``center``, ``scale``: ``(members, T)``.
    """
    return sum(w * (np.asarray(s, dtype=np.float64).reshape(len(s), -1) - c) / d
               for w, s, c, d in zip(weights, scores, center, scale, strict=True))


@dataclass(frozen=True)
class FoldScales:
    """Each fold model's out-of-fold prediction mean and standard deviation (per target), for a Pearson-loss run.

    The Pearson loss ignores a model's offset and scale, so each fold model of such a run predicts on a scale of
    its own (training reports ``pearson_folds_standardised`` for that reason): the plain mean of the folds' outputs
    would weigh the folds by their spread, not by the ensemble weights. :meth:`combine` standardises each fold's
    outputs by its own out-of-fold predictions (fixed numbers from training: a row's score never depends on the
    other rows predicted with it), takes the weighted mean, and puts it back on the folds' average scale.
    """

    folds: list[int]
    center: np.ndarray  # (folds, targets)
    scale: np.ndarray  # (folds, targets)

    @classmethod
    def of_run(cls, run: Run, fold_ids: Sequence[int]) -> FoldScales | None:
        """The scales of a regression run trained with ``loss: pearson``; ``None`` for any other run.

        Raises:
            RunError: A chosen fold without its out-of-fold file, or whose out-of-fold predictions are constant.
        """
        cfg = run.config()
        if cfg.task != "regression" or cfg.loss != "pearson":
            return None
        centers, scales = [], []
        for fold in fold_ids:
            if not run.fold_done(fold):
                raise RunError(f"{run.path}: fold {fold} has no out-of-fold file (in {run.fold_dir(fold)}); a run "
                               "trained with the Pearson loss puts its folds on one scale by their out-of-fold "
                               "predictions: finish the fold with attnpool train --resume, or leave it out with "
                               "--folds")
            values = oof_scores(run.fold_oof(fold), "regression", None)
            values = values.reshape(len(values), -1)
            std = values.std(axis=0)
            if not (np.isfinite(values).all() and np.all(std > 0)):
                raise RunError(f"{run.path}: the out-of-fold predictions of fold {fold} are constant or not finite, "
                               "so that fold has no scale to put it on the others' (it learned nothing, or "
                               "diverged): leave it out with --folds")
            centers.append(values.mean(axis=0))
            scales.append(std)
        return cls(list(fold_ids), np.stack(centers), np.stack(scales))

    def combine(self, scores: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
        """The weighted mean of the folds' standardised ``scores`` (``(N,)`` or ``(N, T)`` each), on their scale."""
        standard = standardised_mean(scores, weights, self.center, self.scale)
        return (self.center.mean(axis=0) + self.scale.mean(axis=0) * standard).reshape(np.shape(scores[0]))

    def rescale(self, values: np.ndarray, folds: np.ndarray) -> np.ndarray:
        """Out-of-fold ``values`` of the rows validated by ``folds`` (one fold id per row), on :meth:`combine`'s scale.

        A blend standardises each run by its out-of-fold predictions: those of a Pearson-loss run are on one scale
        per fold, its predictions on this one.
        """
        values = np.asarray(values, dtype=np.float64)
        flat = values.reshape(len(values), -1)
        index = {fold: i for i, fold in enumerate(self.folds)}
        at = np.array([index[int(f)] for f in folds], dtype=np.int64)
        out = self.center.mean(axis=0) + self.scale.mean(axis=0) * (flat - self.center[at]) / self.scale[at]
        return out.reshape(values.shape)


def combine_folds(task: str, logits: Sequence[np.ndarray], weights: np.ndarray,
                  scales: FoldScales | None = None) -> np.ndarray:
    """The ensemble of the folds' outputs: the weighted mean of their scores, or :meth:`FoldScales.combine`."""
    scores = [scores_from_logits(task, lg) for lg in logits]
    if scales is not None:
        return scales.combine(scores, weights)
    return sum(w * s for w, s in zip(weights, scores, strict=True))


@dataclass
class FoldEnsemble:
    """The models of a run's chosen folds and their ensemble weights: what ``predict`` (and a server) runs.

    ``scales``: a Pearson-loss run's fold scales (:class:`FoldScales`), ``None`` otherwise.
    """

    task: str
    folds: list[int]
    models: list[torch.nn.Module]
    weights: np.ndarray
    tokenizer: Any
    lowered: dict[torch.dtype, list[torch.nn.Module]] = field(default_factory=dict, repr=False)
    scales: FoldScales | None = None

    @classmethod
    def load(cls, run: Run, folds: int | Sequence[int] | None = None, how: str = "mean") -> FoldEnsemble:
        """Load the chosen folds (default: every trained fold), weighted ``how`` (see :func:`ensemble_weights`)."""
        task, fold_ids, weights = fold_weights(run, folds, how)
        scales = FoldScales.of_run(run, fold_ids)
        _, models, tokenizer, _ = load_fold_models(run, fold_ids)
        return cls(task, fold_ids, models, weights, tokenizer, scales=scales)

    def scores(self, encodings: dict[str, list], *, batch_size: int, device: str | torch.device | None = None,
               precision: str = "fp32", on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """The weighted mean over the folds of each row's outputs (values, or class probabilities).

        A Pearson-loss run's values are each standardised by its fold's out-of-fold predictions first
        (:class:`FoldScales`).

        ``precision`` is as in :func:`predict_encoded`. On a CPU, bf16 and fp16 run copies of the models whose
        encoder's linear weights are stored in that type (:func:`with_encoder_in`; made at the first such call and
        kept), so that autocast does not cast them again at every batch; the outputs are those of autocast over the
        float32 models. A CPU that only emulates that type is warned about then (much slower than fp32).
        """
        device = inference_device(device)
        logits = predict_encoded(self.models_for(precision, device), encodings, None, batch_size, self.tokenizer,
                                 device, precision=precision, on_batch=on_batch)
        return combine_folds(self.task, logits, self.weights, self.scales)

    def models_for(self, precision: str, device: str | torch.device) -> list[torch.nn.Module]:
        """The models that run at ``precision`` on ``device``: the float32 ones, or on a CPU their lowered copies."""
        dtype = AUTOCAST_DTYPES.get(resolve_precision(precision, device))
        if dtype is None or torch.device(device).type != "cpu":
            return self.models
        if dtype not in self.lowered:  # said once, as the copies are made
            if (emulated := emulated_on_cpu(precision, device)) is not None:
                logger.warning(emulated)
            logger.info("%s on the CPU: the encoders' linear weights are stored as %s copies (the outputs of autocast "
                        "over float32 weights, without casting them at every batch); embeddings, layer norms, pooler "
                        "and head stay float32", resolve_precision(precision, device), str(dtype).split(".")[-1])
            self.lowered[dtype] = [with_encoder_in(m, dtype) for m in self.models]
        return self.lowered[dtype]
