"""The results of explain and compare print as a summary, not as every number they hold."""

from __future__ import annotations

from pathlib import Path

from explain_helpers import PIECES, tiny_model, wordpiece_tokenizer

import attnpool
from attnpool.comparison.summary import CompareResult


def test_an_explanation_prints_as_a_summary_not_its_weights():
    words = [piece for piece in PIECES if piece.isalpha()][:3]
    texts = [" ".join(words * 20), words[0], words[1]]
    explanation = attnpool.explain(tiny_model(), wordpiece_tokenizer(), texts, max_length=64, erasure_k=1)
    shown = repr(explanation)
    assert shown.startswith("Explanation(examples=<3>, problem_type=") and "aopc=" in shown
    assert len(shown) < 400, shown
    example = repr(explanation.examples[0])
    assert example.startswith("ExampleExplanation(index=0, ") and "tokens=" in example and len(example) < 300


def test_a_comparison_prints_its_rows_once_without_its_markdown_table():
    result = CompareResult(Path("cmp"), "pearson", [{"pooler": "mean"}], 2, "| pooler |\n|---|\n| mean |\n")
    assert "| pooler |" not in repr(result) and "'pooler': 'mean'" in repr(result)
    assert result.markdown.startswith("| pooler |")
