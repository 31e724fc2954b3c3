"""The explain report: one self-contained HTML page (inline CSS, SVG and a little script) and a JSON file.

The page needs no network: no external stylesheet, script, font or image. Every text from the data is escaped.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnpool.explanations.atomic import write_texts_together
from attnpool.explanations.layers import layer_section
from attnpool.explanations.result import ExampleExplanation, Explanation
from attnpool.explanations.svg import COLORS, LABELS, esc, fmt_number, svg_curves
from attnpool.explanations.words import SPECIAL, Word
from attnpool.runs.files import check_writable

WORD_RGB = "234, 88, 12"  # orange: dark text stays readable on its strongest shade
SPECIAL_RGB = "75, 85, 99"


def write_report(explanation: Explanation, html_path: str | Path, json_path: str | Path | None = None,
                 *, title: str | None = None) -> tuple[Path, Path]:
    """Write the HTML report and the JSON file with the same numbers: both or neither, each atomically.

    Both are rendered, then written to temporary files beside their paths, then renamed into place, the HTML last:
    when one cannot be written, only the temporary files are deleted and an earlier report stays as it was.

    Args:
        explanation: What :func:`attnpool.explain` returned.
        html_path: The HTML file.
        json_path: The JSON file; default: ``html_path`` with the suffix ``.json``.
        title: The page title; default: ``attnpool explain``.

    Returns:
        ``(html_path, json_path)``.

    Raises:
        ValueError: A path that cannot be written (see :func:`report_paths`).
    """
    html_path, json_path = report_paths(html_path, json_path)
    data = json.dumps(explanation.to_dict(), indent=1, allow_nan=False) + "\n"
    page = render_html(explanation, title=title)
    write_texts_together({json_path: data, html_path: page})
    return html_path, json_path


def report_paths(html_path: str | Path, json_path: str | Path | None = None) -> tuple[Path, Path]:
    """The two report files, checked before anything runs: distinct, not folders, each where a folder is or can be.

    ``~`` in a path is the home folder, as a shell reads it.

    Raises:
        ValueError: Both would be one file, a path names a folder, a file stands where a folder above a path
            would be, or that folder is not writable (saying which option to change).
    """
    html_path = Path(html_path).expanduser()  # "~/r.html" is in the home folder, as a shell would read it
    json_path = Path(json_path).expanduser() if json_path is not None else html_path.with_suffix(".json")
    if json_path.resolve() == html_path.resolve():
        raise ValueError(f"the JSON and HTML reports would both be written to {html_path}; give another --json "
                         "path, or an --output ending in .html")
    for option, path, suffix in (("--output", html_path, ".html"), ("--json", json_path, ".json")):
        if path.is_dir():
            raise ValueError(f"{option} {path} is a folder; give a file name, e.g. {path / ('report' + suffix)}")
        check_writable(path, option)  # not under a file, in a folder that takes files
    return html_path, json_path


def render_html(explanation: Explanation, *, title: str | None = None) -> str:
    """The report as one HTML string."""
    title = title or "attnpool explain"
    examples = explanation.examples
    errors = [x.error for x in examples if x.error is not None]
    classification = explanation.problem_type != "regression"
    # the true median (the mean of the middle two of an even count), so half the examples are above it at most;
    # of the finite errors: one NaN would make it NaN, and no example would be above it
    finite = [e for e in errors if math.isfinite(e)]
    median_error = statistics.median(finite) if finite else None
    parts = [
        "<!DOCTYPE html>", '<html lang="en">',
        '<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}: {len(examples)} examples</title>", f"<style>{_CSS}</style>", "</head>",
        "<body>",
        f'<header class="page"><h1>{esc(title)}</h1><p class="meta">{_meta(explanation)}</p></header>',
        '<section class="summary">', _summary_card(explanation), _weights_card(explanation), "</section>",
        _controls(classification, has_errors=bool(errors)),
        '<main id="examples">', *(_example(x, explanation, median_error) for x in examples), "</main>",
        f"<script>{_SCRIPT}</script>",
        "</body>", "</html>",
    ]
    return "\n".join(parts) + "\n"


def _meta(explanation: Explanation) -> str:
    pooler = explanation.pooler.get("type", "?")
    items = [
        f"{len(explanation.examples)} examples",
        f"task: {explanation.problem_type.replace('_', ' ')}",
        f"pooler: {pooler}" + (f", {explanation.num_heads} heads" if explanation.num_heads > 1 else ""),
        f"max_length {explanation.max_length}",
    ]
    if explanation.source:
        items.insert(0, f"model: {explanation.source}")
    return " · ".join(esc(i) for i in items)


def _summary_card(explanation: Explanation) -> str:
    summary = explanation.erasure
    if not summary.k or not any(c > 0 for c in summary.counts):
        return '<div class="card"><h2>Faithfulness</h2><p>No erasure test was run (erasure_k = 0 or no removable ' \
               "tokens).</p></div>"
    # shown up to the largest k some example reaches (the JSON keeps every k up to erasure_k)
    shown = 1 + max(i for i, c in enumerate(summary.counts) if c > 0)
    rows = "".join(
        f"<tr><td>{k}</td>"
        + "".join(f"<td>{fmt_number(getattr(summary, s)[i])}</td>" for s in COLORS)
        + f"<td>{summary.counts[i]}</td></tr>"
        for i, k in enumerate(summary.k[:shown])
    )
    aopc = "".join(f"<td><b>{fmt_number(summary.aopc[s])}</b></td>" for s in COLORS)
    table = (
        '<table class="nums"><thead><tr><th>k</th>'
        + "".join(f'<th><span class="key" style="background:{COLORS[s]}"></span>{esc(LABELS[s])}</th>' for s in COLORS)
        + f"<th>examples</th></tr></thead><tbody>{rows}</tbody>"
        + f"<tfoot><tr><td>AOPC</td>{aopc}<td></td></tr></tfoot></table>"
    )
    chart = svg_curves(summary.k[:shown], {s: getattr(summary, s)[:shown] for s in COLORS}, width=460, height=250,
                       y_label="|Δ prediction|")
    return (
        '<div class="card wide"><h2>Faithfulness: the erasure test</h2>'
        f'<p class="verdict">{esc(_verdict(summary.aopc))}</p>'
        f'<div class="chart-row"><figure>{chart}<figcaption>Mean {esc(explanation.erasure_measure)} after removing k '
        f"tokens (mean over examples).</figcaption></figure>{table}</div>"
        '<p class="help">Each example is run again with k tokens removed (their attention mask set to 0; special '
        "tokens are never removed): the k most-weighted, k random (seed "
        f"{explanation.seed}) and the k least-weighted. If the weights explain the model, the red curve stays well "
        "above the grey one and the blue one stays low. AOPC is the mean of a curve over k.</p></div>"
    )


def _verdict(aopc: dict[str, float | None]) -> str:
    top, rnd, bottom = aopc.get("top"), aopc.get("random"), aopc.get("bottom")
    if top is None or rnd is None:
        return "Not enough tokens to compare."
    if bottom is not None and abs(top - bottom) <= 1e-9 * max(1.0, abs(top)):  # ties: the same tokens both ways
        return ("Removing the most-weighted tokens and the least-weighted ones changes the prediction alike: the "
                "weights do not rank the tokens (equal weights, as mean pooling's, or all on special tokens, as cls "
                "pooling's), so this test says nothing about them.")
    if bottom is not None and top <= bottom:
        return (f"Removing the least-weighted tokens moves the prediction at least as much as removing the "
                f"most-weighted ones ({fmt_number(bottom)} against {fmt_number(top)}): do not read these weights as "
                "an explanation.")
    if rnd <= 1e-12:
        return ("Removing random tokens does not move the prediction; removing the most-weighted ones moves it by "
                f"{fmt_number(top)} on average.")
    ratio = top / rnd
    if ratio >= 1.5:
        return (f"Removing the most-weighted tokens moves the prediction {ratio:.1f}× as much as removing random "
                "ones: the weights point at tokens the model relies on.")
    if ratio > 1.0:
        return (f"Removing the most-weighted tokens moves the prediction only {ratio:.2f}× as much as removing "
                "random ones: the weights are a weak guide to what the model uses.")
    return (f"Removing the most-weighted tokens moves the prediction no more than removing random ones "
            f"({ratio:.2f}×): do not read these weights as an explanation.")


def _weights_card(explanation: Explanation) -> str:
    examples = explanation.examples
    mean_entropy = sum(x.concentration for x in examples) / len(examples) if examples else 0.0
    mean_special = sum(sum(x.special_weight) / len(x.special_weight) for x in examples) / max(len(examples), 1)
    scale = "".join(
        f'<span class="w" style="background:rgba({WORD_RGB},{0.85 * v:.2f})">{int(100 * v)}%</span>'
        for v in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    body = [
        '<div class="card"><h2>Reading the weights</h2>',
        f'<p>Colour: a word\'s pooling weight relative to the largest in its example (and head): {scale}. Hover a '
        'word for its weight and sub-word pieces. <span class="sp">[CLS]</span> special tokens are grey, apart '
        "from the words.</p>",
        f"<p>Mean normalised entropy: <b>{mean_entropy:.3f}</b> (0: all weight on one token, 1: spread evenly). "
        f"Mean weight on special tokens: <b>{100 * mean_special:.1f}%</b>.</p>",
    ]
    if explanation.num_heads > 1:
        body.append(f"<p>The pooler has {explanation.num_heads} heads, shown one per line; the erasure test ranks "
                    "tokens by their weight averaged over the heads.</p>")
    if explanation.layer_weights:
        body.append(layer_section(explanation.layer_weights, explanation.layer_indices))
    body.append("</div>")
    return "".join(body)


def _controls(classification: bool, *, has_errors: bool) -> str:
    error_options = (
        '<option value="wrong">misclassified</option><option value="right">correct</option>'
        if classification
        else '<option value="wrong">error above the median</option>'
        '<option value="right">error at or below the median</option>'
    )
    filter_select = (
        f'<label>Show <select id="filter"><option value="all">all</option>{error_options}</select></label>'
        if has_errors
        else '<select id="filter" hidden><option value="all">all</option></select>'
    )
    return (
        '<nav class="controls"><label>Sort by <select id="sort">'
        '<option value="index">input order</option>'
        + ('<option value="error">largest error first</option>' if has_errors else "")
        + '<option value="entropy-asc">most concentrated weights first</option>'
        '<option value="entropy-desc">most spread weights first</option>'
        '<option value="gap-asc">least faithful first (top − random AOPC)</option>'
        '<option value="gap-desc">most faithful first</option>'
        "</select></label>"
        f"{filter_select}"
        '<label>Find <input id="find" type="search" placeholder="word in the text"></label>'
        '<span id="count"></span></nav>'
    )


def _example(x: ExampleExplanation, explanation: Explanation, median_error: float | None) -> str:
    classification = explanation.problem_type != "regression"
    if x.error is None or math.isnan(x.error):
        wrong = ""
    elif classification:
        wrong = "1" if x.error > 0 else "0"
    else:
        wrong = "1" if median_error is not None and x.error > median_error else "0"
    top, rnd = x.erasure.aopc.get("top"), x.erasure.aopc.get("random")
    gap = "" if top is None or rnd is None else f"{top - rnd:.6g}"
    searchable = " ".join(t for t in (x.text, x.text_pair) if t).lower()
    attrs = (
        f'id="ex-{x.index}" data-index="{x.index}" data-error="{"" if x.error is None else f"{x.error:.6g}"}" '
        f'data-entropy="{x.concentration:.6g}" data-gap="{gap}" data-wrong="{wrong}" data-text="{esc(searchable)}"'
    )
    badges = []
    if x.error is not None and classification:
        badges.append('<span class="badge bad">wrong</span>' if x.error > 0 else '<span class="badge ok">right</span>')
    if x.truncated:
        badges.append(f'<span class="badge">truncated to {explanation.max_length} tokens</span>')
    head = [f'<span class="idx">#{x.index}</span>']
    if x.id is not None:
        head.append(f'<span class="id">id {esc(x.id)}</span>')
    head.append(f"<span>prediction <b>{esc(_show(x.prediction))}</b>"
                + (f" (p = {x.score:.3f})" if explanation.problem_type == "single_label_classification" else "")
                + "</span>")
    if x.label is not None:
        head.append(f"<span>label <b>{esc(_show(x.label))}</b></span>")
    if x.error is not None and not classification:
        head.append(f"<span>error <b>{fmt_number(x.error)}</b></span>")
    head.append(f'<span title="entropy / log(tokens), averaged over heads">entropy <b>{x.concentration:.3f}</b>'
                "</span>")
    special = sum(x.special_weight) / len(x.special_weight)
    head.append(f'<span title="weight on special tokens">special {100 * special:.0f}%</span>')
    lines = []
    for h in range(explanation.num_heads):
        label = f'<span class="hl">head {h + 1}</span>' if explanation.num_heads > 1 else ""
        lines.append(f'<div class="line">{label}<p class="text">{_words(x.words, h)}</p></div>')
    return (
        f'<article class="ex" {attrs}><header>{"".join(head)}{"".join(badges)}</header>'
        f'<div class="body"><div class="lines">{"".join(lines)}</div>{_example_erasure(x)}</div></article>'
    )


def _show(value: Any) -> str:
    if isinstance(value, float):
        return fmt_number(value, 4)
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value) if value else "(none)"
    return str(value)


def _words(words: Sequence[Word], head: int) -> str:
    """The words of one example, coloured by one head's weights, with the text's own spacing.

    Words are shaded against the heaviest word, special tokens against the heaviest token: a pooler that keeps most
    of its weight on ``[CLS]`` still shows which words it reads (the tooltips give the true weights).
    """
    top = max((w.weights[head] for w in words), default=0.0) or 1.0
    top_word = max((w.weights[head] for w in words if w.kind != SPECIAL), default=0.0) or 1.0
    out = []
    previous: Word | None = None
    for word in words:
        if previous is not None:
            joined = (word.kind != SPECIAL and previous.kind != SPECIAL and word.segment == previous.segment
                      and word.start is not None and previous.end is not None and word.start == previous.end)
            if not joined:
                out.append(" ")
        weight = word.weights[head]
        alpha = 0.85 * max(weight, 0.0) / (top if word.kind == SPECIAL else top_word)
        if word.kind == SPECIAL:
            color = "#fff" if alpha > 0.35 else "#4b5563"
            out.append(f'<span class="sp" style="background:rgba({SPECIAL_RGB},{alpha:.3f});color:{color}" '
                       f'title="special token · weight {weight:.4f}">{esc(word.text)}</span>')
        else:
            pieces = f" · pieces: {' '.join(word.pieces)}" if len(word.pieces) > 1 else ""
            out.append(f'<span class="w" style="background:rgba({WORD_RGB},{alpha:.3f})" '
                       f'title="weight {weight:.4f} ({100 * weight:.1f}%){esc(pieces)}">{esc(word.text)}</span>')
        previous = word
    return "".join(out)


def _example_erasure(x: ExampleExplanation) -> str:
    curves = x.erasure
    if not any(v is not None for v in curves.top):
        return '<div class="mini"><p class="help">no removable token</p></div>'
    chart = svg_curves(curves.k, {s: getattr(curves, s) for s in COLORS}, width=230, height=130, compact=True)
    aopc = " · ".join(f'<span style="color:{COLORS[s]}">{s} {fmt_number(curves.aopc[s])}</span>' for s in COLORS)
    return f'<div class="mini">{chart}<p class="help">AOPC {aopc}</p></div>'


WORDS_CSS = """.line { display: flex; gap: 10px; align-items: baseline; }
.hl { flex: 0 0 auto; font-size: 12px; color: var(--muted); width: 52px; }
.text { margin: 2px 0 6px; line-height: 1.9; overflow-wrap: anywhere; }
.w { border-radius: 3px; padding: 1px 2px; }
.sp { font: 11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--muted);
      border: 1px dashed #9ca3af; border-radius: 3px; padding: 0 3px; margin: 0 2px; }
