"""Start-up and shutdown of ``attnpool serve``: load, listen, serve with uvicorn, drain on SIGTERM.

The order makes a half-ready server impossible: the models are loaded and run once *before* the port is opened,
so a model that fails to load stops the start-up with its error (and the command exits 2) while nothing listens;
``GET /health`` answers only once the server is ready. On SIGTERM (or Ctrl+C) uvicorn stops accepting
connections and waits for the requests in flight (the batcher runs what is queued at once), then the batcher
stops and :func:`run_server` returns; a second Ctrl+C forces the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import math
import os
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnpool.serving import web
from attnpool.serving.app import Settings, create_app
from attnpool.serving.blend import load_service
from attnpool.serving.guard import check_names, is_loopback
from attnpool.serving.metrics import ServeSummary
from attnpool.serving.process import thread_settings_kept

logger = logging.getLogger("attnpool.serve")

GRACEFUL_SECONDS = 30  # how long requests in flight may take to finish after SIGTERM


def run_server(source: str | Path | Sequence[str | Path], *, host: str = "127.0.0.1", port: int = 8000,
               max_batch: int = 64,
               max_wait_ms: float = 5.0, max_rows: int = 256, max_body_bytes: int = 1 << 20,
               max_in_flight: int = 512, body_timeout: float = 30.0, api_key_env: str | None = None,
               cors_origins: Sequence[str] = (),
               cors_headers: Sequence[str] = (), allowed_hosts: Sequence[str] = (),
               **load_options: Any) -> ServeSummary:
    """Serve ``source`` until SIGTERM or Ctrl+C; see :func:`attnpool.serve` for the arguments.

    ``load_options`` are :meth:`Service.load`'s (folds, ensemble, device, precision, max_length, backend, quantize,
    int8_tolerance, calibration_file, threads; ``max_batch`` is passed on, the batch int8 is checked at) and, with
    several runs, ``blend_weights``
    (:func:`attnpool.serving.blend.load_service`). The process's thread settings (PyTorch's pool,
    ``TOKENIZERS_PARALLELISM``) are its own again once this returns or raises.

    Raises:
        RuntimeError: Called in a thread that runs an event loop (a notebook): the server needs its own.
    """
    web.require()
    _check_no_event_loop()
    _check_options(port=port, max_batch=max_batch, max_wait_ms=max_wait_ms, max_rows=max_rows,
                   max_body_bytes=max_body_bytes, max_in_flight=max_in_flight, body_timeout=body_timeout)
    # one name given as a string is that name, not its characters
    cors_origins, cors_headers, allowed_hosts = ((names,) if isinstance(names, str) else tuple(names)
                                                 for names in (cors_origins, cors_headers, allowed_hosts))
    check_names(allowed_hosts, cors_headers, host=host, cors=bool(cors_origins))
    api_key = read_api_key(api_key_env)
    with thread_settings_kept(on_success=True):
        service = load_service(source, max_batch=max_batch, **load_options)  # int8 is checked at --max-batch
        service.warm_up()
        if not is_loopback(host) and api_key is None:
            logger.warning("attnpool serve: listening on %s without --api-key-env: anyone who can reach this "
                           "address can use the model", host)
        sock = listen(host, port)
        try:  # the port is released whatever fails from here (serve() called from Python goes on running)
            settings = Settings(host=host, port=sock.getsockname()[1], max_batch=max_batch, max_wait_ms=max_wait_ms,
                                max_rows=max_rows, max_body_bytes=max_body_bytes, max_in_flight=max_in_flight,
                                body_timeout=body_timeout,
                                api_key=api_key, cors_origins=cors_origins, cors_headers=cors_headers,
                                allowed_hosts=allowed_hosts)
            app = create_app(service, settings)
            # uvicorn's own limit (limit_concurrency) is off: it counts idle keep-alive connections too and answers
            # a plain-text 503, /health included; the app limits the requests in flight (--max-in-flight) instead
            server = web.uvicorn.Server(web.uvicorn.Config(
                app, lifespan="on", log_level="info", access_log=False, server_header=False,
                timeout_graceful_shutdown=GRACEFUL_SECONDS, limit_concurrency=None))
            settings.stopping = lambda: server.should_exit  # uvicorn sets it on SIGTERM or Ctrl+C; the app drains
            with _signals_kept():
                server.run(sockets=[sock])
        finally:
            sock.close()
    summary = app.state.metrics.summary(settings.url)
    logger.info("attnpool serve: stopped after %d requests (%d rows in %d batches)", summary.requests, summary.rows,
                summary.batches)
    return summary


def read_api_key(variable: str | None) -> str | None:
    """The API key held by the environment variable ``variable`` (``None``: no key).

    Raises:
        ValueError: The variable is not set, or empty.
    """
    if variable is None:
        return None
    key = os.environ.get(variable, "")
    if not key.strip() or not key.isascii():  # HTTP headers carry latin-1: a non-ASCII key could never match
        raise ValueError(f"--api-key-env {variable}: the environment variable {variable} is not set, empty or not "
                         f"ASCII; set it to the key clients must send (e.g. export {variable}=$(openssl rand -hex 24))")
    return key.strip()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free port, the socket says which); ``::`` takes IPv4 too.

    Raises:
        OSError: The address is in use or cannot be bound, with the address in the message.
    """
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    # "::" takes IPv4 connections too, as uvicorn's own --host :: does (create_server would make it IPv6-only)
    dualstack = family == socket.AF_INET6 and _unspecified(address) and socket.has_dualstack_ipv6()
    try:
        return socket.create_server((address, port), family=family, backlog=2048, dualstack_ipv6=dualstack)
    except OSError as err:
        advice = {errno.EADDRINUSE: "; choose another --port (0: any free one), or stop what listens there",
                  errno.EACCES: "; a port below 1024 needs privileges: choose another --port"}.get(
            err.errno, "; check --host: an address of this machine, or 0.0.0.0 for all")
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}{advice}") from err


