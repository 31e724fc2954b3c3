"""Admission of requests, before any handler runs: the API key, the Host, the body's size and type.

* **CORS off**: without ``--cors-origin`` no :class:`Cors` answers preflights, so a preflight (``OPTIONS`` with
  ``Origin`` and ``Access-Control-Request-Method``) reaches this layer: it is refused with 400 (as :class:`Cors`
  refuses a preflight), saying that CORS is off and that ``--cors-origin ORIGIN`` allows that origin, before the
  API key is asked for (a browser sends no credentials with a preflight) and before the router would answer 405.
* **API key** (``--api-key-env VAR``): every request but ``GET /health`` must carry the key, as
  ``Authorization: Bearer KEY``, ``X-API-Key: KEY``, or HTTP Basic auth with the key as the password (so that a
  browser can open the page: it asks for the key once, then sends it with the page's own requests). Otherwise
  401. Keys are compared in constant time.
* **Host**: a server bound to a loopback address answers only requests whose ``Host`` is a loopback name or one of
  ``--allowed-host`` (the public name a reverse proxy on the same machine passes on), so that a web page cannot
  reach it by pointing its own domain name at 127.0.0.1 (DNS rebinding); 400 otherwise.
* **Body**: a body over ``max_body_bytes`` is refused with 413 (by its ``Content-Length`` at once, else while it
  arrives, before it is parsed); ``POST /predict`` bodies must be ``application/json`` (415), which also keeps
  other web sites' plain form posts out (a cross-site JSON post needs CORS, which is off unless ``--cors-origin``).
  A ``POST`` elsewhere goes on to the router, which answers 404 (no such endpoint) or 405 (no such method). The
  whole body must arrive within ``body_timeout`` seconds of the request (``--body-timeout``), else 408 and the
  connection is closed: neither uvicorn nor Starlette limits how long a body takes, so a client that sent its
  headers and stopped would hold its place among the requests in flight until its TCP connection died.
* **Load**: at most ``max_in_flight`` requests (``--max-in-flight``) are handled at once, ``/health`` and
  ``/metrics`` aside; past it a request is answered at once with 503 and ``Retry-After`` (a JSON error, counted in
  ``/metrics``), so that an overloaded server keeps answering its health checks.
* Every answer gets ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``; a ``HEAD`` request's
  answer has its headers only (uvicorn drops the body too; an ASGI client in a test or an embedding app may not).

:class:`Cors` (``--cors-origin``, ``--cors-header``) is Starlette's CORS middleware, its preflight refusals answered
as JSON errors that say what was refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import ipaddress
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attnpool.serving import web

OPEN_PATHS = ("/health",)  # answered without the API key
UNLIMITED_PATHS = ("/health", "/metrics")  # answered however many requests are in flight
CORS_HEADERS = ("Authorization", "Content-Type", "X-API-Key")  # request headers a CORS page may send; + --cors-header
JSON_PATHS = ("/predict",)  # their POST bodies must be JSON
LOOPBACK_NAMES = ("localhost", "localhost.")
_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str) -> str:
    """The name in a ``Host`` header, without the port: ``[::1]:8000`` -> ``::1``, ``a.b:80`` -> ``a.b``."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


@dataclass
class InFlight:
    """The requests a server is handling now, and the most it handles at once (``--max-in-flight``)."""

    limit: int
    count: int = 0


