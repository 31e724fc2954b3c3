"""Prediction through ONNX Runtime: each fold's graph exported once into the run, optionally int8-quantized.

``predict --backend onnx`` runs the same length-sorted, dynamically padded batches as the PyTorch engine
(:mod:`attnpool.prediction.engine`) through ``onnxruntime.InferenceSession``. Each fold's graph is exported by
:func:`attnpool.exporters.export_onnx` (which checks it against PyTorch and writes it atomically) into
``fold_K/onnx/`` the first time, and reused after that, until the fold's model changes (the graph records the
model files it was made from) or attnpool is upgraded.

``quantize="int8"`` adds ONNX Runtime's dynamic quantization: the graph is pre-processed
(``quant_pre_process``: shape inference and graph optimisation), then its ``MatMul`` weights are stored as int8
per output channel (``quantize_dynamic(per_channel=True, op_types_to_quantize=["MatMul"])``; the embeddings'
``Gather``, the pooler's softmax, and a ``MatMul`` whose constant weight is not 2-D (``latent_attention``'s
latents: ONNX Runtime's per-channel int8 ``MatMul`` cannot run one) stay float). A quantized graph is run once on
one row when it is loaded: one that ONNX Runtime cannot run is deleted (made again next time) and refused. Int8 is
not assumed to be accurate: :meth:`OnnxFoldEnsemble.check` compares it with the float32 PyTorch models on a
calibration slice, scored in batches of 1, 64 and the prediction's batch size (one activation scale per batch: a
row's int8 error depends on its batch), and refuses it, with the figure, when the largest difference exceeds a stated
tolerance.

ONNX Runtime uses one intra-op thread per physical core by default, which is what a prediction process wants;
``threads`` overrides it.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnpool._version import __version__
from attnpool.data.batching import padded_batches
from attnpool.exporters import ExportError, VerificationError, export_onnx
from attnpool.exporters.models import ExporterFailure, ModelLoadError, source_stamp
from attnpool.exporters.staging import make_staging
from attnpool.prediction.engine import FoldEnsemble, FoldScales, combine_folds, fold_tokenizer, fold_weights
from attnpool.runs.files import existing_above, takes_files
from attnpool.runs.run import Run, RunError

_MISSING: str | None = None  # the module of the onnx extra that did not import, named by load()
try:
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic
except ImportError as err:  # the onnx extra is optional; load() says how to install it
    ort = None
    _MISSING = err.name or str(err)  # onnx alone can be missing (a slim serving image with onnxruntime)

logger = logging.getLogger("attnpool.predict")

QUANTIZE = ("none", "int8")
INT8_TOLERANCE = 0.02  # largest |int8 - fp32| of a score (a probability, or a regression value) on the slice
CALIBRATION_ROWS = 128
CHECK_BATCH = 64  # check() scores the calibration rows in batches of 1, this, and the prediction's batch size


def _stale(target: Path, model_dir: Path) -> bool:
    """Whether ``target`` is missing, or was not made from the fold's model as it is now by this attnpool.

    The graph's ``attnpool_source`` stamp (each model file's size and time, :func:`source_stamp`) is compared, not
    which file is newer: a fold copied in with older times (``rsync -a``, ``cp -p``) kept the old graph in use.
    """
    if not target.is_file():
        return True
    try:
        props = {p.key: p.value for p in onnx.load(str(target), load_external_data=False).metadata_props}
    except Exception:  # noqa: BLE001 - a damaged or cut-short graph: made again
        return True
    return props.get("attnpool_source") != source_stamp(model_dir) or props.get("attnpool_version") != __version__


def _quantize(source: Path, target: Path) -> None:
    """Pre-process and dynamically quantize ``source`` into ``target`` (atomically, through a staging folder)."""
    # A graph whose weights passed the export's threshold keeps them in SOURCE.data: the prepared float32 graph
    # must too (a protobuf stops at 2 GB).
    external = source.with_name(source.name + ".data").is_file()
    tmp = make_staging(target.parent, ".int8.")  # removes what a killed quantization left there
    try:
        prepared, quantized = tmp / "prepared.onnx", tmp / target.name
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True, save_as_external_data=external,
                          all_tensors_to_one_file=True)
        # the embeddings stay float32: an int8 graph of a 1.5B model passes 2 GB, so it keeps external weights too
        quantize_dynamic(str(prepared), str(quantized), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], use_external_data_format=external,
                         nodes_to_exclude=_not_2d_weights(prepared))
        data = quantized.with_name(quantized.name + ".data")
        if data.is_file():  # the weights first: the graph that names them arrives last
            os.replace(data, target.with_name(data.name))
        os.replace(quantized, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _not_2d_weights(graph: Path) -> list[str]:
    """The ``MatMul`` nodes of ``graph`` whose constant weight (input B) is not 2-D, which int8 leaves float.

    Per channel, a rank-3 weight (``latent_attention``'s latents, [heads, head size, latents]) gets a zero point per
    last axis, which ONNX Runtime's ``DynamicQuantizeMatMul`` refuses when it runs.
    """
    model = onnx.load(str(graph), load_external_data=False)
    ranks = {t.name: len(t.dims) for t in model.graph.initializer}
    ranks.update({n.output[0]: len(a.t.dims) for n in model.graph.node if n.op_type == "Constant"
                  for a in n.attribute if a.name == "value"})
    return [n.name for n in model.graph.node
            if n.op_type == "MatMul" and len(n.input) > 1 and ranks.get(n.input[1], 2) != 2]


def _unwritable(run: Run, fold: int, graph: Path, quantize: str, command: str, reason: str) -> RunError:
    """The refusal of a graph to make in a run that cannot be written (read-only, another user's), with ways out."""
    asked = "--backend onnx" + (f" --quantize {quantize}" if quantize != "none" else "")
    export = ("" if quantize != "none" else f"; `attnpool export --model {run.path} --fold {fold} --output "
              "FILE.onnx` makes the graph elsewhere, to serve with onnxruntime")
    return RunError(
        f"fold {fold}: the ONNX backend makes the graph {graph} once, in the run, but the run folder {run.path} is "
        f"not writable ({reason}); {command} with --backend torch, or from a writable copy of the run (cp "
        f"-r {run.path} COPY, then --run COPY), or ask whoever can write it to run {command} {asked} once (the "
        f"graph is then reused){export}")


def _check_run_writable(run: Run, fold: int, graph: Path, quantize: str, command: str) -> None:
    """Refuse, before the export or quantization starts, a graph whose folder in the run cannot be written.

    The nearest existing folder above ``graph`` (``fold_K/onnx``, else ``fold_K``) must be writable (``os.access``)
    and take a file (tried: a read-only mount, which ``os.access`` passes for root). Without this, the export's own
    check of its output spoke of an ``--output`` that ``predict`` does not have.
    """
    above = existing_above(graph)
    if above is not None and above.is_dir() and not takes_files(above):  # None: the run is gone, as the export says
        raise _unwritable(run, fold, graph, quantize, command, f"{above} takes no new file: read-only or no permission")


@contextmanager
def _run_writable(run: Run, fold: int, graph: Path, quantize: str, command: str) -> Iterator[None]:
    """A graph that must be made in a run that cannot be written (read-only, another user's): a RunError, ways out.

    ``quantize``, ``command``: the graph's and the caller's (``predict``, ``serve``), as the ways out name them. The
    folder is checked first (:func:`_check_run_writable`); a write refused later (a file there that cannot be
    replaced) is caught too.
    """
    _check_run_writable(run, fold, graph, quantize, command)
    try:
        yield
    except OSError as err:
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise _unwritable(run, fold, graph, quantize, command, err.strerror) from err


def graph_file(run: Run, fold: int, quantize: str = "none", command: str = "predict") -> Path:
    """The fold's graph for ``quantize``, exported (and quantized) now if missing or older than the model.

    ``command``: the caller's (``predict``, ``serve``), named in the ways out of a run that cannot be written.
    """
    fp32 = run.onnx_file(fold)
    if _stale(fp32, run.model_dir(fold)):
        logger.info("fold %d: exporting the ONNX graph to %s (once; reused by later predictions)", fold, fp32)
        try:
            with _run_writable(run, fold, fp32, quantize, command):
                export_onnx(run.model_dir(fold), fp32, save_tokenizer=False)
        except VerificationError as err:  # its advice names export's options; say how to get there from predict
            raise VerificationError(
                f"fold {fold}: {err}. To use the graph anyway, export it yourself: attnpool export --model {run.path} "
                f"--fold {fold} --output {fp32} (with --opset N or --no-verify), then load the run again; or use "
                "--backend torch") from err
        except ModelLoadError as err:  # the fold's model does not load: the torch backend would fail the same way
            raise RunError(f"fold {fold}: {err}") from err
        except ExporterFailure as err:  # its advice names export's options (--opset), which predict has not
            raise ExportError(f"fold {fold}: {err.reason}; use --backend torch") from err
        except ExportError as err:  # the model itself cannot be exported (a recurrent layer...): no option helps
            raise ExportError(f"fold {fold}: {err}; use --backend torch") from err
    if quantize == "none":
        return fp32
    target = run.onnx_file(fold, quantize)
    if _stale(target, run.model_dir(fold)):  # the quantized graph keeps the float32 one's stamp
        logger.info("fold %d: quantizing the ONNX graph to %s into %s", fold, quantize, target)
        with _run_writable(run, fold, target, quantize, command):
            _quantize(fp32, target)
    return target


def _session(graph: Path, options: Any, fold: int) -> Any:
    """An onnxruntime session of a fold's graph; a graph it cannot load is named, with the way out."""
    try:
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime's errors derive from Exception only
        raise RunError(f"fold {fold}: onnxruntime cannot load {graph} ({str(err)[:300]}); delete {graph.parent} to "
                       "export it again, or use --backend torch") from err


def _advice(command: str, quantize: str) -> str:
    """The way out of a graph ONNX Runtime fails on, for ``command`` (predict, serve): float32, else PyTorch."""
    return f"{command} with --quantize none" if quantize != "none" else f"{command} with --backend torch"


def _run(session: Any, feed: dict[str, np.ndarray], fold: int, shape: tuple[int, ...],
         advice: str = "predict with --backend torch") -> np.ndarray:
    """A fold's logits of one batch of ``shape`` (rows, tokens); an onnxruntime failure is a RunError naming both."""
    try:
        return session.run(["logits"], feed)[0]
    except Exception as err:  # noqa: BLE001 - onnxruntime's errors derive from Exception only
        rows, tokens = shape
        raise RunError(f"fold {fold}: onnxruntime failed on a batch of {rows} rows x {tokens} tokens "
                       f"({str(err)[:300]}); {advice}") from err


def _try_quantized(session: Any, graph: Path, fold: int, tokenizer: Any, advice: str) -> RunError | None:
    """The refusal, with ``advice``, of a fold's quantized ``graph`` that ONNX Runtime cannot score one row with.

    Such a graph is deleted, to be made again at the next try rather than reused broken; ``None`` when it runs.
    """
    row = tokenizer("warm up")
    ids = np.asarray([row["input_ids"]], dtype=np.int64)
    feed = {i.name: np.asarray([row[i.name]], dtype=np.int64) if i.name in row else np.zeros_like(ids)
            for i in session.get_inputs()}
    try:
        session.run(["logits"], feed)
    except Exception as err:  # noqa: BLE001 - onnxruntime's errors derive from Exception only
        try:
            for path in (graph, graph.with_name(graph.name + ".data")):
                path.unlink(missing_ok=True)
            fate = "it was deleted (made again at the next try)"
        except OSError as gone:  # a run this process cannot write: the refusal all the same
            fate = f"it could not be deleted ({gone.strerror}: delete it where the run can be written)"
        refusal = RunError(f"fold {fold}: onnxruntime cannot run the quantized graph {graph} ({str(err)[:300]}); "
                           f"{fate}; {advice}")
        refusal.__cause__ = err
        return refusal
    return None


@dataclass
class OnnxFoldEnsemble:
    """The ONNX Runtime sessions of a run's chosen folds and their ensemble weights (as :class:`FoldEnsemble`)."""

    task: str
    folds: list[int]
    sessions: list[Any]
    weights: np.ndarray
    tokenizer: Any
    quantize: str
    reference: FoldEnsemble | None = None  # the caller's float32 PyTorch models (serve's), to check a quantized graph
    scales: FoldScales | None = None  # a Pearson-loss run's fold scales (see FoldScales)
    run: Run | None = None  # where check() loads the float32 models from when no reference was given
    how: str = "mean"  # their ensemble weights
    command: str = "predict"  # who runs it (predict, serve): named in the advice of an error

    @classmethod
    def load(cls, run: Run, folds: int | Sequence[int] | None = None, how: str = "mean", quantize: str = "none",
             *, threads: int | None = None, reference: FoldEnsemble | None = None,
             command: str = "predict") -> OnnxFoldEnsemble:
        """Sessions for the chosen folds (default: every trained fold), exporting or quantizing graphs as needed.

        ``reference``: the same folds' float32 PyTorch ensemble, when the caller has it loaded already (a quantized
        ensemble is checked against it, and keeps it); otherwise :meth:`check` loads it for the check only.
        ``command``: the caller's (``predict``, ``serve``), named in the advice of its errors. A quantized graph
        scores one row here: one ONNX Runtime cannot run is deleted, to be made again at the next try.

        Raises:
            ImportError: onnx or onnxruntime is not installed (``pip install 'attnpool[onnx]'``).
            ValueError: ``quantize`` is not ``none`` or ``int8``.
            RunError: A graph ONNX Runtime cannot load, or a quantized one it cannot run.
        """
        if ort is None:
            raise ImportError(f"{command} --backend onnx needs {_MISSING}: pip install 'attnpool[onnx]'")
        if quantize not in QUANTIZE:
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
        # The float32 PyTorch models serve check() alone, which loads and frees them: held here, they would stay
        # beside the graphs that replace them for the whole prediction. The caller's (serve's word weights) are kept.
        reference = reference if quantize != "none" else None
        task, fold_ids, weights = fold_weights(run, folds, how)
        tokenizer = reference.tokenizer if reference else fold_tokenizer(run, fold_ids[0])
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        graphs = [graph_file(run, fold, quantize, command) for fold in fold_ids]
        sessions = [_session(graph, options, fold) for graph, fold in zip(graphs, fold_ids, strict=True)]
        if quantize != "none":  # every fold tried, so that each broken graph is deleted at once
            refusals = [_try_quantized(session, graph, fold, tokenizer, _advice(command, quantize))
                        for graph, fold, session in zip(graphs, fold_ids, sessions, strict=True)]
            if refusal := next((r for r in refusals if r is not None), None):
                raise refusal
        return cls(task, fold_ids, sessions, weights, tokenizer, quantize, reference, FoldScales.of_run(run, fold_ids),
                   run, how, command)

    def scores(self, encodings: dict[str, list], *, batch_size: int,
               on_batch: Callable[[int], object] | None = None, **_: Any) -> np.ndarray:
        """The weighted mean over the folds of each row's outputs, as :meth:`FoldEnsemble.scores` returns them."""
        rows = len(encodings["input_ids"])
        names = [[i.name for i in s.get_inputs()] for s in self.sessions]
        total: np.ndarray | None = None
        for batch, padded in padded_batches(encodings, batch_size, self.tokenizer, return_tensors="np"):
            ids = np.asarray(padded["input_ids"], dtype=np.int64)
            logits = []
            for fold, session, inputs in zip(self.folds, self.sessions, names, strict=True):
                # A tokenizer without token types: zeros, as the PyTorch model assumes when they are not given.
                feed = {name: np.asarray(padded[name], dtype=np.int64) if name in padded else np.zeros_like(ids)
                        for name in inputs}
                logits.append(_run(session, feed, fold, ids.shape, _advice(self.command, self.quantize)))
            part = combine_folds(self.task, logits, self.weights, self.scales)
            if total is None:
                total = np.zeros((rows, *np.shape(part)[1:]), dtype=np.float64)
            total[batch] = part
            if on_batch is not None:
                on_batch(len(batch))
        return total if total is not None else np.zeros((0,))

    def check(self, encodings: dict[str, list], *, tolerance: float = INT8_TOLERANCE, rows: int = CALIBRATION_ROWS,
              batch_size: int | None = None) -> float:
        """The largest |this - float32 PyTorch| score on the first ``rows`` rows; ``RunError`` above ``tolerance``.

        Only for a quantized ensemble (the float32 graphs are checked against PyTorch when they are exported). The
        float32 models are loaded for the check and freed after it, unless the ensemble was given them.

        The bound is measured at batch sizes 1, ``batch_size`` (the prediction's, when the caller gives it) and
        :data:`CHECK_BATCH`, and is the largest of them: dynamic quantization gives each batch's activations one
        scale, so a row's int8 score depends on the rows (and the padding) it is batched with.

        Raises:
            ValueError: ``tolerance`` is not a finite number >= 0 (``--int8-tolerance``).
            RunError: the largest difference exceeds ``tolerance``, or is not finite (a NaN score).
        """
        check_tolerance(tolerance)
        reference, quantized = self.compare(encodings, rows=rows, batch_size=batch_size)
        return check_scores(reference, quantized, tolerance=tolerance, quantize=self.quantize, command=self.command)

    def compare(self, encodings: dict[str, list], *, rows: int = CALIBRATION_ROWS,
                batch_size: int | None = None) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """The float32 PyTorch scores of the first ``rows`` rows, and this ensemble's at each batch size checked.

        What :meth:`check` judges; a caller that writes something else than these scores (a blend of runs) judges
        what it writes with :func:`check_scores`. The batch sizes are those of :meth:`check`.
        """
        if self.quantize == "none":
            raise ValueError("check() compares a quantized ensemble with its float32 models; this one is float32")
        reference = self.reference or FoldEnsemble.load(self.run, self.folds, self.how)
        head = {k: v[:rows] for k, v in encodings.items()}
        where = next(reference.models[0].parameters()).device  # the float32 models stay where they are (serve)
        theirs = reference.scores(head, batch_size=CHECK_BATCH, device=where, precision="fp32")
        del reference  # before a RunError, whose traceback would hold this frame (and the models) alive
        sizes = sorted({1, CHECK_BATCH, *([int(batch_size)] if batch_size else [])})
        return theirs, {size: self.scores(head, batch_size=size) for size in sizes}


def check_scores(reference: np.ndarray, quantized: dict[int, np.ndarray], *, tolerance: float,
                 quantize: str = "int8", what: str = "", command: str = "predict") -> float:
    """The largest |quantized - reference| score over the batch sizes; ``RunError`` above ``tolerance`` or not finite.

    ``reference``: the float32 scores of the calibration rows; ``quantized``: the quantized ones, by batch size
    (:meth:`OnnxFoldEnsemble.compare`, or a blend of them); ``what``: words added after the figure's description;
    ``command``: the caller's (``predict``, ``serve``), named in the advice.
    """
    count = len(reference)
    errors = [float(np.max(np.abs(np.asarray(s) - reference))) for s in quantized.values()] if count else []
    diff = float("nan") if np.isnan(errors).any() else max(errors, default=0.0)  # a NaN score: refused below
    measured = f"over the first {count} rows scored in batches of {', '.join(map(str, sorted(quantized)))}{what}"
    if not np.isfinite(diff):  # NaN > tolerance is False: a NaN score passed the check
        raise RunError(f"the {quantize} ONNX models' scores differ from the float32 models' by {diff} (a "
                       f"non-finite score) {measured}; {command} with --quantize none")
    if not diff <= tolerance:
        raise RunError(f"the {quantize} ONNX models depart from the float32 models by up to {diff:.4g} "
                       f"(largest |difference| of a score {measured}), above the tolerance of {tolerance:g}; "
                       f"{command} with --quantize none, or raise --int8-tolerance if that is acceptable for your use")
    logger.info("%s ONNX models agree with float32 to %.3g (largest |difference| of a score %s; tolerance %g)",
                quantize, diff, measured, tolerance)
    return diff


def check_tolerance(tolerance: float) -> float:
    """``tolerance`` if it is a finite number >= 0, else a ValueError naming ``--int8-tolerance``."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"--int8-tolerance (int8_tolerance) must be a finite number >= 0, got {tolerance!r}: give "
                         f"the largest |int8 - float32| difference of a score to accept (default {INT8_TOLERANCE})")
    return value
