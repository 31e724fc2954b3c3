"""What ``attnpool serve`` serves: a run's fold ensemble, run exactly as ``attnpool predict`` runs it, or one model.

A :class:`Service` knows the rows it takes (the fields), turns them into token lists the way ``predict`` does
(:class:`~attnpool.data.prediction.PredictionInputs`, the run's text columns, template or preset), runs a batch of
requests through :meth:`FoldEnsemble.scores <attnpool.prediction.engine.FoldEnsemble.scores>` and writes the
answer with the columns of a prediction file (:func:`~attnpool.runs.tables.prediction_columns`), so that a
response holds the numbers ``predict`` writes for the same rows. It needs no web framework: the HTTP layer
(:mod:`attnpool.serving.app`) is a thin shell around it.

Sources:

* a train run directory: every trained fold (or ``folds``), ensembled ``mean`` or ``score`` as ``predict`` does;
  the fields are the run's text columns (``--text-cols``), its template's placeholders, or for the PPPM preset
  ``anchor``, ``target``, ``context`` (the context title is joined from the run's ``cpc_texts.csv``);
* a folder saved with ``save_pretrained`` (model and tokenizer): fields ``text`` and, optionally, ``text_pair``.

Nothing a request holds names a file or a model: what is loaded is decided once, at start-up.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import AutoTokenizer

from attnpool._version import __version__
from attnpool.config import TrainConfig
from attnpool.data.batching import ENCODING_KEYS
from attnpool.data.columns import build_texts, text_fields
from attnpool.data.context import CONTEXT_FIELD, check_room, is_context_pair
from attnpool.data.pppm import PPPM_FIELDS
from attnpool.data.prediction import PredictionInputs, context_views
from attnpool.data.task import context_columns
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.pooling.registry import unknown_pooler_in
from attnpool.precision import inference_device, precision_reason, resolve_precision
from attnpool.prediction.engine import FoldEnsemble
from attnpool.prediction.onnx_engine import INT8_TOLERANCE, OnnxFoldEnsemble
from attnpool.prediction.positions import check_max_length, model_max_length, run_max_length
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import prediction_columns
from attnpool.serving.onnx_backend import onnx_scorer, scores_precision
from attnpool.serving.process import thread_settings_kept
from attnpool.serving.weights import word_weights
from attnpool.tasks import class_names, task_of
from attnpool.threads import set_threads

logger = logging.getLogger("attnpool.serve")

MODEL_FIELDS = ("text", "text_pair")  # the rows of a model folder: a text, or a text pair
TEXT_CHARS_PER_TOKEN = 32  # a field longer than this many characters per max_length token is refused


@dataclass
class Job:
    """One request's rows, tokenised, waiting for the batcher; ``texts`` only when its word weights are wanted."""

    encodings: dict[str, list]
    texts: list[tuple[str, str | None]] | None = None
    parts: list[Job] | None = None  # a blend's: each run's tokens of the rows
    bare: dict[str, list] | None = None  # context view both: the rows' tokens without their group context

    @property
    def rows(self) -> int:
        """The number of rows."""
        return len(self.encodings["input_ids"])


@dataclass
class Answer:
    """A job's outputs: its rows' scores (values or probabilities) and, when asked, their words."""

    scores: np.ndarray
    words: list[list[dict[str, Any]]] | None = None


