"""What a run shows a person: the learning-curve plot and the one-screen summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from attnpool.config import TrainConfig
from attnpool.runs.files import atomic_write
from attnpool.runs.run import CURVES_FILE, LOG_FILE, METRICS_FILE, OOF_FILE, Run


def plot_learning_curves(run: Run, fold_ids: list[int], metric: str) -> Path | None:
    """Training loss, validation loss and the validation metric against steps, one line per fold (PNG)."""
    histories = {fold: history for fold in fold_ids if (history := run.fold_history(fold)) is not None}
    if not histories:
        return None
    from matplotlib.figure import Figure  # no pyplot: a file, never a window, whatever the user's backend


    fig = Figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    panels = [("loss", "training loss"), ("eval_loss", "validation loss"), (f"eval_{metric}", f"validation {metric}")]
    for ax, (key, title) in zip(axes, panels, strict=True):
        for fold, history in histories.items():
            points = [(h["step"], h[key]) for h in history if key in h and h[key] is not None]
            if points:
                steps, values = zip(*points, strict=True)
                ax.plot(steps, values, marker="o" if len(points) < 20 else None, ms=3, label=f"fold {fold}")
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(run.path.name)
    out = run.curves_file
    atomic_write(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def summary_table(cfg: TrainConfig, run: Run, metrics: dict[str, Any], seconds: float) -> str:
    """The one-screen summary that ends a run."""
    folds = metrics["folds"]
    names = [k for k in ("pearson", "spearman", "rmse", "accuracy", "macro_f1", "auc") if any(k in f for f in folds)]
    lines = [f"attnpool train: {cfg.task}, model {cfg.model}, pooling {cfg.pooling}", ""]
    header = ["fold", *names, "n_valid"]
    rows = [[str(f["fold"]), *(_fmt(f.get(n, float("nan"))) for n in names), str(f.get("n_valid", ""))] for f in folds]
    overall = metrics.get("overall", {})
    if overall:
        rows.append(["all (oof)", *(_fmt(overall.get(n, float("nan"))) for n in names), str(overall.get("n", ""))])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    if "pearson_folds_standardised" in overall:
        lines.append(f"all (oof) with each fold's predictions standardised (the Pearson loss leaves each fold its own "
                     f"scale): pearson {_fmt(overall['pearson_folds_standardised'])}")
    if metrics.get("complete"):
        state = "complete"
    elif cfg.only_folds is not None:
        done = ", ".join(str(f["fold"]) for f in folds)
        state = (f"fold(s) {done} done, as --only-folds asked; the others train with --resume (and --only-folds "
                 "to choose)")
    else:
        state = "INCOMPLETE (run again with --resume to finish)"
    took = f"{seconds / 60:.1f} min"
    if cfg.resume and metrics.get("train_seconds") is not None:  # the calls before this one trained folds too
        took += f" this call (the folds' training over every call: {metrics['train_seconds'] / 60:.1f} min)"
    lines += ["", f"{state}; {took}; outputs in {run.path}:",
              f"  {OOF_FILE}  {METRICS_FILE}  {CURVES_FILE}  fold_K/model/  {LOG_FILE}"]
    return "\n".join(lines)
