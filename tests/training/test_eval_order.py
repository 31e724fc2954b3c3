"""Under bf16 the Trainer's evaluations score the validation rows in the batches of the out-of-fold prediction."""

from __future__ import annotations

import transformers

import attnpool
from model_helpers import save_tiny_encoder, write_toy_csv


class _Scores(transformers.TrainerCallback):
    def __init__(self):
        self.pearson = []
        self.widths = []  # each evaluation's batch widths (padded lengths), in the loader's order

    def on_evaluate(self, args, state, control, metrics=None, eval_dataloader=None, **kwargs):
        self.pearson.append(metrics["eval_pearson"])
        self.widths.append([batch["input_ids"].shape[1] for batch in eval_dataloader])


def test_the_best_evaluations_pearson_is_the_folds_pearson_in_metrics_json_under_bf16(tmp_path):
    """The progress line said val pearson 0.2776 and metrics.json 0.2773: other batches, so other bf16 roundings."""
    write_toy_csv(tmp_path / "train.csv", n=40, seed=0)
    scores = _Scores()
    result = attnpool.train({"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"],
                             "model": save_tiny_encoder(tmp_path / "encoder"), "folds": 2, "only_folds": [0],
                             "epochs": 2, "max_length": 24, "batch_size": 4, "eval_batch_size": 3,
                             "pooling_options": {"attn_size": 8}, "precision": "bf16"},
                            output_dir=str(tmp_path / "run"), callbacks=[scores])
    assert len(scores.pearson) == 2
    # the same logits; only the order of the rows in the float32 sums differs (in fp32 the runs agreed to 1e-7)
    assert abs(result.metrics["folds"][0]["pearson"] - max(scores.pearson)) < 1e-6, (result.metrics, scores.pearson)


def test_the_trainer_evaluates_in_the_given_length_sorted_order_not_its_own_shuffle(tmp_path):
    """With group_by_length the Trainer's own eval sampler shuffled the rows in megabatches of 50 batches: on 20 rows
    (one megabatch) the order held by chance, on 400 the widths jumped back up after 25 batches."""
    write_toy_csv(tmp_path / "train.csv", n=400, seed=1)
    scores = _Scores()
    attnpool.train({"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"],
                    "model": save_tiny_encoder(tmp_path / "encoder"), "folds": 2, "only_folds": [0], "epochs": 1,
                    "max_length": 24, "batch_size": 16, "eval_batch_size": 2, "pooling_options": {"attn_size": 8},
                    "precision": "fp32"}, output_dir=str(tmp_path / "run"), callbacks=[scores])
    widths = scores.widths[-1]
    assert len(widths) == 100 and len(set(widths)) > 1
    assert widths == sorted(widths, reverse=True) or widths == sorted(widths), widths
