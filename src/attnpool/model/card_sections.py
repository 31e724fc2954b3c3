"""The Markdown sections of a model card (:mod:`attnpool.model.card` assembles them with the YAML header).

Model details (encoder, pooler and its options, head, task and labels), usage (Auto classes, ``pipeline``, the
``attnpool`` commands, ONNX Runtime for an export), evaluation, training details and the ONNX export, each a list of
lines; nothing here reads or writes files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from attnpool._version import __version__
from attnpool.model.card_facts import (
    HUB_METRICS,
    ExportFacts,
    TrainingFacts,
    display_name,
    encoder_source,
    hub_name,
    metric_values,
)
from attnpool.model.configuration import AttnPoolConfig
from attnpool.model.encoders import looks_like_local_path
from attnpool.tasks import default_loss, problem_type, task_of

PLACEHOLDER = "path/to/this/folder"
TOKENIZER_PLACEHOLDER = "path/to/the/tokenizer"  # an export without a tokenizer, and none known


def _options(spec: dict[str, Any], skip: tuple[str, ...] = ("type", "hidden_size")) -> str:
    items = [f"`{k}={v}`" for k, v in sorted(spec.items()) if k not in skip]
    return ", ".join(items) or "its defaults"


def _labels(config: AttnPoolConfig, task: str) -> str:
    if task == "regression":
        return f"{config.num_labels} regression target{'s' if config.num_labels > 1 else ''}"
    labels = ", ".join(f"{i}: `{config.id2label[i]}`" for i in sorted(config.id2label))
    return f"{config.num_labels} classes ({labels})"


def _head(config: AttnPoolConfig) -> str:
    shape = f"Linear -> GELU ({config.head_hidden_size}) -> Linear" if config.head_hidden_size else "Linear"
    parts = [shape, f"dropout {config.head_dropout:g}"]
    if config.multi_sample_dropout > 1:
        parts.append(f"{config.multi_sample_dropout} dropout samples")
    if config.output_activation:
        parts.append(f"output activation `{config.output_activation}`")
    return ", ".join(parts)


def description_section(config: AttnPoolConfig, architecture: str, num_parameters: int | None, with_head: bool,
                 training: TrainingFacts | None) -> list[str]:
    """The "Model Description" bullets: model type, encoder, pooler, head, task and labels, size."""
    task = task_of(config.problem_type, config.num_labels)
    source = encoder_source(config)
    base = hub_name(source)
    encoder = f"[{base}](https://huggingface.co/{base})" if base else f"`{display_name(source)}` (a local folder)"
    if not source:
        encoder = "randomly initialised (no pre-trained weights)"
    enc = config.encoder
    layers = getattr(enc, "num_hidden_layers", None)
    lines = [
        f"- **Model type:** `{architecture}` (encoder + pooler{' + head' if with_head else ''}, a transformers "
        "`PreTrainedModel`)",
        f"- **Encoder (base model):** {encoder}: `{enc.model_type}`, hidden size {config.hidden_size}"
        + (f", {layers} layers" if layers else ""),
        f"- **Pooler:** `{config.pooling.get('type')}` with {_options(config.pooling)}",
        f"- **Pooling layers:** `{config.pooling_layers}`",
    ]
    if config.recurrent:
        lines.append(f"- **Recurrent layer:** bidirectional `{config.recurrent}`, {config.recurrent_layers} "
                     "layer(s), between the encoder and the pooler")
    if getattr(config, "pool_segments", None):
        lines.append(f"- **Pooled tokens:** the first {config.pool_segments} segment(s) of each input, up to and "
                     f"with separator token {config.segment_token_id} (the row's own text); the encoder reads the "
                     "rest (a group context), which gets no pooling weight")
    if with_head:
        default = default_loss(config.problem_type or problem_type(task), config.output_activation)
        loss = config.loss or f"{default} (the task's default)"
        lines += [f"- **Head:** {_head(config)}",
                  f"- **Task:** {task}{f' (`problem_type: {config.problem_type}`)' if config.problem_type else ''}, "
                  f"{_labels(config, task)}",
                  f"- **Loss:** {loss}"]
    if training is not None and training.recipe.get("max_length"):
        lines.append(f"- **Maximum sequence length:** {training.recipe['max_length']} tokens (as trained)")
    if num_parameters:
        lines.append(f"- **Parameters:** {num_parameters:,}")
    lines.append(f"- **Library:** attnpool {__version__}")
    return lines


_ONNX_USAGE = """### ONNX Runtime (this folder)

{holds}: onnxruntime and a tokenizer serve it, without PyTorch or attnpool.

