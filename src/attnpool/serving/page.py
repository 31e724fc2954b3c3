"""The page at ``/``: type or paste a row, see the prediction and the words shaded by their pooling weight.

A link can carry the row in its fragment, ``/#first=the%20cat&second=a%20dog``: the page fills the fields and
predicts at once (the fragment never reaches the server's logs).

One self-contained HTML page (inline CSS and script, no external asset, font or image), rendered once at start-up
from :meth:`Service.info <attnpool.serving.service.Service.info>`. Its script posts the row to ``predict`` with
``"weights": true`` and shades the words as the explain report does (:mod:`attnpool.explanations.page`): the same
colours, a word's shade proportional to its weight relative to the largest of its row (and head), special tokens
grey and apart, one line per head, the text's own spacing. Data from the model is escaped here and written with
``textContent`` by the script; the Content-Security-Policy allows only this page's own script and style (by hash)
and requests to the server itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from attnpool.explanations.page import SPECIAL_RGB, WORD_RGB, WORDS_CSS
from attnpool.explanations.svg import esc


def render_page(info: dict[str, Any]) -> tuple[str, str]:
    """The page's HTML and the Content-Security-Policy header to serve it with."""
    script = _SCRIPT.replace("__WORD_RGB__", WORD_RGB).replace("__SPECIAL_RGB__", SPECIAL_RGB)
    config = {"fields": info["fields"], "optional": info["optional_fields"], "weights": info["token_weights"],
              "task": info["task"]}
    inputs = [_input(i, name, optional=False) for i, name in enumerate(info["fields"])]
    inputs += [_input(len(inputs) + i, name, optional=True) for i, name in enumerate(info["optional_fields"])]
    folds, runs = info["folds"], info.get("runs")
    models = (f"a blend of {len(runs)} runs (word weights from the first)" if runs
              else f"{len(folds)} fold models ensembled ({info['ensemble']})" if folds else "one saved model")
    meta = [f"encoder: {info['encoder']}", f"pooler: {info['pooler'].get('type', '?')}", f"task: {info['task']}",
            models, f"max_length {info['max_length']}", f"attnpool {info['attnpool_version']}"]
    note = "" if info["token_weights"] else (
        '<p class="help">This pooler gives no token weights: only the prediction is shown.</p>')
    html = "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">', "<title>attnpool serve</title>", f"<style>{_CSS}</style>", "</head>",
        "<body>", '<header class="page"><h1>attnpool serve</h1>',
        f'<p class="meta">{" · ".join(esc(m) for m in meta)}</p></header>',
        '<form id="form" class="card" autocomplete="off">', *inputs,
        '<div class="actions"><button type="submit" id="go">Predict</button>'
        '<span class="help">Ctrl+Enter in a field predicts too</span></div></form>', note,
        '<p id="status" role="status"></p>',
        '<section id="result" class="card" hidden><div id="prediction"></div><div id="probabilities"></div>'
        '<div id="words"></div><p class="help" id="legend" hidden>Shade: a word\'s pooling weight relative to the '
        "largest in the row (and head), as in the explain report; hover a word for its weight and sub-word pieces. "
        "Special tokens are grey.</p></section>",
        f'<script type="application/json" id="config">{_json_in_html(config)}</script>',
        f"<script>{script}</script>", "</body>", "</html>"])
    csp = (f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(_CSS)}'; connect-src 'self'; "
           "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return html + "\n", csp


def _input(index: int, name: str, *, optional: bool) -> str:
    label = esc(name) + (' <span class="help">(optional: makes a text pair)</span>' if optional else "")
    return (f'<label for="f{index}">{label}</label><textarea id="f{index}" data-field="{esc(name)}" rows="3" '
            f'spellcheck="false"{"" if optional else " required"}></textarea>')