def _unspecified(address: str) -> bool:
    """Whether ``address`` is the any-address (``::``, ``0.0.0.0``) in any spelling."""
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def _check_no_event_loop() -> None:
    """Raise the ``RuntimeError`` saying what to do when this thread runs an event loop (Jupyter, an async function).

    uvicorn runs the server in an event loop of its own, which cannot start in a thread that runs one: unchecked, the
    call failed only after loading and warming the models up, with uvicorn's unexplained error.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("attnpool.serve blocks until the server stops and runs its own event loop, but this thread "
                       "already runs one (a Jupyter notebook, an async function): run `attnpool serve` in a terminal, "
                       "or call attnpool.serve from a thread: threading.Thread(target=attnpool.serve, args=(RUN,), "
                       "daemon=True).start()")


def _check_options(**values: float) -> None:
    port = values.pop("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be 0 (any free port) to 65535, got {port!r}")
    if not 0 <= values["max_wait_ms"] < math.inf:  # inf would keep a lone request waiting for company forever
        raise ValueError(f"max_wait_ms must be a finite number >= 0, got {values['max_wait_ms']}")
    body_timeout = values.pop("body_timeout", 30.0)
    if isinstance(body_timeout, bool) or not isinstance(body_timeout, int | float) or not 0 < body_timeout < math.inf:
        raise ValueError(f"body_timeout must be a finite number of seconds > 0, got {body_timeout!r}")
    for name in ("max_batch", "max_rows", "max_body_bytes", "max_in_flight"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """Keep SIGINT/SIGTERM from killing the process after uvicorn's graceful shutdown.

    uvicorn re-raises the signal that stopped it once it has shut down, for the handler that was installed before
    it; with Python's defaults that is a ``KeyboardInterrupt`` traceback or a death by SIGTERM. A drained server
    has done what the signal asked, so here those handlers do nothing and :func:`run_server` returns normally.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
