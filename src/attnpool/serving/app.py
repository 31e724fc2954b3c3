"""The HTTP layer of ``attnpool serve``: a FastAPI application around a :class:`~attnpool.serving.service.Service`.

Endpoints: ``GET /`` (the page), ``POST /predict``, ``GET /health``, ``GET /info``, ``GET /metrics`` (Prometheus
text) and ``GET /openapi.json`` (the schema of every field; the interactive ``/docs`` pages are off, as they load
scripts from a CDN); each ``GET`` endpoint answers ``HEAD`` too (uptime monitors, ``curl -I``). Every error is JSON,
``{"error": "...", "details": [...]}``: 400 malformed JSON, a refused Host or a refused CORS preflight, 401 a
missing or wrong API key, 404/405 no such endpoint or method, 408 a body that did not arrive within
``--body-timeout``, 413 a body over the limit, 415 a body that is not JSON, 422 an invalid request
(``rows[3].target: missing``, or a row of no tokens at all), 503 a full queue, more requests in flight than
``--max-in-flight`` or a batcher that is not running; an error inside the model is a 500 that names its type (the
server logs the traceback; the client does not get the text, which may quote its rows or the server's paths),
scores that are not finite a 500 that names the rows, and the server goes on serving. A request whose client
disconnects before its rows ran, or while it sends its body, leaves the queue (counted as 499 in ``/metrics``;
nobody reads that answer).

FastAPI and Starlette come from :mod:`attnpool.serving.web`, at call time. This module does not use ``from
__future__ import annotations``: FastAPI reads the type of ``/predict``'s body from the handler's annotation, and
that type is built at run time for the served model's fields.
"""

import asyncio
import contextlib
import functools
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnpool._version import __version__
from attnpool.data.errors import DataError
from attnpool.serving import web
from attnpool.serving.batcher import Batcher, Busy, NotRunning
from attnpool.serving.guard import Cors, Guard, InFlight, is_loopback
from attnpool.serving.metrics import CONTENT_TYPE, Metrics, MetricsMiddleware
from attnpool.serving.page import render_page
from attnpool.serving.schemas import build_models, describe, no_tokens, row_values
from attnpool.serving.service import Answer, Service
from attnpool.training.console_logging import SUMMARY  # the line --quiet keeps: where the server listens

logger = logging.getLogger("attnpool.serve")

ENDPOINTS = ("GET /", "POST /predict", "GET /health", "GET /info", "GET /metrics", "GET /openapi.json")
_ERRORS = {400: "malformed JSON, a Host refused on a loopback server, or a refused CORS preflight",
           401: "missing or wrong API key",
           408: "the body did not arrive within --body-timeout", 413: "body over --max-body-bytes",
           415: "body not application/json",
           422: "invalid request: what and where, e.g. rows[3].target: missing",
           500: "an error inside the model (named; the server logs the details), or scores that are not finite",
           503: "queue full or --max-in-flight requests in flight: retry later; or the batcher is not running"}
CLIENT_LEFT = 499  # nginx's "client closed request": counted in /metrics; the client is gone and reads nothing


class ScoresNotFinite(ValueError):
    """A request's scores (or word weights) hold NaN or infinity, which JSON cannot carry: the model failed."""


class ClientLeft(Exception):
    """The client disconnected while its request waited for the model: the request was withdrawn."""


@dataclass
class Settings:
    """How the server serves (the options of ``attnpool serve`` other than the model's)."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 64
    max_wait_ms: float = 5.0
    max_rows: int = 256
    max_body_bytes: int = 1 << 20
    api_key: str | None = field(default=None, repr=False)
    cors_origins: Sequence[str] = ()
    cors_headers: Sequence[str] = ()  # request headers a CORS page may send besides guard.CORS_HEADERS
    allowed_hosts: Sequence[str] = ()  # Host names a loopback server answers besides its loopback names
    max_in_flight: int = 512  # requests handled at once (/health and /metrics aside); more get 503
    body_timeout: float = 30.0  # seconds a request's whole body may take to arrive; then 408 (frees its place)
    stopping: Callable[[], bool] = field(default=lambda: False, repr=False)  # the server began to shut down

    @property
    def url(self) -> str:
        """``http://host:port``."""
        host = self.host.strip("[]")  # given bracketed or not
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def max_queue_rows(self) -> int:
        """Rows that may wait for the model at once; more get 503."""
        return max(16 * self.max_batch, 4 * self.max_rows)