class Guard:
    """ASGI middleware applying the rules of the module docstring.

    Args:
        app: The application behind it.
        api_key: The key every request but ``/health`` needs; ``None`` for none.
        max_body_bytes: The largest request body accepted.
        loopback_only: Refuse ``Host`` headers that are not loopback names (the server listens on loopback)...
        allowed_hosts: ... nor these names.
        in_flight: The requests in flight and their limit (``None``: no limit).
        body_timeout: Seconds the whole body may take to arrive, from the start of the request.
    """

    def __init__(self, app: Any, *, api_key: str | None, max_body_bytes: int, loopback_only: bool,
                 allowed_hosts: Sequence[str] = (), in_flight: InFlight | None = None,
                 body_timeout: float = 30.0) -> None:
        self.app, self.max_body_bytes, self.loopback_only = app, max_body_bytes, loopback_only
        self.body_timeout = body_timeout
        self.api_key = api_key.encode() if api_key else None
        self.allowed_hosts = {_normal(name) for name in allowed_hosts}
        self.in_flight = in_flight

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Refuse the request, or pass it on with its body counted and the headers added."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = web.Headers(scope=scope)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            elif message["type"] == "http.response.body" and scope["method"] == "HEAD":
                message = {**message, "body": b""}  # Content-Length stays the GET answer's, as HEAD's should
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        received, body_read = [0], [False]
        deadline = time.monotonic() + self.body_timeout  # for the whole body: a trickle of bytes must not reset it

        async def receive_limited() -> dict:
            if body_read[0]:  # what comes next is http.disconnect, awaited while the request runs: no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                raise web.HTTPException(408, f"the body did not arrive within {self.body_timeout:g} s "
                                        "(--body-timeout)", headers={"Connection": "close"}) from None
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_body_bytes:
                    raise web.HTTPException(413, f"the body is over {self.max_body_bytes} bytes (--max-body-bytes)")
                body_read[0] = not message.get("more_body", False)
            return message

        counted = self.in_flight if scope["path"] not in UNLIMITED_PATHS else None
        if counted is not None and counted.count >= counted.limit:
            busy = (f"busy: the server handles at most {counted.limit} requests at once (--max-in-flight) and has "
                    "that many in flight; retry later")
            await _error(503, busy, {"Retry-After": "1"})(scope, receive, send_with_headers)
            return
        if counted is not None:
            counted.count += 1
        try:
            await self.app(scope, receive_limited, send_with_headers)
        finally:
            if counted is not None:
                counted.count -= 1

    def _refusal(self, scope: dict, headers: Any) -> Any:
        """The answer refusing the request, or ``None`` to let it through."""
        path = scope["path"]
        host = _hostname(headers.get("host", ""))
        if self.loopback_only and not is_loopback(host) and _normal(host) not in self.allowed_hosts:
            return _error(400, f"Host {headers.get('host', '')!r} refused: the server listens on loopback only and "
                          "answers requests to localhost or 127.0.0.1 (no DNS rebinding); behind a reverse proxy on "
                          f"this machine, start it with --allowed-host {host if _host_name(host) else 'NAME'} (or "
                          "make the proxy send Host: localhost)")
        if scope["method"] == "OPTIONS" and "origin" in headers and "access-control-request-method" in headers:
            origin = headers["origin"]  # with --cors-origin, Cors (outside this layer) answers every preflight
            return _error(400, f"CORS preflight refused: CORS is off on this server, so no web page of another "
                          f"origin ({origin!r} here) may call it; to allow that origin, start the server with "
                          f"--cors-origin {origin}")
        if self.api_key is not None and path not in OPEN_PATHS and not self._authorised(headers):
            challenge = 'Basic realm="attnpool serve", charset="UTF-8"' if path == "/" else 'Bearer realm="attnpool"'
            return _error(401, "missing or wrong API key: send it as 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                          {"WWW-Authenticate": challenge})
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return _error(413, f"the body is {length} bytes, over the limit of {self.max_body_bytes} "
                          "(--max-body-bytes)")
        if scope["method"] == "POST" and path in JSON_PATHS and not _is_json(headers.get("content-type", "")):
            return _error(415, f"the body must be JSON (Content-Type: application/json), got Content-Type "
                          f"{headers.get('content-type', '(none)')!r}")
        return None

    def _authorised(self, headers: Any) -> bool:
        assert self.api_key is not None
        given = headers.get("x-api-key")
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = credentials.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return False
        return given is not None and hmac.compare_digest(given.encode(), self.api_key)


class Cors:
    """Starlette's CORS middleware for ``origins``, allowing :data:`CORS_HEADERS` and ``headers``.

    A refused preflight is a JSON 400 that says what was refused (Starlette's is plain text, "Disallowed CORS
    headers").
    """

    def __init__(self, app: Any, *, origins: Sequence[str], headers: Sequence[str] = ()) -> None:
        self.cors = web.CORSMiddleware(app, allow_origins=list(origins), allow_methods=["GET", "HEAD", "POST"],
                                       allow_headers=list(dict.fromkeys([*CORS_HEADERS, *headers])))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Answer a preflight request (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``)."""
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = web.Headers(scope=scope)
            if "origin" in headers and "access-control-request-method" in headers:
                answer = self.cors.preflight_response(request_headers=headers)
                if answer.status_code != 200:
                    answer = self._refused(answer, headers)
                await answer(scope, receive, send)
                return
        await self.cors(scope, receive, send)

    def _refused(self, answer: Any, headers: Any) -> Any:
        failures = answer.body.decode("latin-1").removeprefix("Disallowed CORS ").split(", ")
        allowed = self.cors.allow_headers
        requested = [h.strip() for h in headers.get("access-control-request-headers", "").lower().split(",")]
        reasons = {
            "origin": f"origin {headers['origin']!r} is not one of --cors-origin",
            "method": f"method {headers['access-control-request-method']!r} is not allowed (GET, HEAD and POST are)",
            "headers": f"request headers {', '.join(h for h in requested if h not in allowed)!r} are not allowed "
                       f"(allowed: {', '.join(allowed)}; allow more with --cors-header NAME)",
            "private-network": "private network access (Access-Control-Request-Private-Network) is not allowed"}
        kept = {k: v for k, v in answer.headers.items() if k not in ("content-type", "content-length")}
        message = "; ".join(reasons.get(failure, failure) for failure in failures)
        return _error(400, f"CORS preflight refused: {message}", kept)


def _host_name(name: Any) -> bool:
    """Whether ``name`` is a host name or address as clients send it in ``Host`` (what ``--allowed-host`` takes)."""
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9._-]+", name) or _address(name))


def check_names(allowed_hosts: Sequence[str], cors_headers: Sequence[str], *, host: str, cors: bool) -> None:
    """Check ``--allowed-host`` and ``--cors-header`` values.

    Raises:
        ValueError: Not a host name (or address) as clients send it in ``Host``, or not an HTTP header name; or
            one given where it means nothing: ``--allowed-host`` with a server not on loopback (which answers every
            ``Host``), ``--cors-header`` without ``--cors-origin``.
    """
    for name in allowed_hosts:
        if not _host_name(name):
            raise ValueError(f"--allowed-host {name!r}: give a host name or address as clients send it in Host, "
                             "without scheme, port or path (e.g. models.example.com)")
    if allowed_hosts and not is_loopback(host):
        raise ValueError(f"--allowed-host is for a server on loopback behind a reverse proxy on this machine; on "
                         f"--host {host} every Host is answered: leave --allowed-host out")
    for name in cors_headers:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
            raise ValueError(f"--cors-header {name!r}: not an HTTP header name (e.g. X-Request-ID)")
    if cors_headers and not cors:
        raise ValueError("--cors-header needs --cors-origin: without it CORS is off and no page may call the API")


def _address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _normal(name: str) -> str:
    """A host name as compared: lower-case, without IPv6 brackets or the root's trailing dot."""
    return name.strip("[]").lower().rstrip(".")


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    return web.JSONResponse({"error": message}, status_code=status, headers=headers)