@dataclass
class Service:
    """A loaded model or fold ensemble and the rules of its rows; see the module docstring."""

    source: Path
    kind: str  # "run" or "model"
    ensemble: FoldEnsemble
    classes: list[Any] | None
    fields: list[str]  # required text fields of a row
    optional_fields: list[str]  # text fields a row may leave out (a model folder's text_pair)
    id_field: str | None  # an optional id per row, echoed in the answer
    max_length: int
    encoder: str
    pooler: dict[str, Any]
    device: torch.device
    precision: str
    ensemble_how: str = "mean"
    _inputs: dict[bool, PredictionInputs] = field(default_factory=dict, repr=False)  # run: {False: ...}; model: both
    _tokenizer_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    scorer: OnnxFoldEnsemble | None = None  # backend onnx: the scores come from ONNX Runtime, the word weights not
    context_view: str = "with"  # a run with a group context: with, without, or both (the mean of the two)
    _bare: PredictionInputs | None = field(default=None, repr=False)  # context view both: the rows without it

    # --- loading
    @classmethod
    @thread_settings_kept()  # a refused load leaves the process's thread settings as they were
    def load(cls, source: str | Path, *, folds: int | Sequence[int] | None = None, ensemble: str = "mean",
             device: str | None = None, precision: str = "auto", max_length: int | None = None,
             backend: str = "torch", quantize: str = "none", int8_tolerance: float = INT8_TOLERANCE,
             calibration_file: str | Path | None = None, threads: int | None = None,
             context_view: str = "with", max_batch: int | None = None) -> Service:
        """Load a train run's folds (or a saved model folder) onto ``device``; nothing is served yet.

        ``context_view``: for a run trained with a group context, as ``predict``'s: each row's context from the
        other rows of its request (``with``), none (``without``), or the mean of both views' scores (``both``).

        With ``backend="onnx"`` (a run only) the scores come from ONNX Runtime sessions of the folds' graphs, as
        ``predict --backend onnx`` runs them; ``quantize="int8"`` is checked now, on the first rows of
        ``calibration_file`` (default: the run's training file) in batches of 1, 64 and ``max_batch`` (the most rows
        the server scores at once), and refused beyond ``int8_tolerance``. ``precision`` then applies to the word
        weights only (the PyTorch models compute them); the scores are ONNX Runtime's, in float32 or int8.

        Raises:
            RunError: Not a run nor a model folder, no such trained fold, a fold model or tokenizer that cannot be
                loaded; ``max_length`` given for a run (it has its own), or over what a model folder's encoder reads.
            ValueError: A bad ``ensemble``, ``precision`` or ``context_view`` (or one other than ``with`` for a model
                folder or a run without a group context); a ``max_length`` that is not an integer >= 1, or that leaves
                a model folder's tokenizer no room for text beside its special tokens.
        """
        source = Path(source).expanduser()
        check_max_length(max_length)
        device_ = inference_device(device)
        if backend not in ("torch", "onnx"):
            raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")
        if backend == "torch" and quantize != "none":
            raise ValueError(f"--quantize {quantize} needs --backend onnx (the torch backend runs the saved weights)")
        reason = precision_reason(precision, device_)  # a bad precision is refused here, before set_threads
        threads = set_threads(threads, tokenizer_threads=False)  # requests are tokenised while the model runs
        logger.info("precision: %s; %d CPU threads", reason, threads)
        precision = resolve_precision(precision, device_)
        run = Run.open(source) if Run.is_run(source) else None
        if run is not None:
            if max_length is not None:
                raise RunError("--max-length is for a model folder; a run truncates as it was trained (its "
                               "config.yaml)")
            service = cls._load_run(run, folds, ensemble, device_, precision, context_view)
        elif (source / "config.json").is_file():
            if folds is not None:
                raise RunError(f"{source} is one saved model: --folds is for a train run")
            context_views(context_view, False, str(source))
            service = cls._load_model(source, max_length, device_, precision)
        else:
            raise RunError(f"{source} is neither a train run directory nor a saved model folder (no config.json); "
                           "give the --output-dir of attnpool train or a save_pretrained folder")
        for model in service.ensemble.models:
            model.eval().to(device_)
        if backend == "onnx":
            if run is None:
                raise RunError(f"--backend onnx serves a train run (its folds' graphs are exported into it); {source} "
                               "is a model folder: serve it with --backend torch")
            if precision != "fp32":
                logger.info("--precision %s applies only to the word weights with --backend onnx: the scores are "
                            "computed by ONNX Runtime in %s", precision, "float32" if quantize == "none" else quantize)
            service.scorer = onnx_scorer(run, service.ensemble, ensemble, quantize, threads, int8_tolerance,
                                         calibration_file, batch_size=max_batch, context_view=context_view)
        return service

    @classmethod
    def _load_run(cls, run: Run, folds: Any, how: str, device: torch.device, precision: str,
                  context_view: str = "with", max_batch: int | None = None) -> Service:
        info, cfg = run.info(), run.config()
        views = context_views(context_view, bool(cfg.group_context), str(run.path))
        ensemble = FoldEnsemble.load(run, folds, how)
        # group_context: a row's context comes from the other rows of its request, as predict takes it from the file
        # titles_name: a client is told its codes are unknown to the model, not the path of the server's titles file
        inputs = [PredictionInputs(run.config(), info, "request", ensemble.tokenizer, log=logger, context_from="chunk",
                                   with_context=view, titles_name="the model") for view in views]
        max_length = run_max_length(inputs[0].cfg.max_length, ensemble.models[0], run.path)
        for view in inputs:  # PPPM: the CPC titles now, so a missing data folder fails start-up, not each request
            view.titles()
            view.cfg.max_length = max_length
        fields = run_fields(inputs[0].cfg)
        id_field = info.get("id_col") or cfg.id_col
        model = ensemble.models[0]
        return cls(run.path, "run", ensemble, info.get("classes"), fields, [],
                   id_field if id_field and id_field not in fields else None, inputs[0].cfg.max_length, cfg.model,
                   dict(model.config.pooling), device, precision, how, {False: inputs[0]}, context_view=context_view,
                   _bare=inputs[1] if len(inputs) > 1 else None)

    @classmethod
    def _load_model(cls, folder: Path, max_length: int | None, device: torch.device, precision: str) -> Service:
        try:
            model = AttnPoolForSequenceClassification.from_pretrained(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except Exception as err:  # noqa: BLE001 - any failure to load: say which folder and stop the start-up
            fix = "" if unknown_pooler_in(err) else (". Give a folder saved with model.save_pretrained(folder, "
                                                     "tokenizer=tokenizer)")  # else: the module to import, alone
            raise RunError(f"cannot load the model in {folder}: {err}{fix}") from err
        config, max_length = model.config, model_max_length(max_length, model, folder)
        check_room(tokenizer, max_length, pair=True)  # at start-up, not per request: every row may be a text pair
        task = task_of(getattr(config, "problem_type", None) or None, config.num_labels)
        classes = None if task == "regression" else class_names(getattr(config, "id2label", None), config.num_labels)
        ensemble = FoldEnsemble(task, [], [model], np.array([1.0]), tokenizer)
        info = {"classes": classes}
        inputs = {pair: PredictionInputs(TrainConfig(text_cols=list(MODEL_FIELDS[: 1 + pair]), max_length=max_length,
                                                     task=task), info, "request", tokenizer, log=logger)
                  for pair in (False, True)}
        encoder = getattr(config.encoder, "_name_or_path", "") or config.encoder.model_type
        return cls(folder, "model", ensemble, classes, [MODEL_FIELDS[0]], [MODEL_FIELDS[1]], "id", max_length,
                   encoder, dict(config.pooling), device, precision, "mean", inputs)

    # --- facts
    @property
    def folds(self) -> list[int]:
        """The fold numbers ensembled (empty for one saved model)."""
        return list(self.ensemble.folds)

    def describe(self, *, public: bool = False) -> str:
        """What is served, in a few words (the start-up log; ``public``: for clients, without the server's paths)."""
        source = public_name(self.source) if public else self.source
        return f"{len(self.folds)} fold(s) of {source}" if self.folds else f"one model, {source}"

    @property
    def task(self) -> str:
        """``regression``, ``binary``, ``multiclass`` or ``multilabel``."""
        return self.ensemble.task

    @property
    def max_text_chars(self) -> int:
        """The longest text field accepted, in characters: far over what the model reads (``max_length`` tokens)."""
        return TEXT_CHARS_PER_TOKEN * self.max_length

    @property
    def token_weights(self) -> bool:
        """Whether the pooler weighs tokens (``"weights": true`` is possible)."""
        model = self.ensemble.models[0]
        pooler = getattr(getattr(model, "attnpool", model), "pooler", None)
        return bool(getattr(pooler, "has_weights", False))

    @property
    def id2label(self) -> dict[str, str] | None:
        """``{"0": class, ...}`` for classification, else ``None``."""
        return None if self.classes is None else {str(i): str(c) for i, c in enumerate(self.classes)}

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` says about the model."""
        return {"attnpool_version": __version__, "source": self.kind, "encoder": public_name(self.encoder),
                "pooler": self.pooler, "token_weights": self.token_weights, "task": self.task,
                "labels": None if self.classes is None else [str(c) for c in self.classes],
                "id2label": self.id2label, "folds": self.folds, "ensemble": self.ensemble_how,
                "max_length": self.max_length, "fields": list(self.fields),
                "optional_fields": list(self.optional_fields),
                "id_field": self.id_field, "max_text_chars": self.max_text_chars, "device": str(self.device),
                "precision": self.scores_precision, "word_weights_precision": self.precision, "backend": self.backend,
                "context_view": self.context_view}

    @property
    def scores_precision(self) -> str:
        """What the scores are computed in: ``precision`` (torch), or ONNX Runtime's ``float32`` or ``int8``."""
        return self.precision if self.scorer is None else scores_precision(self.scorer)

    @property
    def backend(self) -> str:
        """What computes the scores: ``torch``, ``onnx`` or ``onnx-int8``."""
        if self.scorer is None:
            return "torch"
        return "onnx" if self.scorer.quantize == "none" else f"onnx-{self.scorer.quantize}"

    # --- requests
    def encode(self, rows: Sequence[dict[str, str | None]], *, texts: bool = False) -> Job:
        """Tokenise a request's rows (field -> text) as ``predict`` tokenises a file's rows.

        Raises:
            attnpool.data.DataError: What the run's own checks refuse (e.g. a PPPM context code without a title).
        """
        groups: dict[bool, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(any(row.get(f) is not None for f in self.optional_fields), []).append(i)
        encodings: dict[str, list] = {}
        bare: dict[str, list] | None = None if self._bare is None else {}
        pairs: list[tuple[str, str | None]] = [("", None)] * len(rows)
        order: list[int] = []
        for pair, members in groups.items():
            inputs = self._inputs[pair]
            columns = [*self.fields, *(self.optional_fields if pair else [])]
            chunk = pd.DataFrame([[rows[i].get(c) or "" for c in columns] for i in members], columns=columns,
                                 dtype=object)
            with self._tokenizer_lock:  # a fast tokenizer is not safe for concurrent calls with settings
                frame, part = inputs.encode(chunk)
                if bare is not None:  # a run's rows: one group, in request order
                    bare.update(self._bare.encode(chunk)[1])
            for key, values in part.items():
                encodings.setdefault(key, []).extend(values)
            order.extend(members)
            if texts:
                first, second, _ = build_texts(frame, inputs.cfg.text_cols or None, inputs.cfg.template,
                                               sep_token=self.ensemble.tokenizer.sep_token or "[SEP]")
                for j, i in enumerate(members):
                    pairs[i] = (first[j], None if second is None else second[j])
        if order != sorted(order):  # rows of both kinds (a model folder's texts and pairs): back to request order
            position = np.argsort(order, kind="stable")
            encodings = {k: [v[p] for p in position] for k, v in encodings.items()}
        return Job(encodings, pairs if texts else None, bare=bare)

    def run(self, jobs: Sequence[Job], *, batch_size: int) -> list[Answer]:
        """Predict the rows of several requests together (length-sorted batches of ``batch_size`` rows)."""
        keys = list(jobs[0].encodings)
        merged = {k: [v for job in jobs for v in job.encodings[k]] for k in keys}
        scorer = self.scorer or self.ensemble
        scores = scorer.scores(merged, batch_size=batch_size, device=self.device, precision=self.precision)
        if self._bare is not None:  # context view both: the mean with the scores of the rows without their context
            bare = {k: [v for job in jobs for v in (job.bare or {})[k]] for k in keys}
            scores = (scores + scorer.scores(bare, batch_size=batch_size, device=self.device,
                                             precision=self.precision)) / 2
        answers, start = [], 0
        for job in jobs:
            answers.append(Answer(scores[start : start + job.rows]))
            start += job.rows
        wanted = [(job, answer) for job, answer in zip(jobs, answers, strict=True) if job.texts is not None]
        if wanted:
            texts = [t for job, _ in wanted for t in job.texts or []]
            ids = [ids for job, _ in wanted for ids in job.encodings["input_ids"]]
            context_pairs = any(is_context_pair(i.cfg.group_context, i.cfg.text_cols, i.cfg.template)
                                for i in self._inputs.values())  # tokenised as encode_texts did
            words = word_weights(self.ensemble, texts, ids, max_length=self.max_length, batch_size=batch_size,
                                 device=self.device, precision=self.precision, lock=self._tokenizer_lock,
                                 context_pairs=context_pairs)
            start = 0
            for job, answer in wanted:
                answer.words, start = words[start : start + job.rows], start + job.rows
        return answers

    def respond(self, answer: Answer, ids: Sequence[Any] | None) -> dict[str, Any]:
        """The JSON answer: per row the columns ``predict`` writes for it, as values."""
        columns = prediction_columns(self.task, self.classes, answer.scores, with_labels=True)
        values = [prediction_values(self.task, columns, i) for i in range(len(answer.scores))]
        for i, row in enumerate(values):
            if ids is not None and ids[i] is not None:
                row["id"] = ids[i]
            if answer.words is not None:
                row["words"] = answer.words[i]
        body: dict[str, Any] = {"task": self.task, "folds": self.folds, "predictions": values}
        if self.classes is not None:
            body["id2label"] = self.id2label
        return body

    def warm_up(self) -> None:
        """One forward pass of every model, so that the first request does not pay for lazy initialisation."""
        ids = self.ensemble.tokenizer("warm up", truncation=True, max_length=self.max_length)
        encodings = {k: [list(v)] for k, v in ids.items() if k in ENCODING_KEYS}
        (self.scorer or self.ensemble).scores(encodings, batch_size=1, device=self.device, precision=self.precision)


def public_name(value: Any) -> str:
    """``value`` as clients see it: a local path's base name (the server's paths stay on it), else as is (a Hub id)."""
    text, path = str(value), Path(str(value)).expanduser()
    local = path.is_absolute() or path.exists()  # "." and "x/..": the folder they name (os.path.abspath folds them)
    return Path(os.path.abspath(path)).name or text if local else text


def run_fields(cfg: TrainConfig) -> list[str]:
    """The text fields of a run's rows: its preset's, its template's placeholders, or its text columns.

    With ``group_context``, also its column and key columns; the context itself is computed, never sent.
    """
    if cfg.preset == "pppm":
        names = list(PPPM_FIELDS)
    else:
        names = text_fields(cfg.text_cols, cfg.template)
    names = [*names, *context_columns(cfg)]
    return [name for name in dict.fromkeys(names) if name != CONTEXT_FIELD]


def prediction_values(task: str, columns: dict[str, Any], i: int) -> dict[str, Any]:
    """Row ``i`` of a prediction file's columns as JSON values.

    ``prediction``: the value (a list for several targets), the class, or for multi-label the ``|``-joined labels
    as ``predict`` writes them; ``probabilities``: ``{class: p}`` for classification.
    """
    def plain(value: Any) -> Any:
        return value.item() if isinstance(value, np.generic) else value

    if task == "regression":
        values = [float(column[i]) for column in columns.values()]
        return {"prediction": values[0] if list(columns) == ["prediction"] else values}
    probabilities = {name[len("prob_"):]: float(column[i]) for name, column in columns.items()
                     if name.startswith("prob_")}
    return {"prediction": plain(columns["prediction"][i]), "probabilities": probabilities}
