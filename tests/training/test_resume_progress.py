"""The progress line of a fold resumed from a checkpoint: its best and last evaluation are the checkpoint's too."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest
import transformers
from trainer_helpers import tiny_model, tiny_trainer

from attnpool.training.progress import FoldProgress


def _resumed_state(history, best_metric, step=6):
    return SimpleNamespace(global_step=step, max_steps=10, epoch=1.5, is_world_process_zero=True,
                           log_history=history, best_metric=best_metric)


@pytest.mark.parametrize(("metric", "greater", "values", "best"), [
    ("pearson", True, [0.1, 0.5, 0.3], 0.5),
    ("rmse", False, [0.4, 0.2, 0.3], 0.2),
    ("pearson", True, [math.nan, 0.2, 0.1], 0.2),  # a NaN best_metric (the first evaluation's) is not the best
])
def test_a_resumed_line_starts_from_the_checkpoints_best_and_last_evaluation(metric, greater, values, best):
    stream = io.StringIO()
    bar = FoldProgress("fold 0", mode="lines", stream=stream, interval=1e9)
    args = SimpleNamespace(num_train_epochs=2, metric_for_best_model=metric, greater_is_better=greater)
    history = [{"loss": 1.0, "step": 1}]
    history += [{f"eval_{metric}": v, "step": 2 * (i + 1)} for i, v in enumerate(values)]
    saved_best = values[0] if math.isnan(values[0]) else best  # the Trainer's best_metric stays NaN after a NaN
    bar.on_train_begin(args, _resumed_state(history, saved_best), None)
    bar.on_evaluate(args, _resumed_state(history, saved_best, step=8), None,
                    metrics={f"eval_{metric}": values[-1]})  # no better than the best before the checkpoint
    line = stream.getvalue().splitlines()[-1]
    assert f"val {metric} {values[-1]:.4f} (best {best:.4f})" in line, line


def test_a_fresh_training_has_no_best_until_its_first_evaluation():
    stream = io.StringIO()
    bar = FoldProgress("fold 0", mode="lines", stream=stream, interval=0)
    args = SimpleNamespace(num_train_epochs=2, metric_for_best_model="pearson", greater_is_better=True)
    bar.on_train_begin(args, _resumed_state([], None, step=0), None)
    bar.on_step_end(args, _resumed_state([], None, step=1), None)
    assert "val pearson" not in stream.getvalue()


class _StopAt6(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= 6


def test_after_resume_the_trainers_best_is_the_lines_best(tmp_path):
    """Resumed at checkpoint-6 with other weights (a worse model): the best stays that of the evaluations before."""
    tiny_trainer(tmp_path, epochs=2.0, eval_steps=2, callbacks=[_StopAt6()]).train()
    stream = io.StringIO()
    trainer = tiny_trainer(tmp_path, model=tiny_model(seed=7), epochs=2.0, eval_steps=2)
    progress = next(c for c in trainer.callback_handler.callbacks if isinstance(c, FoldProgress))
    progress.mode, progress.stream = "lines", stream
    trainer.train(resume_from_checkpoint=True)
    best = max(e["eval_pearson"] for e in trainer.state.log_history if "eval_pearson" in e)
    assert trainer.state.best_metric == pytest.approx(best)
    assert f"(best {best:.4f})" in stream.getvalue().splitlines()[-1], stream.getvalue()
