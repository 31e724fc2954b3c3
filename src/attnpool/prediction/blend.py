"""Blending runs: several trained runs, each its folds' ensemble, predicting as one model.

Runs trained with different recipes (with and without the grouped-target context, another encoder, another loss)
make different errors, and the mean of their predictions usually beats the best of them: on PPPM fold 0 (MiniLM,
3 epochs, seed 42) the runs with and without the grouped-target context scored 0.7492 and 0.7320, their blend
0.7643 (``docs/pppm_quality.md``). That is how the competition's best solutions were built.

Classification runs give probabilities, on one scale: the blend is their weighted mean. Regression runs do not
share a scale (a Pearson-loss run predicts on a scale of its own), so each run's predictions are first standardised
by the mean and standard deviation of its own out-of-fold predictions, fixed numbers from training (a row's blended
score never depends on the other rows predicted with it, nor on the chunk it is read in); the weighted mean of the
standardised scores is put back on the runs' weighted mean scale. A run blended with itself predicts what it
predicts alone. That rebuilt score can leave the runs' range: when every run's output is a sigmoid's
(``output_activation: sigmoid``, as ``--preset pppm`` sets, trained with a loss other than ``pearson``) its targets
lie in [0, 1], so the blend is clipped to [0, 1].
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.metrics import task_metrics
from attnpool.prediction.engine import FoldScales, standardised_mean
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import oof_scores, oof_targets, prediction_columns
from attnpool.tasks import primary_metric

logger = logging.getLogger("attnpool.predict")

LONE_WEIGHTS = "blend_weights (--blend-weights) weighs the runs of a blend: give two or more runs"


@dataclass(frozen=True)
class RunBlend:
    """How the predictions of several runs are combined into one (see the module docstring).

    ``center`` and ``scale`` are each run's out-of-fold prediction mean and standard deviation, one per target
    (regression only; ``None`` for classification). ``bounded``: every run predicts through a sigmoid, targets in
    [0, 1] (:func:`sigmoid_bounded`), so the blended regression scores are clipped to [0, 1].
    """

    task: str
    classes: list | None
    paths: list[str]
    weights: np.ndarray
    center: np.ndarray | None = None  # (runs, targets)
    scale: np.ndarray | None = None  # (runs, targets)
    bounded: bool = False  # regression scores clipped to [0, 1]

    @classmethod
    def read(cls, runs: Sequence[Run], folds: Sequence[Sequence[int]],
             weights: Sequence[float] | None = None) -> RunBlend:
        """:meth:`from_runs` on the out-of-fold predictions of each run's chosen ``folds``, its report logged.

        Raises:
            RunError: What :func:`out_of_fold` and :meth:`from_runs` raise.
            ValueError: Bad weights.
        """
        frames = out_of_fold(runs, folds)
        blend = cls.from_runs(runs, frames, weights)
        blend.log_report(frames)
        return blend

    @classmethod
    def from_runs(cls, runs: Sequence[Run], frames: Sequence[pd.DataFrame],
                  weights: Sequence[float] | None = None) -> RunBlend:
        """The blend of ``runs``, with the statistics of their out-of-fold predictions ``frames``.

        Args:
            runs: Two or more runs of one task (and, for classification, the same classes in the same order).
            frames: For each run, the out-of-fold predictions of the folds it predicts with
                (:func:`out_of_fold`); they give its statistics.
            weights: One non-negative weight per run (normalised to sum to 1); default: equal.

        Raises:
            RunError: Runs of different tasks, label columns, classes or number of targets; a run whose out-of-fold
                predictions are constant.
            ValueError: Bad weights.
        """
        if len(runs) < 2:
            raise ValueError(f"a blend needs two or more runs, got {len(runs)}")
        first, first_info = runs[0], runs[0].info()
        task, classes = first.config().task, first_info.get("classes")
        for run in runs[1:]:
            other, info = run.config().task, run.info()
            if other != task:
                raise RunError(f"cannot blend {first.path} ({task}) with {run.path} ({other}): blend runs of one task")
            if info.get("label") != first_info.get("label"):  # another target, however alike its scores look
                raise RunError(f"cannot blend {first.path} (label {first_info.get('label')!r}) with {run.path} (label "
                               f"{info.get('label')!r}): blend runs of one target, trained on the same label column")
            if task != "regression" and list(info.get("classes") or []) != list(classes or []):
                raise RunError(f"cannot blend {first.path} with {run.path}: their classes differ ({classes} vs "
                               f"{info.get('classes')}); blend runs trained on the same labels")
        weights = _weights(weights, len(runs))
        paths = [str(run.path) for run in runs]
        if task != "regression":
            return cls(task, classes, paths, weights)
        stats = []
        for run, frame in zip(runs, frames, strict=True):
            values = oof_scores(frame, task, classes)
            values = values.reshape(len(values), -1)
            if not np.isfinite(values).all():  # a fold that diverged wrote NaN scores
                raise RunError(f"the out-of-fold predictions of {run.path} hold {int((~np.isfinite(values)).sum())} "
                               "missing or non-finite scores (a fold diverged?): they cannot be standardised for a "
                               "blend; re-train that run or leave it out")
            std = values.std(axis=0)
            if not np.all(std > 0):
                raise RunError(f"the out-of-fold predictions of {run.path} are constant (standard deviation 0): they "
                               "cannot be standardised for a blend; leave that run out")
            stats.append((values.mean(axis=0), std))
        shapes = {center.shape for center, _ in stats}
        if len(shapes) > 1:
            counts = ", ".join(f"{p}: {c.shape[0]}" for p, (c, _) in zip(paths, stats, strict=True))
            raise RunError(f"cannot blend runs with different numbers of targets ({counts})")
        return cls(task, classes, paths, weights, np.stack([c for c, _ in stats]), np.stack([s for _, s in stats]),
                   bounded=all(sigmoid_bounded(run) for run in runs))

    def combine(self, scores: Sequence[np.ndarray]) -> np.ndarray:
        """One blended array from each run's scores (values ``(N,)``/``(N, T)``, or probabilities ``(N, C)``).

        Regression scores are rebuilt from the runs' standardised scores; with ``bounded`` they are clipped to
        [0, 1], the range of every run's sigmoid output (the rebuilt score may leave it, e.g. 1.1).
        """
        if len(scores) != len(self.weights):
            raise ValueError(f"expected the scores of {len(self.weights)} runs, got {len(scores)}")
        if self.center is None:
            return sum(w * np.asarray(s, dtype=np.float64) for w, s in zip(self.weights, scores, strict=True))
        shape = np.shape(scores[0])
        standard = standardised_mean(scores, self.weights, self.center, self.scale)
        w = self.weights[:, None]
        blended = ((w * self.center).sum(0) + (w * self.scale).sum(0) * standard).reshape(shape)
        return np.clip(blended, 0.0, 1.0) if self.bounded else blended

    def oof_report(self, frames: Sequence[pd.DataFrame]) -> dict[str, float] | None:
        """The primary metric of each run and of the blend on the out-of-fold rows every run validated on.

        ``frames``: each run's out-of-fold predictions (:func:`out_of_fold`), in the blend's order.

        ``None`` when the runs share no such row (trained on different data, or on folds that do not overlap): the
        rows are matched by their row number and must have the same target in every run.
        """
        common = frames[0]["row"]
        for frame in frames[1:]:
            common = common[common.isin(frame["row"])]
        if common.empty:
            return None
        picked = [f.set_index("row").loc[common.to_numpy()].reset_index() for f in frames]
        targets = [oof_targets(f, self.task, self.classes) for f in picked]
        if not all(np.array_equal(targets[0], t) for t in targets[1:]):
            return None
        metric = primary_metric(self.task)[0]
        scores = [oof_scores(f, self.task, self.classes) for f in picked]
        report = {path: task_metrics(self.task, targets[0], s)[metric] for path, s in zip(self.paths, scores,
                                                                                             strict=True)}
        report["blend"] = task_metrics(self.task, targets[0], self.combine(scores))[metric]
        report["rows"] = float(len(common))
        return report

    def log_report(self, frames: Sequence[pd.DataFrame]) -> None:
        """Log :meth:`oof_report`, or why there is none."""
        report = self.oof_report(frames)
        metric = primary_metric(self.task)[0]
        if report is None:
            logger.info("blend of %d runs: they share no out-of-fold rows with the same targets, so the blend's "
                        "out-of-fold %s is not known", len(self.paths), metric)
            return
        alone = ", ".join(f"{report[p]:.4f}" for p in self.paths)
        logger.info("blend of %d runs (weights %s): out-of-fold %s %.4f on the %d rows they all validated on "
                    "(alone: %s)", len(self.paths), ", ".join(f"{w:.3g}" for w in self.weights), metric,
                    report["blend"], int(report["rows"]), alone)


def refuse_repeated_runs(paths: Sequence[str | Path]) -> None:
    """Refuse one run given twice (the same path, another spelling of it, a link to it): it would weigh double.

    Raises:
        RunError: Naming both spellings, and ``--blend-weights`` for a run meant to weigh more.
    """
    seen: dict[Path, str | Path] = {}
    for path in paths:
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise RunError(f"--run names one run twice, as {seen[key]} and as {path}: it would count twice in the "
                           "blend; give each run once (--blend-weights gives a run more weight)")
        seen[key] = path


def sigmoid_bounded(run: Run) -> bool:
    """Whether ``run`` predicts regression targets in [0, 1] (its blended scores are clipped to that range).

    That is a sigmoid output (``output_activation: sigmoid``, which ``--preset pppm`` sets), not trained with the
    scale-free ``pearson`` loss (whose folds' scores are rescaled, so they have no range).
    """
    cfg = run.config()
    sigmoid = cfg.output_activation == "sigmoid" or cfg.preset == "pppm"  # the preset's output is a sigmoid
    return cfg.task == "regression" and sigmoid and cfg.loss != "pearson"


def out_of_fold(runs: Sequence[Run], folds: Sequence[Sequence[int]]) -> list[pd.DataFrame]:
    """Each run's out-of-fold predictions of its chosen ``folds``, read once for :class:`RunBlend`.

    Raises:
        RunError: A chosen fold without its out-of-fold file.
    """
    return [_oof(run, chosen) for run, chosen in zip(runs, folds, strict=True)]


def _oof(run: Run, folds: Sequence[int]) -> pd.DataFrame:
    missing = [f for f in folds if not run.fold_done(f)]
    if missing:
        raise RunError(f"{run.path}: fold {missing[0]} has no out-of-fold file (in {run.fold_dir(missing[0])}); "
                       "a blend standardises each run by its out-of-fold predictions: finish the fold with "
                       "attnpool train --resume, or leave it out with --folds")
    frame = pd.concat([run.fold_oof(f) for f in folds], ignore_index=True)
    scales = FoldScales.of_run(run, folds)
    if scales is None:
        return frame
    # a Pearson-loss run predicts on its folds' common scale (FoldScales), so its statistics are taken on that too
    values = scales.rescale(oof_scores(frame, "regression", None), frame["fold"].to_numpy())
    return frame.assign(**prediction_columns("regression", None, values, with_labels=False))


def _weights(weights: Sequence[float] | None, count: int) -> np.ndarray:
    if weights is None:
        return np.full(count, 1.0 / count)
    values = np.asarray(list(weights), dtype=np.float64)
    if values.shape != (count,) or not np.all(np.isfinite(values)) or np.any(values < 0) or values.sum() <= 0:
        raise ValueError(f"blend weights: give one non-negative number per run ({count} runs), not all zero; got "
                         f"{list(weights)}")
    return values / values.sum()