"""  # the shaded words: shared with the page of attnpool serve

_CSS = """
:root { --fg: #1f2937; --muted: #6b7280; --line: #e5e7eb; --card: #fff; --bg: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; background: var(--bg); color: var(--fg);
       font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 0 0 10px; }
.meta, .help { color: var(--muted); font-size: 13px; }
.summary { display: flex; flex-wrap: wrap; gap: 16px; margin: 16px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px;
        flex: 1 1 320px; }
.card.wide { flex: 3 1 640px; }
.chart-row { display: flex; flex-wrap: wrap; gap: 20px; align-items: flex-start; }
figure { margin: 0; } figcaption { color: var(--muted); font-size: 12px; max-width: 460px; }
.verdict { font-weight: 600; }
table.nums { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
table.nums th, table.nums td { padding: 3px 10px; text-align: right; border-bottom: 1px solid var(--line); }
table.nums th:first-child, table.nums td:first-child { text-align: left; }
table.nums tfoot td { border-top: 2px solid var(--fg); border-bottom: 0; }
.key { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; }
.chart text { fill: var(--muted); } .chart .grid { stroke: var(--line); } .chart .axis { stroke: #9ca3af; }
.controls { position: sticky; top: 0; z-index: 2; display: flex; flex-wrap: wrap; gap: 18px; align-items: center;
            background: var(--bg); padding: 10px 0; border-bottom: 1px solid var(--line); margin-bottom: 12px; }
.controls select, .controls input { font: inherit; margin-left: 6px; padding: 2px 6px; }
#count { color: var(--muted); font-size: 13px; }
.ex { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 16px;
      margin: 0 0 12px; }
.ex header { display: flex; flex-wrap: wrap; gap: 6px 18px; align-items: baseline; font-size: 13px;
             color: var(--muted); margin-bottom: 6px; }
.ex header b { color: var(--fg); } .idx { font-weight: 700; color: var(--fg); }
.badge { border-radius: 9px; padding: 0 8px; background: #eef2ff; color: #3730a3; font-size: 12px; }
.badge.bad { background: #fee2e2; color: #991b1b; } .badge.ok { background: #dcfce7; color: #166534; }
.body { display: flex; gap: 18px; align-items: flex-start; }
.lines { flex: 1 1 auto; min-width: 0; }
""" + WORDS_CSS + """.mini { flex: 0 0 240px; } .mini .help { margin: 0; font-size: 11px; }
.lw { display: flex; gap: 8px; align-items: center; font-size: 12px; color: var(--muted); }
.lw span:first-child { width: 136px; } .lw .bar { height: 9px; background: #6366f1; border-radius: 2px; }
@media (max-width: 800px) { body { padding: 12px; } .body { flex-direction: column; } }
"""

_SCRIPT = """
(function () {
  var main = document.getElementById('examples');
  var items = Array.prototype.slice.call(main.querySelectorAll('article.ex'));
  var sort = document.getElementById('sort'), filter = document.getElementById('filter');
  var find = document.getElementById('find'), count = document.getElementById('count');
  function num(el, key) { var v = el.getAttribute('data-' + key); return v === '' ? NaN : parseFloat(v); }
  function by(key, sign) {
    return function (a, b) {
      var x = num(a, key), y = num(b, key);
      if (isNaN(x) && isNaN(y)) { return num(a, 'index') - num(b, 'index'); }
      if (isNaN(x)) { return 1; } if (isNaN(y)) { return -1; }
      return sign * (x - y) || num(a, 'index') - num(b, 'index');
    };
  }
  var orders = { 'index': by('index', 1), 'error': by('error', -1), 'entropy-asc': by('entropy', 1),
                 'entropy-desc': by('entropy', -1), 'gap-asc': by('gap', 1), 'gap-desc': by('gap', -1) };
  function apply() {
    var list = items.slice().sort(orders[sort.value] || orders.index);
    var want = filter.value, needle = find.value.trim().toLowerCase(), shown = 0;
    list.forEach(function (el) {
      var wrong = el.getAttribute('data-wrong');
      var ok = want === 'all' || (want === 'wrong' && wrong === '1') || (want === 'right' && wrong === '0');
      if (needle && el.getAttribute('data-text').indexOf(needle) < 0) { ok = false; }
      el.hidden = !ok; if (ok) { shown += 1; }
      main.appendChild(el);
    });
    count.textContent = shown + ' of ' + items.length + ' examples shown';
  }
  sort.addEventListener('change', apply); filter.addEventListener('change', apply);
  find.addEventListener('input', apply); apply();
})();
"""
