"""The server's counters in the Prometheus text format (``GET /metrics``), and what a server returns when it stops.

Exposed (text format 0.0.4):

* ``attnpool_requests_total{path,status}``: requests answered; ``attnpool_request_errors_total{status}``: those
  answered 4xx or 5xx (499: the client left before its rows ran, and they were withdrawn from the queue);
* ``attnpool_request_duration_seconds{path}``: a latency histogram (from the request's arrival to the end of
  its answer);
* ``attnpool_batch_rows`` and ``attnpool_batch_requests``: histograms of the rows and of the requests in each
  batch the model ran (their ``_sum / _count`` is the mean batch size); ``attnpool_rows_total``;
* ``attnpool_queue_rows`` and ``attnpool_queue_requests``: gauges of what is waiting for the model now;
  ``attnpool_requests_in_flight``: requests being handled now (``/health`` and ``/metrics`` aside), against
  ``--max-in-flight``.

Paths outside the server's own endpoints count as ``other``, so that unknown URLs cannot grow the label set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

PATHS = ("/", "/predict", "/health", "/info", "/metrics", "/openapi.json")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class ServeSummary:
    """What a server did, returned by :func:`attnpool.serve` once it has stopped."""

    url: str  # where it listened
    requests: int  # HTTP requests answered
    rows: int  # rows predicted
    batches: int  # model calls (one forward pass per model for rows that fit in one batch)
    seconds: float  # from ready to stopped


class _Histogram:
    def __init__(self, buckets: Iterable[float]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * len(self.buckets)
        self.count, self.sum = 0, 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.count, self.sum = self.count + 1, self.sum + value

    def lines(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{_number(b)}"}} {c}' for b, c in zip(self.buckets, self.counts,
                                                                                       strict=True)]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braces = f"{{{labels}}}" if labels else ""
        return [*out, f"{name}_sum{braces} {_number(self.sum)}", f"{name}_count{braces} {self.count}"]


class Metrics:
    """Thread-safe counters of one server; :meth:`render` writes them as Prometheus text.

    Args:
        max_batch: The server's ``max_batch`` (the batch histograms' buckets are powers of 2 up to it).
        queue: Called at each scrape for ``(rows, requests)`` waiting now.
    """

    def __init__(self, max_batch: int, queue: Callable[[], tuple[int, int]] | None = None) -> None:
        self._lock = threading.Lock()
        self.queue = queue or (lambda: (0, 0))
        self.in_flight: Callable[[], int] = lambda: 0  # requests being handled now, read at each scrape
        sizes = sorted({*(2**i for i in range(max(max_batch, 1).bit_length() + 1) if 2**i <= max_batch), max_batch})
        self._requests: dict[tuple[str, int], int] = {}
        self._latency: dict[str, _Histogram] = {}
        self._batch_rows, self._batch_requests = _Histogram(sizes), _Histogram(sizes)
        self.started = time.monotonic()

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        path = path if path in PATHS else "other"
        with self._lock:
            self._requests[path, status] = self._requests.get((path, status), 0) + 1
            self._latency.setdefault(path, _Histogram(LATENCY_BUCKETS)).observe(seconds)

    def observe_batch(self, rows: int, requests: int) -> None:
        """Count one model call of ``rows`` rows from ``requests`` requests."""
        with self._lock:
            self._batch_rows.observe(rows)
            self._batch_requests.observe(requests)

    def summary(self, url: str) -> ServeSummary:
        """The totals so far."""
        with self._lock:
            return ServeSummary(url, sum(self._requests.values()), int(self._batch_rows.sum), self._batch_rows.count,
                                time.monotonic() - self.started)

    def render(self) -> str:
        """Everything, in the Prometheus text exposition format."""
        rows, requests = self.queue()
        with self._lock:
            errors: dict[int, int] = {}
            for (_, status), n in self._requests.items():
                if status >= 400:
                    errors[status] = errors.get(status, 0) + n
            out = _family("attnpool_requests_total", "counter", "HTTP requests answered, by path and status.",
                          [f'attnpool_requests_total{{path="{p}",status="{s}"}} {n}'
                           for (p, s), n in sorted(self._requests.items())])
            out += _family("attnpool_request_errors_total", "counter", "Requests answered with a 4xx or 5xx status.",
                           [f'attnpool_request_errors_total{{status="{s}"}} {n}' for s, n in sorted(errors.items())])
            out += _family("attnpool_request_duration_seconds", "histogram", "Request latency, arrival to answer.",
                           [line for p, h in sorted(self._latency.items())
                            for line in h.lines("attnpool_request_duration_seconds", f'path="{p}"')])
            out += _family("attnpool_batch_rows", "histogram", "Rows per model call (dynamic batching).",
                           self._batch_rows.lines("attnpool_batch_rows"))
            out += _family("attnpool_batch_requests", "histogram", "Requests per model call.",
                           self._batch_requests.lines("attnpool_batch_requests"))
            out += _family("attnpool_rows_total", "counter", "Rows predicted.",
                           [f"attnpool_rows_total {int(self._batch_rows.sum)}"])
        out += _family("attnpool_queue_rows", "gauge", "Rows waiting for the model.", [f"attnpool_queue_rows {rows}"])
        out += _family("attnpool_queue_requests", "gauge", "Requests waiting for the model.",
                       [f"attnpool_queue_requests {requests}"])
        out += _family("attnpool_requests_in_flight", "gauge", "Requests being handled (/health, /metrics aside).",
                       [f"attnpool_requests_in_flight {self.in_flight()}"])
        return "\n".join(out) + "\n"


class MetricsMiddleware:
    """ASGI middleware that times every HTTP request and counts its status (the outermost layer)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Pass the request on, timing it until the last byte of its answer."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.metrics.observe_request(scope["path"], status[0], time.perf_counter() - start)

        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            self.metrics.observe_request(scope["path"], 500, time.perf_counter() - start)  # answered outside us
            raise


def _family(name: str, kind: str, help_text: str, lines: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value)) + ".0"