```python
import numpy as np
import onnxruntime as ort
from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{tokenizer}")
session = ort.InferenceSession("{folder}/{file}", providers=["CPUExecutionProvider"])
names = [i.name for i in session.get_inputs()]
batch = tokenizer({texts}, padding=True, truncation=True, max_length={max_length}, return_tensors="np")
# an input the tokenizer does not return (token_type_ids, for some) is all zeros: one segment
zeros = np.zeros_like(batch["input_ids"], dtype=np.int64)
feed = {{n: batch[n].astype(np.int64) if n in batch else zeros for n in names}}
[{outputs}] = session.run(None, feed)
```
"""
_AUTO_USAGE = """### Transformers (Auto classes)

```python
import attnpool  # registers the attnpool classes with transformers' Auto classes
from transformers import {auto}, AutoTokenizer

model = {auto}.from_pretrained("{folder}")
tokenizer = AutoTokenizer.from_pretrained("{folder}")
batch = tokenizer(["a text"], padding=True, truncation=True, max_length={max_length}, return_tensors="pt")
out = model(**batch{weights_arg})
{result}
```
"""
_PIPELINE_USAGE = """### Pipeline

```python
import attnpool
from transformers import pipeline

classifier = pipeline("text-classification", model="{folder}")
cut = {{"truncation": True, "max_length": {max_length}}}  # as trained: longer texts are cut, as attnpool predict does
{call}
```
"""
_CLI_USAGE = """### attnpool

