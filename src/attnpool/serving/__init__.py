"""``attnpool serve``: a train run (every fold, ensembled as ``predict`` does), a blend of runs or a model over HTTP.

Layers, each in its own module: :mod:`~attnpool.serving.service` (what is served: loading, rows to tokens,
batches to answers, no web framework), :mod:`~attnpool.serving.blend` (several runs served as one),
:mod:`~attnpool.serving.weights` (word weights), :mod:`~attnpool.serving.batcher` (dynamic batching),
:mod:`~attnpool.serving.metrics` (Prometheus text), :mod:`~attnpool.serving.schemas` (the JSON models and error
messages), :mod:`~attnpool.serving.guard` (API key, Host, body limits, requests in flight, CORS),
:mod:`~attnpool.serving.process` (the thread settings a refused call gives back),
:mod:`~attnpool.serving.page` (the web page), :mod:`~attnpool.serving.app` (the FastAPI app) and
:mod:`~attnpool.serving.server` (uvicorn, start-up and draining).

The package imports without FastAPI and uvicorn (the optional extra ``attnpool[serve]``), so that
:mod:`attnpool.api` can import it at its top: :mod:`~attnpool.serving.web` says how.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnpool.serving import web
from attnpool.serving.batcher import Batcher, Busy
from attnpool.serving.blend import BlendService
from attnpool.serving.metrics import Metrics, ServeSummary
from attnpool.serving.server import run_server
from attnpool.serving.service import Service
from attnpool.serving.web import MISSING_EXTRA


def serve(source: str | Path | Sequence[str | Path], **options: Any) -> ServeSummary:
    """Serve until SIGTERM or Ctrl+C (see :func:`attnpool.serve` for the options).

    Raises:
        ImportError: FastAPI or uvicorn is not installed.
    """
    web.require()
    return run_server(source, **options)


__all__ = ["MISSING_EXTRA", "Batcher", "BlendService", "Busy", "Metrics", "ServeSummary", "Service", "serve"]
