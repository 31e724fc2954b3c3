"""The report: a self-contained, well-formed HTML page holding every example, and the JSON with the same numbers."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from explain_helpers import bytelevel_tokenizer, tiny_model, wordpiece_tokenizer
from transformers import BertConfig

import attnpool
from attnpool import AttnPoolForSequenceClassification
from attnpool.explanations import page as page_module
from attnpool.explanations.page import render_html, report_paths, write_report
from attnpool.explanations.svg import fmt_number, svg_curves
from model_helpers import COMMON, tiny_config

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_LEAVES = {"line", "circle", "polyline", "path", "rect"}  # written self-closing inside <svg>
TEXTS = ["the unbelievable cat sat", "a big red dog <script>alert('x')</script> & co", "cat", "the mat , the dog !"]
PAIRS = ["red dogs", "the mat", "a cat sat", "big"]


class _Checker(HTMLParser):
    """Collects tags, attributes and text, and checks that every element is closed in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.articles, self.attrs, self.scripts, self.text = [], [], [], [], 0, []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.attrs.extend((tag, k, v) for k, v in attrs)
        if tag == "article":
            self.articles.append(dict(attrs))
        if tag == "script":
            self.scripts += 1
            self._in_script = True
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.attrs.extend((tag, k, v) for k, v in attrs)
        if tag not in VOID | SVG_LEAVES:
            self.errors.append(f"self-closing <{tag}/>")

    def handle_endtag(self, tag):
        self._in_script = False
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if not self._in_script:
            self.text.append(data)


@pytest.fixture(scope="module")
def explanation():
    model = tiny_model("multihead_attention", num_labels=2, num_heads=2)
    return attnpool.explain(model, wordpiece_tokenizer(), TEXTS, text_pairs=PAIRS, labels=["c0", "c1", "c1", None],
                            erasure_k=3)


@pytest.fixture(scope="module")
def written(explanation, tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    html_path, json_path = write_report(explanation, folder / "report.html")
    return folder, html_path, json_path


def test_default_json_path_and_no_temporary_files(written):
    folder, html_path, json_path = written
    assert json_path == folder / "report.json" and html_path.is_file() and json_path.is_file()
    assert sorted(p.name for p in folder.iterdir()) == ["report.html", "report.json"]


def test_json_weights_sum_to_one_per_example_over_real_tokens(written, explanation):
    data = json.loads(written[2].read_text(encoding="utf-8"))
    assert len(data["examples"]) == len(TEXTS)
    for example in data["examples"]:
        weights = np.asarray(example["token_weights"])  # (heads, real tokens): no padding in there
        assert weights.shape == (2, len(example["tokens"]))
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose([sum(w["weights"][h] for w in example["words"]) for h in range(2)], 1.0,
                                   atol=1e-5)
    assert data["erasure"]["aopc"] == pytest.approx(explanation.erasure.aopc)
    assert data == json.loads(json.dumps(explanation.to_dict()))


def test_html_is_well_formed_self_contained_and_holds_every_example(written):
    page = written[1].read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert not checker.errors and checker.stack == [], (checker.errors, checker.stack)
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert [a["data-index"] for a in checker.articles] == ["0", "1", "2", "3"]
    for tag, key, value in checker.attrs:
        assert key not in ("src", "srcset", "action", "xlink:href"), (tag, key, value)
        assert key != "href" or value.startswith("#"), (tag, key, value)
        assert "url(" not in (value or "") and "http" not in (value or ""), (tag, key, value)
    assert "@import" not in page and "url(" not in page and "http://" not in page and "https://" not in page
    assert checker.scripts == 1, "one inline script: sorting and filtering"
    text = " ".join(checker.text)
    for word in ("unbelievable", "dog", "mat", "head 1", "head 2", "[CLS]", "[SEP]"):
        assert word in text


def test_text_is_escaped(written):
    page = written[1].read_text(encoding="utf-8")
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in page
    checker = _Checker()
    checker.feed(page)
    assert checker.scripts == 1, "the text's <script> did not become an element"
    assert "&amp;" in page


def test_every_word_is_coloured_by_its_weight(explanation):
    page = render_html(explanation)
    first = explanation.examples[0]
    word = max((w for w in first.words if w.kind == "word"), key=lambda w: w.weights[0])
    assert "rgba(234, 88, 12,0.850)" in page, "the heaviest word of a head gets the strongest shade"
    assert f"weight {word.weights[0]:.4f}" in page


def test_the_aggregate_erasure_curve_is_drawn(explanation):
    page = render_html(explanation)
    assert page.count("<svg") == 1 + len(TEXTS), "one aggregate chart and one per example"
    assert "most-weighted first" in page and "AOPC" in page


def test_svg_curves_leave_gaps_for_missing_values():
    svg = svg_curves([1, 2, 3, 4], {"top": [0.4, None, 0.2, 0.1], "random": [0.1, 0.1, 0.1, 0.1]})
    assert svg.count("<polyline") == 2, "top: one line for k = 3..4, none for the lone k = 1; random: one line"
    assert svg.count("<circle") == 7


def test_a_report_without_erasure_and_labels_still_renders(tmp_path):
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), ["the cat"], erasure_k=0)
    html_path, json_path = write_report(result, tmp_path / "r.html", tmp_path / "other.json")
    page = html_path.read_text(encoding="utf-8")
    assert "No erasure test was run" in page and json_path.name == "other.json"
    checker = _Checker()
    checker.feed(page)
    assert not checker.errors and len(checker.articles) == 1