```bash
{commands}
{export}
```
"""
_EXPORT_LINE = "attnpool export --model {folder} --output serve/model.onnx  # ONNX, verified against PyTorch"
# attnpool export refuses recurrent= (exporters.models._check_recurrent): its packed LSTM/GRU does not trace to ONNX.
_NO_EXPORT_LINE = ("# no ONNX export: the recurrent={cell!r} layer (a packed sequence) does not trace to a graph; "
                   "serve it with attnpool serve --backend torch")


def tokenizer_location(export: ExportFacts) -> str:
    """What the ONNX snippet gives ``AutoTokenizer.from_pretrained``.

    The export folder when the tokenizer was saved there, else where it is (a folder relative to the export's is
    written from :data:`PLACEHOLDER`).
    """
    if export.tokenizer_saved:
        return PLACEHOLDER
    where = export.tokenizer_from
    if not where:
        return TOKENIZER_PLACEHOLDER
    if os.path.isabs(where) or not looks_like_local_path(where):  # an absolute folder, or a hub name
        return where
    return f"{PLACEHOLDER}/{where}"


def _holds(export: ExportFacts) -> str:
    """The first words of the ONNX usage: what the folder holds, and where the tokenizer is when not in it."""
    if export.tokenizer_saved:
        return "The folder holds the graph and its tokenizer"
    where = export.tokenizer_from
    if not where:
        return ("The folder holds the graph, without a tokenizer (none was saved with the model): load the tokenizer "
                f"the model was trained with, in place of `{TOKENIZER_PLACEHOLDER}` below")
    if os.path.isabs(where) or not looks_like_local_path(where):
        return f"The folder holds the graph; its tokenizer was not saved here: it is the encoder's, `{where}`"
    return (f"The folder holds the graph; its tokenizer was not saved here: it is the model folder's, `{where}` "
            "(relative to this folder)")


def _is_pair(training: TrainingFacts | None) -> bool:
    """Whether the model was trained on text pairs: two text columns (:attr:`TrainingFacts.text` lists them)."""
    text = training.text if training is not None else None
    return bool(text) and not text.startswith("template") and len(re.findall(r"`[^`]*`", text)) == 2


def usage_section(with_head: bool, training: TrainingFacts | None, export: ExportFacts | None, *,
                  weighted: bool = True, recurrent: str | None = None) -> list[str]:
    """How to load and run the model: Auto classes, pipeline, the attnpool commands; ONNX Runtime for an export.

    ``weighted``: whether the pooler gives token weights (without them ``pooling_weights`` is ``None``).
    ``recurrent``: the config's ``recurrent`` cell; such a model has no ONNX export, so no ``attnpool export`` line.
    """
    max_length = (training.recipe.get("max_length") if training is not None else None) or 128
    pair = _is_pair(training)
    if export is not None:
        texts = '["the first text"], ["the second text"]' if pair else '["a text"]'
        return ["## Usage", "", _ONNX_USAGE.format(folder=PLACEHOLDER, file=export.file, max_length=max_length,
                                                   texts=texts,
                                                   outputs=", ".join(export.outputs), holds=_holds(export),
                                                   tokenizer=tokenizer_location(export))]
    what, shape = ("out.logits", "(B, num_labels)") if with_head else ("out.pooler_output", "(B, output_dim)")
    result = (f"{what}, out.pooling_weights  # {shape}; token weights (B, T), (B, heads, T) with heads: 0 on "
              "padding, each sums to 1" if weighted else f"{what}  # {shape}; this pooler gives no token weights")
    auto = "AutoModelForSequenceClassification" if with_head else "AutoModel"
    parts = [_AUTO_USAGE.format(auto=auto, folder=PLACEHOLDER, max_length=max_length, result=result,
                                weights_arg=", return_pooling_weights=True" if weighted else "")]
    if with_head:
        call = ('classifier({"text": "the first text", "text_pair": "the second text"}, **cut)' if pair else
                'classifier("a text", **cut)  # a pair: classifier({"text": "first", "text_pair": "second"}, **cut)')
        parts.append(_PIPELINE_USAGE.format(folder=PLACEHOLDER, max_length=max_length, call=call))
    if training is not None and training.run_dir:
        fold = f" --folds {training.fold}" if training.fold is not None else ""
        commands = ("# this model alone; leave out --folds to ensemble every fold of the run\n"
                    f"attnpool predict --run {training.run_dir}{fold} --input new.csv --output predictions.csv\n"
                    f"attnpool explain --run {training.run_dir}{fold.replace('folds', 'fold')} --input texts.csv "
                    "--output report.html  # which tokens the pooler weighs")
    else:
        commands = ("# attnpool predict ensembles the fold models of an `attnpool train` run (--run RUN_DIR)\n"
                    f"attnpool explain --run {PLACEHOLDER} --text-cols text --input texts.csv --output report.html")
    export_line = (_NO_EXPORT_LINE.format(cell=recurrent) if recurrent is not None
                   else _EXPORT_LINE.format(folder=PLACEHOLDER))
    parts.append(_CLI_USAGE.format(commands=commands, export=export_line))
    return ["## Usage", "", *"\n".join(parts).splitlines(), ""]


def evaluation_section(training: TrainingFacts | None) -> list[str]:
    """The validation scores as a table (nothing without them)."""
    scores = metric_values(training)
    if not scores:
        return []
    where = (f"fold {training.fold} of {training.folds}" if training.fold is not None and training.folds
             else f"`{Path(training.valid_file).name}`" if training.valid_file else "the validation rows")
    rows = f", {training.valid_rows:,} rows" if training.valid_rows else ""
    lines = ["## Evaluation", "", "### Metrics", "", f"On the rows held out for validation ({where}{rows}), which "
             "also chose the best checkpoint:", "", "| metric | value |", "|---|---|"]
    lines += [f"| {HUB_METRICS[k][1]} | {v:.4f} |" for k, v in scores.items()]
    return [*lines, ""]


def training_section(training: TrainingFacts | None) -> list[str]:
    """The training data, its split and the recipe options (nothing for an untrained card)."""
    if training is None:
        return []
    lines = ["## Training Details", "", "### Training Dataset", ""]
    if training.data_file:
        lines.append(f"- **File:** `{Path(training.data_file).name}` (`{training.data_file}`)")
    if training.rows is not None:
        split = (f" ({training.train_rows:,} for training, {training.valid_rows:,} for validation)"
                 if training.train_rows is not None and training.valid_rows is not None and not training.valid_file
                 else "")  # with a validation file, the data file's rows all train; that file's are its own
        lines.append(f"- **Size:** {training.rows:,} rows{split}")
    if training.valid_file:
        size = f" ({training.valid_rows:,} rows)" if training.valid_rows is not None else ""
        lines.append(f"- **Validation file:** `{training.valid_file}`{size}")
    elif training.folds:
        lines.append(f"- **Split:** {training.folds}-fold cross-validation; this model is fold {training.fold}")
    if training.text:
        lines.append(f"- **Text:** {training.text}")
    if training.label:
        lines.append(f"- **Label column:** `{training.label}`")
    if training.recipe:
        lines += ["", "### Training Hyperparameters", "", "| option | value |", "|---|---|"]
        lines += [f"| `{k}` | `{v}` |" for k, v in training.recipe.items()]
    if training.train_seconds is not None:
        lines += ["", f"Trained in {training.train_seconds:,.0f} s on {training.device or 'an unrecorded device'}."]
    return [*lines, ""]


def export_section(export: ExportFacts | None) -> list[str]:
    """The ONNX graph: file, inputs, outputs, opset, verification."""
    if export is None:
        return []
    diff = "not verified" if export.max_abs_diff is None else f"max |onnxruntime - PyTorch| = {export.max_abs_diff:.2e}"
    return ["## ONNX Export", "", f"- **Graph:** `{export.file}` (opset {export.opset or 'the exporter default'})",
            f"- **Inputs:** {', '.join(f'`{n}`' for n in export.inputs)} (int64, batch and sequence axes dynamic)",
            f"- **Outputs:** {', '.join(f'`{n}`' for n in export.outputs)}", f"- **Verification:** {diff}",
            f"- **Tokenizer:** {_tokenizer_line(export)}", ""]


def _tokenizer_line(export: ExportFacts) -> str:
    if export.tokenizer_saved:
        return "saved in this folder"
    if export.tokenizer_from:
        return f"not saved in this folder; load it from `{export.tokenizer_from}`"
    return "not saved; use the tokenizer the model was trained with"