def _json_in_html(value: Any) -> str:
    """JSON that cannot end the ``<script>`` element it sits in."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


_CSS = """
:root { --fg: #1f2937; --muted: #6b7280; --line: #e5e7eb; --card: #fff; --bg: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 960px; padding: 24px 32px 48px; background: var(--bg); color: var(--fg);
       font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
.meta, .help { color: var(--muted); font-size: 13px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px;
        margin: 16px 0; }
label { display: block; font-weight: 600; margin: 8px 0 4px; }
textarea { width: 100%; font: inherit; padding: 6px 8px; border: 1px solid #d1d5db; border-radius: 6px;
           resize: vertical; }
.actions { display: flex; gap: 14px; align-items: center; margin-top: 12px; }
button { font: inherit; font-weight: 600; padding: 6px 18px; border: 0; border-radius: 6px; background: #4338ca;
         color: #fff; cursor: pointer; } button:disabled { opacity: 0.6; cursor: wait; }
#status { min-height: 1.5em; color: var(--muted); } #status.error { color: #991b1b; font-weight: 600; }
#prediction { font-size: 18px; margin-bottom: 8px; } #prediction b { font-size: 22px; }
.prob { display: flex; gap: 8px; align-items: center; font-size: 13px; font-variant-numeric: tabular-nums; }
.prob span:first-child { width: 140px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.prob .bar { height: 9px; background: #6366f1; border-radius: 2px; }
""" + WORDS_CSS

_SCRIPT = """
(function () {
  'use strict';
  var config = JSON.parse(document.getElementById('config').textContent);
  var form = document.getElementById('form'), go = document.getElementById('go');
  var status = document.getElementById('status'), result = document.getElementById('result');
  var inputs = Array.prototype.slice.call(form.querySelectorAll('textarea'));
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function number(v) { return Math.abs(v) >= 1e-3 || v === 0 ? String(Number(v.toPrecision(4))) : v.toExponential(1); }
  function words(list, head) {
    // Words are shaded against the heaviest word and special tokens against the heaviest token, so that a pooler
    // that keeps most of its weight on [CLS] still shows which words it reads; the tooltips give the true weights.
    var top = Math.max.apply(null, list.map(function (w) { return w.weights[head]; })) || 1;
    var topWord = Math.max.apply(null, list.filter(function (w) { return w.kind !== 'special'; })
      .map(function (w) { return w.weights[head]; }).concat([0])) || 1;
    var p = el('p', 'text'), previous = null;
    list.forEach(function (w) {
      if (previous) {
        var joined = w.kind !== 'special' && previous.kind !== 'special' && w.segment === previous.segment &&
          w.start !== null && previous.end !== null && w.start === previous.end;
        if (!joined) { p.appendChild(document.createTextNode(' ')); }
      }
      var weight = w.weights[head], scale = w.kind === 'special' ? top : topWord, span;
      var alpha = (0.85 * Math.max(weight, 0) / scale).toFixed(3);
      if (w.kind === 'special') {
        span = el('span', 'sp', w.text);
        span.style.background = 'rgba(__SPECIAL_RGB__,' + alpha + ')';
        span.style.color = alpha > 0.35 ? '#fff' : '#4b5563';
        span.title = 'special token · weight ' + weight.toFixed(4);
      } else {
        span = el('span', 'w', w.text);
        span.style.background = 'rgba(__WORD_RGB__,' + alpha + ')';
        span.title = 'weight ' + weight.toFixed(4) + ' (' + (100 * weight).toFixed(1) + '%)' +
          (w.pieces.length > 1 ? ' · pieces: ' + w.pieces.join(' ') : '');
      }
      p.appendChild(span);
      previous = w;
    });
    return p;
  }
  function show(body) {
    var row = body.predictions[0], box = document.getElementById('prediction');
    var probs = document.getElementById('probabilities'), shaded = document.getElementById('words');
    box.textContent = ''; probs.textContent = ''; shaded.textContent = '';
    var value = row.prediction;
    var text = typeof value === 'number' ? number(value) : Array.isArray(value) ? value.map(number).join(', ') :
      String(value === '' ? '(no label)' : value);
    box.appendChild(document.createTextNode('prediction '));
    box.appendChild(el('b', '', text));
    if (row.probabilities) {
      Object.keys(row.probabilities).forEach(function (name) {
        var p = row.probabilities[name], line = el('div', 'prob');
        line.appendChild(el('span', '', name));
        var bar = el('span', 'bar'); bar.style.width = (200 * p).toFixed(1) + 'px';
        line.appendChild(bar); line.appendChild(el('span', '', p.toFixed(3)));
        probs.appendChild(line);
      });
    }
    if (row.words && row.words.length) {
      var heads = row.words[0].weights.length;
      for (var h = 0; h < heads; h += 1) {
        var line = el('div', 'line');
        if (heads > 1) { line.appendChild(el('span', 'hl', 'head ' + (h + 1))); }
        line.appendChild(words(row.words, h));
        shaded.appendChild(line);
      }
    }
    document.getElementById('legend').hidden = !(row.words && row.words.length);
    result.hidden = false;
  }
  function predict() {
    var row = {};
    inputs.forEach(function (input) {
      var name = input.getAttribute('data-field');
      if (config.optional.indexOf(name) < 0 || input.value !== '') { row[name] = input.value; }
    });
    go.disabled = true; status.className = ''; status.textContent = 'predicting…';
    fetch('predict', {method: 'POST', credentials: 'same-origin', headers: {'Content-Type': 'application/json'},
                      body: JSON.stringify({rows: [row], weights: config.weights})})
      .then(function (response) {
        return response.json().then(function (body) { return {ok: response.ok, status: response.status, body: body}; });
      })
      .then(function (answer) {
        if (!answer.ok) { throw new Error(answer.status + ': ' + (answer.body.error || 'error')); }
        status.textContent = ''; show(answer.body);
      })
      .catch(function (err) { status.className = 'error'; status.textContent = String(err.message || err); })
      .then(function () { go.disabled = false; });
  }
  form.addEventListener('submit', function (event) { event.preventDefault(); predict(); });
  // A link can carry a row: /#first=...&second=... fills the fields and predicts.
  var given = new URLSearchParams(window.location.hash.slice(1)), filled = false;
  inputs.forEach(function (input) {
    var value = given.get(input.getAttribute('data-field'));
    if (value !== null) { input.value = value; filled = true; }
  });
  if (filled && inputs.every(function (input) { return !input.required || input.value !== ''; })) { predict(); }
  inputs.forEach(function (input) {
    input.addEventListener('keydown', function (event) {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); predict(); }
    });
  });
})();
"""