def test_whitespace_pieces_of_a_byte_level_tokenizer_render_as_marks(tmp_path):
    """A newline and a double space showed in the page as the words "\u010a" and "\u0120"."""
    tokenizer = bytelevel_tokenizer()
    config = BertConfig(**{**COMMON, "vocab_size": len(tokenizer)}, max_position_embeddings=64)
    model = AttnPoolForSequenceClassification.from_encoder(config, pooling="attention",
                                                           pooling_options={"attn_size": 8}).eval()
    text = "the cat\n\nsat <q-x>&</q-x>  mat\u00a0on"
    result = attnpool.explain(model, tokenizer, [text], erasure_k=1)
    html_path, _ = write_report(result, tmp_path / "r.html")
    page = html_path.read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(page)
    assert not checker.errors and len(checker.articles) == 1
    shown = "".join(checker.text)
    assert "\u23ce" in shown and "\u2423" in shown
    assert not {"\u010a", "\u0120", "\ufffd"} & set(shown), "no raw byte-level pieces"
    assert "<q-x>" not in page and "&lt;q-x&gt;" in page, "the text is still escaped"
    words = result.examples[0].words
    assert sum(w.weights[0] for w in words) == pytest.approx(1.0, abs=1e-5)


def test_words_are_shaded_against_the_heaviest_word_when_cls_takes_most_weight():
    from attnpool.explanations.page import _words
    from attnpool.explanations.words import Word

    def word(text, kind, weight):
        return Word(text=text, kind=kind, segment=None if kind == "special" else 0, pieces=[text], positions=[0],
                    weights=[weight], start=None, end=None)

    html = _words([word("[CLS]", "special", 0.9), word("good", "word", 0.06), word("film", "word", 0.03),
                   word("[SEP]", "special", 0.01)], head=0)
    assert 'rgba(234, 88, 12,0.850)" title="weight 0.0600' in html  # the heaviest word: the strongest shade
    assert 'rgba(234, 88, 12,0.425)" title="weight 0.0300' in html  # half its weight, half the shade
    assert "0.850);color:#fff\" title=\"special token · weight 0.9000" in html


