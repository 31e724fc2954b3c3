"""``attnpool serve``: a train run (every fold, ensembled as ``predict`` does) or one saved model over HTTP.

Layers, each in its own module: :mod:`~attnpool.serving.service` (what is served: loading, rows to tokens,
batches to answers, no web framework), :mod:`~attnpool.serving.weights` (word weights), :mod:`~attnpool.serving.batcher`
(dynamic batching), :mod:`~attnpool.serving.metrics` (Prometheus text), :mod:`~attnpool.serving.schemas` (the JSON
models and error messages), :mod:`~attnpool.serving.guard` (API key, Host, body limits),
:mod:`~attnpool.serving.page` (the web page), :mod:`~attnpool.serving.app` (the FastAPI app) and
:mod:`~attnpool.serving.server` (uvicorn, start-up and draining).

The package imports without FastAPI and uvicorn (the optional extra ``attnpool[serve]``), so that
:mod:`attnpool.api` can import it at its top: :mod:`~attnpool.serving.web` says how.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnpool.serving import web
from attnpool.serving.batcher import Batcher, Busy
from attnpool.serving.metrics import Metrics, ServeSummary
from attnpool.serving.server import run_server
from attnpool.serving.service import Service
from attnpool.serving.web import MISSING_EXTRA


def serve(source: str | Path, *, host: str = "127.0.0.1", port: int = 8000,
          folds: int | Sequence[int] | None = None, ensemble: str = "mean", max_batch: int = 64,
          max_wait_ms: float = 5.0, max_rows: int = 256, max_body_bytes: int = 1 << 20,
          api_key_env: str | None = None, cors_origins: Sequence[str] = (), max_length: int | None = None,
          device: str | None = None, precision: str = "auto") -> ServeSummary:
    """Serve until SIGTERM or Ctrl+C (see :func:`attnpool.serve`).

    Raises:
        ImportError: FastAPI or uvicorn is not installed.
    """
    web.require()
    return run_server(source, host=host, port=port, folds=folds, ensemble=ensemble, max_batch=max_batch,
                      max_wait_ms=max_wait_ms, max_rows=max_rows, max_body_bytes=max_body_bytes,
                      api_key_env=api_key_env, cors_origins=cors_origins, max_length=max_length, device=device,
                      precision=precision)


__all__ = ["MISSING_EXTRA", "Batcher", "Busy", "Metrics", "ServeSummary", "Service", "serve"]
