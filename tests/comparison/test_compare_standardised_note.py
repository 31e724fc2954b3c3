"""compare.md names the score of --loss pearson runs: each fold's predictions standardised, not the pooled Pearson."""

from __future__ import annotations

from attnpool.comparison.summary import _markdown

_ROW = {"pooler": "mean", "baseline": True, "mean": 0.5, "std": 0.1, "ci_low": 0.4, "ci_high": 0.6, "ci_method": "t",
        "parameters_added": 0, "pooling_entropy": None, "pooling_special_share": None, "time_ratio": 1.0,
        "memory_ratio": 1.0, "per_seed": {"0": 0.5}}


def test_the_table_header_says_the_pearson_of_a_pearson_loss_run_is_per_fold_standardised():
    table = _markdown([_ROW], "pearson", "mean", [0], 100, standardised=True).splitlines()
    assert table[2].startswith("| pooler | pearson (each fold's predictions standardised, as --loss pearson needs) "
                               "mean ± std | 95% CI |")
    plain = _markdown([_ROW], "pearson", "mean", [0], 100).splitlines()
    assert plain[2].startswith("| pooler | pearson mean ± std | 95% CI |")


def test_a_run_is_said_to_be_scored_standardised_when_its_metrics_have_the_per_fold_pearson(tmp_path):
    from attnpool.comparison import summary
    from attnpool.runs import Run
    from model_helpers import make_run, save_tiny_encoder

    run = Run(make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), loss="pearson"))
    run.write_metrics({"folds": [], "overall": {"pearson": 0.2, "pearson_folds_standardised": 0.9}, "complete": True})
    assert summary._standardised(run.path) and summary.run_score(run.path, "regression") == 0.9
    run.write_metrics({"folds": [], "overall": {"pearson": 0.2}, "complete": True})
    assert not summary._standardised(run.path)
