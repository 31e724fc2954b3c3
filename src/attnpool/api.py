"""The Python API: one function per ``attnpool`` command, taking what the command takes.

The command line (:mod:`attnpool.cli`) only parses arguments and calls these; whatever the CLI can do, a Python
caller can do with the same names and defaults:

    >>> import attnpool
    >>> result = attnpool.train("recipe.yaml", epochs=1, output_dir="runs/x")  # doctest: +SKIP
    >>> attnpool.predict("runs/x", "test.csv", "predictions.csv")  # doctest: +SKIP

are ``attnpool train --config recipe.yaml --epochs 1 --output-dir runs/x`` and
``attnpool predict --run runs/x --input test.csv --output predictions.csv``.

``explain_file`` is ``attnpool explain`` (a run or model folder and a data file -> an HTML report); ``explain`` is
the same analysis on a model and texts in memory. As ``train``, ``predict``, ``explain_file`` and ``export`` keep
transformers' loading bars and its log lines below errors off the console (outside ``set_verbosity("verbose")``),
for the call only: the caller's settings are as they were afterwards, and its warnings reach the caller's
``warnings.showwarning`` (``logging.captureWarnings``) as without attnpool. ``serve`` is ``attnpool serve``: a run or a
model folder over HTTP until SIGTERM.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import numbers
import operator
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from attnpool.comparison.runner import compare as _compare
from attnpool.comparison.summary import CompareResult
from attnpool.config import ConfigError, TrainConfig, load_yaml, make_config
from attnpool.config_checks import check_overwrite_inputs
from attnpool.data.writers import refuse_output_in_folder
from attnpool.explanations import Explanation, explain
from attnpool.explanations import explain_file as _explain_file
from attnpool.exporters import OnnxExport, export_onnx
from attnpool.options import file_path
from attnpool.pooling import available_poolers, build_pooler, get_pooler_class
from attnpool.prediction.onnx_engine import INT8_TOLERANCE
from attnpool.prediction.predict import PredictionSummary
from attnpool.prediction.predict import predict as _predict
from attnpool.runs.files import check_writable
from attnpool.runs.run import Run
from attnpool.serving import ServeSummary
from attnpool.serving import serve as _serve
from attnpool.training.demo import run_demo
from attnpool.training.progress import quiet_library_call
from attnpool.training.recipe import PER_CALL_SAVED, TrainResult
from attnpool.training.recipe import train as _train

ConfigSource = TrainConfig | Mapping[str, Any] | str | Path | None
RunFolders = str | os.PathLike | Run | Sequence[str | os.PathLike | Run]  # a run (or model) folder, or several
logger = logging.getLogger("attnpool.train")
# export()'s options: export_onnx's keywords
_EXPORT_OPTIONS = tuple(name for name, param in inspect.signature(export_onnx).parameters.items()
                        if param.kind is param.KEYWORD_ONLY)


def train(config: ConfigSource = None, /, *, callbacks: Any = None, **overrides: Any) -> TrainResult:
    """Train by k-fold cross-validation (``attnpool train``).

    Args:
        config: A :class:`TrainConfig`, a dict of its fields, or the path of a YAML/JSON file of them (``~``: the
            home folder); ``None`` for the defaults. The first argument, or ``config=`` (as ``--config``).
        callbacks: Extra ``transformers.TrainerCallback`` objects (or classes) for every fold's ``Trainer``: a list
            of them, or one alone.
        **overrides: Any :class:`TrainConfig` field, applied over ``config`` (as flags over ``--config``).

    Returns:
        A :class:`~attnpool.training.TrainResult`; ``result.complete`` says whether every fold was trained.

    Raises:
        TypeError: ``callbacks`` holds anything but ``TrainerCallback`` instances or classes (before anything is
            read or written); ``config`` given both as the first argument and as ``config=``.
    """
    config = _config_keyword(config, overrides, "train")
    callbacks = _callback_list(callbacks)
    cfg = make_config(config, **{**_saved_call_reset(config), **overrides})
    # the recipe file too: --overwrite would delete it with the run folder it sits in
    check_overwrite_inputs(cfg, config if isinstance(config, str | Path) else None)
    check_writable(cfg.output_dir, "--output-dir", folder=True)  # before the data and the encoder load
    return _train(cfg, callbacks=callbacks, given=_given(config, overrides) if cfg.resume else overrides)


def _config_keyword(config: ConfigSource, overrides: dict[str, Any], command: str) -> ConfigSource:
    """``config=`` (popped from ``overrides``, where a positional-only ``config`` puts it) as the config.

    It was read as an unknown option ``config`` among the ~60 valid ones.
    """
    if "config" not in overrides:
        return config
    if config is not None:
        raise TypeError(f"{command}() got the config twice, as its first argument ({config!r:.80}) and as config= "
                        f"({overrides['config']!r:.80}): give one of them, e.g. attnpool.{command}('recipe.yaml', ...)")
    return overrides.pop("config")


def _folder(value: Any) -> Any:
    """A run or model folder as the commands take it: a :class:`Run` as its path, any ``os.PathLike`` as a Path.

    A Run failed with "'Run' object is not iterable" in predict, and other path objects than pathlib's alike.
    Anything else (text, a model object for ``export``) is passed on as given, to be checked there.
    """
    if isinstance(value, Run):
        return value.path
    if isinstance(value, os.PathLike) and not isinstance(value, Path):
        return Path(os.fspath(value))
    return value


def _folders(value: Any) -> Any:
    """:func:`_folder` of one folder, or of each in a list or tuple of them (several runs, blended)."""
    return type(value)(_folder(item) for item in value) if isinstance(value, list | tuple) else _folder(value)


def _callback_list(callbacks: Any) -> list | None:
    """``callbacks`` as a list of ``TrainerCallback`` instances or classes (one alone: a list of one), else a TypeError.

    Checked before the data loads: a callback the Trainer cannot take failed when fold 0 started, its run begun.
    """
    def is_callback(item: Any) -> bool:
        return isinstance(item, TrainerCallback) or (isinstance(item, type) and issubclass(item, TrainerCallback))

    if callbacks is None or is_callback(callbacks):
        return None if callbacks is None else [callbacks]
    wrong = (callbacks if not isinstance(callbacks, list | tuple) else
             next((item for item in callbacks if not is_callback(item)), None))
    if wrong is not None:
        raise TypeError(f"callbacks must be a list of transformers.TrainerCallback instances or classes (or one of "
                        f"them), got {type(wrong).__name__} {wrong!r:.80}"
                        f"{' in the list' if wrong is not callbacks else ''}: pass [callback, ...]")
    return list(callbacks)


def _saved_call_reset(config: ConfigSource) -> dict[str, Any]:
    """For a run's saved config file: ``overwrite``, ``resume`` and ``only_folds`` back to their defaults.

    Older versions saved the call's choices with the recipe: ``--config RUN/config.yaml --output-dir OTHER`` then
    replaced OTHER's run without ``--overwrite``, or trained fold 0 alone. Keywords given still apply over these.
    Another file in a run folder (a recipe of the user's kept with the run) keeps its own values.

    Raises:
        ConfigError: ``config`` is a run folder, naming its config file and how to continue the run instead.
    """
    if not isinstance(config, str | Path):
        return {}
    path = Path(config).expanduser()
    if path.is_dir() and Run.is_run(path):
        raise ConfigError(f"{config} is a folder, not a config file: it is a run, whose recipe is "
                          f"{Run(config).config_file} (--config {Run(config).config_file}); to continue that run, "
                          f"--output-dir {config} --resume")
    if Run.is_run(path.parent) and path == Run(path.parent).config_file:
        return dict(PER_CALL_SAVED)
    return {}


def _given(config: ConfigSource, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What the caller asked for: a config file's (or dict's) values with the keywords over them.

    ``--config FILE --resume``: the run's saved config wins over the file too, and says so (the file's values that
    differ were ignored silently). A :class:`TrainConfig` holds every option, defaults included: its keywords only.
    """
    values = load_yaml(config) if isinstance(config, str | Path) else dict(config) if isinstance(
        config, Mapping) else {}
    return {**values, **overrides}


def predict(run: RunFolders, input_file: str | Path, output_file: str | Path,
            **options: Any) -> PredictionSummary:
    """Predict a file with a run's fold models, ensembled (``attnpool predict``); several runs are blended.

    Options (see :func:`attnpool.prediction.predict`): ``folds`` (default: every trained fold), ``batch_size``,
    ``ensemble`` (``mean`` | ``score``), ``device``, ``chunk_rows``, ``resume``, ``precision``, ``progress``,
    ``blend_weights`` (several runs: one weight per run; default equal), ``context_view`` (``with`` | ``without``
    | ``both``, for a run trained with a group context), ``backend`` (``torch`` | ``onnx``), ``quantize``
    (``none`` | ``int8``, with ``onnx``), ``int8_tolerance``, ``threads``.

    ``run``: a run folder (text, any path object, or an opened :class:`~attnpool.Run`), or a list of them.
    """
    with quiet_library_call():  # no "Loading weights" bars, as the CLI; the caller's settings and warnings kept
        return _predict(_folders(run), input_file, output_file, **options)


@functools.wraps(_explain_file)
def explain_file(*args: Any, **kwargs: Any) -> Explanation:
    """:func:`attnpool.explanations.explain_file` (``attnpool explain``) without the libraries' loading bars.

    ``source`` may also be an opened :class:`~attnpool.Run` or any path object.
    """
    if args:
        args = (_folder(args[0]), *args[1:])
    if "source" in kwargs:
        kwargs["source"] = _folder(kwargs["source"])
    with quiet_library_call():
        return _explain_file(*args, **kwargs)


def compare(config: ConfigSource = None, /, *, poolings: Sequence[str], seeds: int | Sequence[int] = 3,
            baseline: str = "mean", output_dir: str | Path = "runs/compare", bootstrap: int = 1000,
            overwrite: bool = False, **overrides: Any) -> CompareResult:
    """Train several poolers over paired seeds and test which beats the baseline (``attnpool compare``).

    Args:
        config: The shared recipe, as for :func:`train` (the first argument, or ``config=``).
        poolings: Pooler specs, ``NAME`` or ``NAME:key=value,...`` (one string: one spec). A user's pooler must
            live in an importable module (each run's process imports it); one defined in ``__main__`` (a script or
            a notebook) is refused before anything trains.
        seeds: A number of seeds (from the config's ``seed`` on, at most 20), or the seeds themselves.
        baseline: The pooler spec every other one is tested against.
        output_dir: The comparison folder (finished runs in it are kept: rerunning resumes).
        bootstrap: Replicates of the paired bootstrap over examples.
        overwrite: Delete an existing comparison in ``output_dir`` first; refused, before anything is deleted, when
            the config file, the data or a local model lies inside it.
        **overrides: :class:`TrainConfig` fields over ``config``.
    """
    config = _config_keyword(config, overrides, "compare")
    cfg = make_config(config, **{**_saved_call_reset(config), **overrides})
    specs = [poolings] if isinstance(poolings, str) else list(poolings)  # one string: one spec, not its letters
    check_writable(output_dir, "--output-dir", folder=True)  # before any run trains
    return _compare(cfg, specs, seeds, baseline=baseline, output_dir=output_dir, bootstrap=bootstrap,
                    overwrite=overwrite, config_file=config if isinstance(config, str | Path) else None)


def export(model: Any, output: str | os.PathLike, *, format: str = "onnx", **options: Any) -> OnnxExport:  # noqa: A002
    """Export a saved model, or one fold of a run, to a serving format (``attnpool export``); ``format``: onnx.

    Args:
        model: A run folder (``attnpool train``'s ``--output-dir``; text, any path object or an opened
            :class:`~attnpool.Run`), a folder saved with ``save_pretrained``, or a model object.
        output: The ``.onnx`` file to write; its folder is created.
        format: ``onnx``.
        **options: Those of :func:`attnpool.exporters.export_onnx`: ``fold`` (one fold number of a run, e.g. 0;
            default its first trained fold), ``with_weights`` (the pooler's token weights as a second output),
            ``opset``, ``tokenizer`` (for a model object), ``save_tokenizer`` (default True), ``verify`` (compare
            onnxruntime with PyTorch; default True), ``verify_inputs``, ``atol``, ``external_data``.

    Raises:
        TypeError: ``output`` is not a file path; an unknown option.
        ValueError: Another ``format``; ``fold`` not one whole number; and what ``export_onnx`` raises.
    """
    if format != "onnx":
        raise ValueError(f"export format must be 'onnx', got {format!r}")
    output = file_path(output, "output")
    if isinstance(model, str | os.PathLike | Run):  # the run it comes from (RUN, RUN/fold_K, RUN/fold_K/model)
        folder = Path(_folder(model)).expanduser().absolute()
        if run := next((p for p in (folder, folder.parent, folder.parent.parent) if Run.is_run(p)), None):
            refuse_output_in_folder([run], output, "--output", "ONNX graph and its tokenizer files")
    if unknown := [name for name in options if name not in _EXPORT_OPTIONS]:
        close = difflib.get_close_matches(unknown[0], _EXPORT_OPTIONS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TypeError(f"export() got an unexpected keyword argument {unknown[0]!r}{hint}; its options: "
                        f"{', '.join(_EXPORT_OPTIONS)}")
    fold = options.get("fold")
    if fold is not None and (isinstance(fold, bool) or not isinstance(fold, numbers.Integral)):
        raise ValueError(f"fold {fold!r} is not a fold number: export writes one fold's model; give one whole "
                         "number, e.g. fold=0 (--fold 0), or leave fold out for the run's first trained fold")
    with quiet_library_call():
        return export_onnx(_folder(model), output, **options)


def serve(run: RunFolders, *, host: str = "127.0.0.1", port: int = 8000,
          folds: int | Sequence[int] | None = None,
          ensemble: str = "mean", max_batch: int = 64, max_wait_ms: float = 5.0, max_rows: int = 256,
          max_body_bytes: int = 1 << 20, max_in_flight: int = 512, body_timeout: float = 30.0,
          api_key_env: str | None = None,
          cors_origins: Sequence[str] = (), cors_headers: Sequence[str] = (), allowed_hosts: Sequence[str] = (),
          max_length: int | None = None, device: str | None = None, precision: str = "auto", backend: str = "torch",
          quantize: str = "none", int8_tolerance: float = INT8_TOLERANCE, calibration_file: str | Path | None = None,
          threads: int | None = None, blend_weights: Sequence[float] | None = None,
          context_view: str = "with") -> ServeSummary:
    """Serve a run's fold ensemble, a blend of runs or a saved model over HTTP until SIGTERM or Ctrl+C (``serve``).

    ``POST /predict`` answers rows with the numbers ``predict`` writes for them (every fold, ensembled alike; several
    runs blended as ``predict --run A B`` blends them, word weights from the first run),
    batching concurrent requests; ``GET /`` is a page that shades the words by their pooling weight; ``/health``,
    ``/info``, ``/metrics`` (Prometheus) and ``/openapi.json`` describe the server. Needs ``attnpool[serve]``.
    It blocks, running an event loop of its own: in a notebook (whose cell runs in an event loop) call it from a
    thread, ``threading.Thread(target=attnpool.serve, args=(RUN,), daemon=True).start()``, or run ``attnpool
    serve`` in a terminal.

    Args:
        run: The ``--output-dir`` of ``attnpool train``, or a folder saved with ``save_pretrained`` (model and
            tokenizer; its rows are ``text`` and an optional ``text_pair``); or several runs, blended (a row then
            takes the fields of every run).
        host: The address to listen on; the default answers this machine only.
        port: The port; 0 for any free one (the log says which).
        folds: Which trained folds to ensemble; default: all of them.
        ensemble: ``mean``, or ``score`` (weights proportional to each fold's validation metric,
            clipped at 0; a fold without one weighs 0, and the folds weigh equally, with a warning, when none
            scored above 0), as ``predict``.
        max_batch: Rows per forward pass at most: concurrent requests are run together up to this many rows.
        max_wait_ms: How long a request may wait for others to join its batch.
        max_rows: Rows per request at most (more: 422).
        max_body_bytes: Request bodies over this size are refused (413).
        max_in_flight: Requests handled at once at most, ``/health`` and ``/metrics`` aside; more are answered
            503 with ``Retry-After`` at once.
        body_timeout: Seconds a request's whole body may take to arrive (from the start of the request); a
            slower one is answered 408 and its connection closed, so that clients that stop sending cannot hold
            the places of ``max_in_flight``.
        api_key_env: The name of an environment variable holding an API key that every request but ``/health``
            must send (``Authorization: Bearer KEY``); 401 otherwise.
        cors_origins: Web origins allowed to call the API from a browser (CORS is off by default).
        cors_headers: Request headers such a page may send besides ``Authorization``, ``Content-Type`` and
            ``X-API-Key`` (e.g. ``X-Request-ID``, ``traceparent``); needs ``cors_origins``.
        allowed_hosts: Host names a server on loopback answers besides ``localhost`` and its addresses: the
            public name a reverse proxy on the same machine passes on in ``Host``.
        max_length: Truncation for a saved model folder (default 128); a run uses its own.
        device: ``cpu``, ``cuda``...; default: CUDA when available.
        precision: ``auto`` (bf16 on a GPU with native bf16, compute capability 8.0+, or a CPU with native bf16;
            else fp32), ``fp32``, ``bf16`` or ``fp16``.
        backend: ``torch``, or ``onnx`` (a run only): ONNX Runtime on each fold's graph, exported once into the run,
            as ``predict --backend onnx``; word weights still come from the PyTorch models.
        quantize: With ``backend="onnx"``: ``none`` or ``int8``, checked at start-up against the float32 models on
            the first rows of ``calibration_file`` and refused, with the figure, beyond ``int8_tolerance``.
        int8_tolerance: The largest |int8 - float32| difference of a score accepted.
        calibration_file: Rows like the ones to be served; default: the run's training file.
        threads: CPU threads of the model; default one per physical core, or torch's count where
            ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set. Tokenising (in the request threads)
            runs without a thread pool of its own, so the two do not compete for cores.
        blend_weights: With several runs, one non-negative weight per run (normalised); default: equal.
        context_view: A run trained with a group context reads each row with the context of the other rows of its
            request (``with``), without it (``without``), or both, averaged (``both``), as ``predict``.

    Returns:
        A :class:`~attnpool.serving.ServeSummary` of what was served, once the server has stopped.

    Raises:
        ImportError: FastAPI or uvicorn is missing (``pip install 'attnpool[serve]'``).
        RunError: Not a run or model folder, no such fold, a model that cannot be loaded (nothing is served).
        OSError: The address cannot be listened on.
        ValueError: A bad option, or ``api_key_env`` naming an unset variable.
        RuntimeError: Called where an event loop runs (a notebook's cell): nothing is loaded.
    """
    return _serve(_folders(run), host=host, port=port, folds=folds, ensemble=ensemble, max_batch=max_batch,
                  max_wait_ms=max_wait_ms, max_rows=max_rows, max_body_bytes=max_body_bytes,
                  max_in_flight=max_in_flight, body_timeout=body_timeout, api_key_env=api_key_env,
                  cors_origins=cors_origins, cors_headers=cors_headers, allowed_hosts=allowed_hosts,
                  max_length=max_length, device=device, precision=precision, backend=backend, quantize=quantize,
                  int8_tolerance=int8_tolerance, calibration_file=calibration_file, threads=threads,
                  blend_weights=blend_weights, context_view=context_view)


def demo(output_dir: str | Path = "runs/demo", seconds: float = 45.0, model: str | None = None) -> dict[str, float]:
    """Mean vs attention pooling on a generated key-word task (``attnpool demo``); returns their Pearson scores."""
    return run_demo(output_dir=output_dir, seconds=seconds, model=model)


def poolers(hidden_size: int = 1024) -> list[dict[str, Any]]:
    """Every registered pooler with its parameter count, output size and properties (``attnpool poolers``).

    A pooler that cannot be built at ``hidden_size`` with its default options (``hidden_size`` 100 and 8 heads) is
    listed all the same: ``parameters`` and ``output_dim`` ``None``, and ``note`` saying why (``None`` otherwise).

    Raises:
        ValueError: ``hidden_size`` below 1, or not a whole number (any integer type, ``numpy.int64`` too; not a bool).
    """
    if not isinstance(hidden_size, bool) and isinstance(hidden_size, numbers.Integral):
        hidden_size = operator.index(hidden_size)  # numpy's integers as int: the poolers' layer sizes
    if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
        raise ValueError(f"--hidden-size must be >= 1 (an encoder's hidden size, e.g. 768), got {hidden_size!r}")
    rows = []
    for name in available_poolers():
        cls = get_pooler_class(name)
        row = {"pooler": name, "parameters": None, "output_dim": None, "permutation_invariant":
               cls.permutation_invariant, "token_weights": cls.has_weights, "note": None}
        try:
            pooler = build_pooler(name, hidden_size)
        except ValueError as err:  # e.g. heads that do not divide hidden_size: said in the row, the others listed
            row["note"] = f"cannot be built with its default options: {err}"
        else:
            row.update(parameters=sum(p.numel() for p in pooler.parameters()), output_dim=pooler.output_dim,
                       permutation_invariant=pooler.permutation_invariant, token_weights=pooler.has_weights)
        rows.append(row)
    return rows


__all__ = ["CompareResult", "Explanation", "OnnxExport", "PredictionSummary", "ServeSummary", "TrainConfig",
           "TrainResult", "compare", "demo", "explain", "explain_file", "export", "poolers", "predict", "serve",
           "train"]