def test_a_file_where_a_folder_should_be_is_refused_up_front(tmp_path):
    """--output under a regular file failed with "[Errno 17] File exists" after the model ran, the JSON written."""
    (tmp_path / "notes").write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match=r"--output .*r\.html: .*notes is a file, not a folder, so nothing can be "
                                         r"written under it; give a path in a folder, e\.g\. .*r\.html"):
        report_paths(tmp_path / "notes" / "deeper" / "r.html")
    with pytest.raises(ValueError, match="--json .*notes is a file, not a folder"):
        report_paths(tmp_path / "r.html", tmp_path / "notes" / "r.json")
    assert report_paths(tmp_path / "new" / "r.html") == (tmp_path / "new" / "r.html", tmp_path / "new" / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"], "checking creates nothing"


def _fail_writing_html(monkeypatch):
    """Make every write of HTML text fail, as on a full disk."""
    real_write = Path.write_text

    def html_fails(path, text, *args, **kwargs):
        if ".html" in path.name:
            raise OSError("disk full")
        return real_write(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", html_fails)


def test_the_json_and_the_html_are_written_both_or_neither(explanation, tmp_path, monkeypatch):
    """The JSON was written first and stayed when the HTML could not be rendered or written."""
    with monkeypatch.context() as patch:
        _fail_writing_html(patch)
        with pytest.raises(OSError, match="disk full"):
            write_report(explanation, tmp_path / "r.html")
    monkeypatch.setattr(page_module, "render_html", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_report(explanation, tmp_path / "r.html")
    assert list(tmp_path.iterdir()) == [], "no JSON without its page, and no temporary file"


def test_a_failed_rewrite_keeps_the_earlier_report_whole(explanation, tmp_path, monkeypatch):
    """The new JSON replaced the old one, then was deleted when the HTML failed: the old page stayed, alone."""
    html_path, json_path = write_report(explanation, tmp_path / "r.html")
    before = {p.name: p.read_bytes() for p in (html_path, json_path)}
    again = dataclasses.replace(explanation, source="another model")
    with monkeypatch.context() as patch:
        _fail_writing_html(patch)
        with pytest.raises(OSError, match="disk full"):
            write_report(again, html_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "both old files, and no temporary file"
    write_report(again, html_path)
    assert json.loads(json_path.read_text())["source"] == "another model" and "another model" in html_path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]


def test_layer_weights_are_labelled_with_the_layer_each_weighs():
    """With ``pooling_layers=[-1, 0]`` the top layer's weight was shown as "layer 1 ... the lowest of them"."""
    model = AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="weighted_layer", pooling_options={"pooler": "attention"},
        pooling_layers=[-1, 0]).eval()
    with torch.no_grad():
        model.attnpool.pooler.layer_logits.copy_(torch.tensor([3.0, 0.0]))  # most weight on the top layer, listed first
    result = attnpool.explain(model, wordpiece_tokenizer(), ["the cat sat"], erasure_k=0)
    text = _visible_text(render_html(result))
    top, embeddings = (fmt_number(w) for w in result.layer_weights)
    assert re.search(rf"layer 2\s+{re.escape(top)}\s", text), text
    assert re.search(rf"layer 0 \(embeddings\)\s+{re.escape(embeddings)}\s", text), text
    assert "layer 1" not in text and "lowest" not in text
    assert "layer 0: the embeddings' output" in text


def _visible_text(page):
    checker = _Checker()
    checker.feed(page)
    checker.close()
    return " ".join(checker.text)


def test_error_above_the_median_flags_the_upper_half_of_an_even_count():
    """The upper median (errors[n // 2]) flagged only the error 4 of the errors 1, 2, 3, 4."""
    explanation = attnpool.explain(tiny_model(), wordpiece_tokenizer(), TEXTS, labels=[0.1, 0.2, 0.3, 0.4],
                                   erasure_k=0)
    for error, example in enumerate(explanation.examples, start=1):
        example.error = float(error)
    wrong = re.findall(r'data-wrong="(\d)"', render_html(explanation))
    assert wrong == ["0", "0", "1", "1"]