def create_app(service: Service, settings: Settings) -> Any:
    """The application serving ``service``; its batcher starts and stops with the app's lifespan."""
    metrics = Metrics(settings.max_batch)
    batcher = Batcher(functools.partial(service.run, batch_size=settings.max_batch), max_batch=settings.max_batch,
                      max_wait_ms=settings.max_wait_ms, max_queue_rows=settings.max_queue_rows,
                      on_batch=metrics.observe_batch)
    metrics.queue = lambda: (batcher.queued_rows, batcher.queued_requests)
    in_flight = InFlight(settings.max_in_flight)
    metrics.in_flight = lambda: in_flight.count
    info = {**service.info(), "max_rows": settings.max_rows, "max_batch": settings.max_batch,
            "max_wait_ms": settings.max_wait_ms, "max_body_bytes": settings.max_body_bytes,
            "max_in_flight": settings.max_in_flight, "body_timeout": settings.body_timeout,
            "api_key": settings.api_key is not None}
    page, csp = render_page(info)
    models = build_models(service, settings.max_rows)
    body_model = models.request

    async def watch() -> None:  # a signal began uvicorn's shutdown: drain (see begin_drain)
        while not settings.stopping():
            await asyncio.sleep(0.05)
        begin_drain(app)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        app.state.draining = False  # a second lifespan of the same app (tests, embedding) serves again
        await batcher.start()
        watcher = asyncio.get_running_loop().create_task(watch())
        metrics.started = time.monotonic()
        logger.log(SUMMARY, "attnpool serve: ready on %s (%s, %s, max batch %d, max wait %g ms%s)", settings.url,
                    service.describe(), service.device, settings.max_batch, settings.max_wait_ms,
                    ", API key required" if settings.api_key else "")
        yield
        watcher.cancel()
        await batcher.stop()

    # redirect_slashes off: "/predict/" got a bare 307 to an http:// Location (wrong behind a TLS proxy) with no body;
    # now it is the JSON 404 that names the endpoints
    app = web.FastAPI(title="attnpool serve", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                      redirect_slashes=False,
                      description=f"Predictions of {service.describe(public=True)} ({service.task}): rows of "
                      f"{', '.join(service.fields)}, as attnpool predict computes them.")
    app.state.service, app.state.metrics, app.state.batcher = service, metrics, batcher
    app.state.settings, app.state.draining = settings, False

    def render(answer: Answer, ids: list[Any]) -> bytes:  # in a worker thread (see predict)
        check_finite(answer, service.precision, service.backend)
        return _json(service.respond(answer, ids))

    async def predict(body: body_model, request: web.Request) -> Any:  # type: ignore[valid-type]
        """Predict rows (up to --max-rows), batched with concurrent requests; ``"weights": true`` adds the words."""
        if body.weights and not service.token_weights:
            return _error(422, f"weights: the model's pooler {service.pooler.get('type')!r} gives no token weights; "
                          'leave "weights" out')
        values = [row_values(row, service) for row in body.rows]
        try:
            job = await web.run_in_threadpool(service.encode, [texts for texts, _ in values], texts=body.weights)
        except DataError as err:
            return _error(422, f"rows: {err}")
        refused = no_tokens(job, [texts for texts, _ in values], service)
        if refused is not None:
            return _error(422, refused)
        try:
            answer = await unless_client_leaves(batcher.submit(job, job.rows), request.receive)
        except ClientLeft:
            return _error(CLIENT_LEFT, "the client closed the connection before its rows ran; they were withdrawn")
        except Busy as err:
            return _error(503, f"busy: {err}; retry later", {"Retry-After": "1"})
        except NotRunning as err:
            return _error(503, f"unavailable: {err}")
        try:  # off the event loop: a large answer with its words takes a while to write, and /health must not wait
            content = await web.run_in_threadpool(render, answer, [row_id for _, row_id in values])
        except ScoresNotFinite as err:
            logger.error("attnpool serve: POST /predict: %s", err)
            return _error(500, str(err))
        return web.Response(content, media_type="application/json")

    app.add_api_route("/predict", predict, methods=["POST"], response_model=models.response,
                      responses={k: {"model": models.error, "description": v} for k, v in _ERRORS.items()})

    @app.get("/health", response_model=models.health, responses={503: {
        "model": models.health, "description": "draining, or the batcher is not running (and why)"}})
    async def health() -> Any:
        """Ready once the models are loaded and the batcher runs; 503 while shutting down or when it does not run."""
        if app.state.draining:
            return web.JSONResponse({"status": "draining"}, status_code=503)
        if not batcher.running:  # no request would be answered
            return web.JSONResponse({"status": batcher.not_running or "the batcher is not running"}, status_code=503)
        return web.JSONResponse({"status": "ready"})

    @app.get("/info")
    async def get_info() -> dict[str, Any]:
        """The attnpool version, encoder, pooler, task, labels, folds, max_length, the row fields and the limits."""
        return info

    @app.get("/metrics", response_class=web.PlainTextResponse)
    async def get_metrics() -> Any:
        """Requests, errors by status, latency, batch sizes and queue depth, in the Prometheus text format."""
        return web.PlainTextResponse(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/", response_class=web.HTMLResponse, include_in_schema=False)
    async def get_page() -> Any:
        return web.HTMLResponse(page, headers={"Content-Security-Policy": csp})

    # FastAPI's GET routes refuse HEAD (405), which uptime monitors and `curl -I` send; out of the schema, where a
    # second operation of the same handler would be a duplicate operation id. Guard drops the bodies.
    for path, endpoint in (("/", get_page), ("/health", health), ("/info", get_info), ("/metrics", get_metrics)):
        app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False)

    @app.exception_handler(web.RequestValidationError)
    async def invalid(request: Any, exc: Any) -> Any:
        status, details, undescribed = describe(exc.errors(), service)
        message = "; ".join(f"{d['where']}: {d['what']}" for d in details[:5])
        total = len(details) + undescribed
        more = f"; and {total - 5} more" if total > 5 else ""
        more += f" (details lists the first {len(details)})" if undescribed else ""
        return web.JSONResponse({"error": message + more, "details": details}, status_code=status)

    @app.exception_handler(web.HTTPException)
    async def http_error(request: Any, exc: Any) -> Any:
        if exc.status_code == 404:
            path = request.url.path
            bare = path.rstrip("/")  # "/predict/": no redirect (see redirect_slashes), but a hint
            hint = f" (without the trailing slash: {bare})" if bare != path and any(
                e.endswith(f" {bare}") for e in ENDPOINTS) else ""
            message = f"no such endpoint: {path}{hint}; the endpoints are {', '.join(ENDPOINTS)}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; the endpoints are {', '.join(ENDPOINTS)}"
        elif exc.status_code == 400 and isinstance(exc.__cause__, web.ClientDisconnect):  # FastAPI's "error parsing"
            return _error(CLIENT_LEFT, "the client closed the connection while sending its body")
        elif exc.status_code == 400 and exc.__cause__ is not None:
            message = _unparsed(exc.__cause__) or str(exc.detail)
        else:
            message = str(exc.detail)
        return _error(exc.status_code, message, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def crashed(request: Any, exc: Exception) -> Any:  # a failure of the middleware itself (see Crashes)
        logger.exception("attnpool serve: %s %s failed", request.method, request.url.path)
        return _error(500, _internal(exc, request.method, request.url.path))

    app.add_middleware(Crashes)  # innermost: its 500 passes through the others (headers, CORS, counted)
    app.add_middleware(Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes,
                       loopback_only=is_loopback(settings.host), allowed_hosts=settings.allowed_hosts,
                       in_flight=in_flight, body_timeout=settings.body_timeout)
    if settings.cors_origins:  # off unless asked: other web sites' pages cannot read the answers
        app.add_middleware(Cors, origins=settings.cors_origins, headers=settings.cors_headers)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts refused requests too
    return app


class Crashes:
    """ASGI middleware answering an exception of a handler with a JSON 500 that names it, and logging it.

    Starlette answers an unhandled exception in its outermost layer, outside the application's middleware: that
    answer would lack the security headers (:class:`~attnpool.serving.guard.Guard`) and the CORS headers, so that a
    browser page allowed by ``--cors-origin`` could not read the error. This layer sits inside them.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Pass the request on; if it fails before its answer began, answer 500."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = [False]

        async def send_tracked(message: dict) -> None:
            started[0] = started[0] or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            if started[0]:
                raise  # too late to answer: the server closes the connection
            logger.exception("attnpool serve: %s %s failed", scope["method"], scope["path"])
            await _error(500, _internal(exc, scope["method"], scope["path"]))(scope, receive, send)


def begin_drain(app: Any) -> None:
    """Mark the server as shutting down (``/health`` answers 503) and run queued requests without waiting."""
    app.state.draining = True
    app.state.batcher.flush()


async def unless_client_leaves(work: Awaitable[Any], receive: Callable[[], Awaitable[dict]]) -> Any:
    """``await work``, unless the client disconnects first: then cancel it and raise :class:`ClientLeft`.

    Neither Starlette nor uvicorn cancels a handler whose client left, so a request abandoned by its client (one
    that timed out, and may be retrying) would keep its place in the batcher's queue and use the model. Once the
    body has been read, the server's ``receive`` returns ``http.disconnect`` only when the client leaves (or the
    answer is complete): it is awaited once, alongside ``work``, never polled. Any other message (an ASGI test
    client's that repeats the request) or a failure of ``receive`` ends the watch: the request is served as usual.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(receive())
    watcher.add_done_callback(lambda done: done.cancelled() or done.exception())  # a failed watch is not logged
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        left = (watcher.done() and not watcher.cancelled() and watcher.exception() is None
                and watcher.result().get("type") == "http.disconnect")
        if left and not task.done():
            task.cancel()  # the batcher withdraws the rows if they wait still; a batch already running ends unread
            raise ClientLeft
        return await task
    finally:  # a handler cancelled itself cancels both; a finished request stops watching
        watcher.cancel()
        task.cancel()


def check_finite(answer: Answer, precision: str, backend: str = "torch") -> None:
    """Raise :class:`ScoresNotFinite` naming the rows of ``answer`` whose scores or word weights are not finite.

    JSON has no NaN: unchecked, the answer failed as it was written, with a message that said nothing of the model.
    ``precision``: the PyTorch models' (``--precision``); with ``backend`` ``onnx`` or ``onnx-int8`` it applies to
    the word weights only, the scores being ONNX Runtime's (float32 or int8), so the advice names what computed them.
    """
    scores_ok = np.isfinite(np.asarray(answer.scores, dtype=np.float64).reshape(len(answer.scores), -1)).all(axis=1)
    words_ok = [answer.words is None or all(np.isfinite(word["weights"]).all() for word in answer.words[i])
                for i in range(len(scores_ok))]
    bad = [i for i, (score, words) in enumerate(zip(scores_ok, words_ok, strict=True)) if not (score and words)]
    if not bad:
        return
    rows = ", ".join(f"rows[{i}]" for i in bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
    if backend == "torch":
        said = f"precision {precision}"
        fix = ("check the model: its weights may hold NaN" if precision == "fp32" else "serve with --precision fp32 "
               "(float16 and bfloat16 overflow where float32 does not); if that does not help, check the model")
    else:
        computed = "int8" if backend.endswith("int8") else "float32"
        said = f"scores by ONNX Runtime in {computed}" + ("" if answer.words is None else
                                                         f", word weights by PyTorch in precision {precision}")
        if all(scores_ok[i] for i in bad) and precision != "fp32":  # only the word weights: --precision applies
            fix = ("serve with --precision fp32 (with --backend onnx it applies to the word weights only); if that "
                   "does not help, check the model")
        elif computed == "int8":
            fix = "serve with --quantize none; if that does not help, check the model: its weights may hold NaN"
        else:
            fix = "check the model: its weights may hold NaN"
    raise ScoresNotFinite(f"{rows}: the model's scores or word weights are not finite (NaN or infinity), so there is "
                          f"no prediction to send ({said}): {fix}")


def _unparsed(cause: BaseException) -> str | None:
    """Why a body could not be parsed, which FastAPI's own message ("There was an error parsing the body") omits."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not valid UTF-8 JSON (byte {cause.object[cause.start]:#04x} at position {cause.start}): "
                "send UTF-8")
    if isinstance(cause, RecursionError):
        return ("body: JSON nested too deeply to parse (arrays or objects hundreds of levels deep); a request is "
                '{"rows": [{...}, ...]}')
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):  # Python's int(str) limit
        return (f"body: a number of over {sys.get_int_max_str_digits()} digits, too long to read; send such a "
                "number (an id) as a string")
    return None


def _internal(exc: Exception, method: str, path: str) -> str:
    """A 500's message: the error's type only, as its text may quote other requests' rows or the server's paths."""
    return f"internal error: {type(exc).__name__} in {method} {path}; the server's log has the details"


def _json(content: Any) -> bytes:
    """``content`` as :class:`starlette.responses.JSONResponse` writes it, byte for byte."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    return web.JSONResponse({"error": message}, status_code=status, headers=headers)
