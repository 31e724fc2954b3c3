"""Admission of requests, before any handler runs: the API key, the Host, the body's size and type.

* **API key** (``--api-key-env VAR``): every request but ``GET /health`` must carry the key, as
  ``Authorization: Bearer KEY``, ``X-API-Key: KEY``, or HTTP Basic auth with the key as the password (so that a
  browser can open the page: it asks for the key once, then sends it with the page's own requests). Otherwise
  401. Keys are compared in constant time.
* **Host**: a server bound to a loopback address answers only requests whose ``Host`` is a loopback name, so that
  a web page cannot reach it by pointing its own domain name at 127.0.0.1 (DNS rebinding); 400 otherwise.
* **Body**: a body over ``max_body_bytes`` is refused with 413 (by its ``Content-Length`` at once, else while it
  arrives, before it is parsed); ``POST /predict`` bodies must be ``application/json`` (415), which also keeps
  other web sites' plain form posts out (a cross-site JSON post needs CORS, which is off unless ``--cors-origin``).
  A ``POST`` elsewhere goes on to the router, which answers 404 (no such endpoint) or 405 (no such method).
* Every answer gets ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from attnpool.serving import web

OPEN_PATHS = ("/health",)  # answered without the API key
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


class Guard:
    """ASGI middleware applying the rules of the module docstring.

    Args:
        app: The application behind it.
        api_key: The key every request but ``/health`` needs; ``None`` for none.
        max_body_bytes: The largest request body accepted.
        loopback_only: Refuse ``Host`` headers that are not loopback names (the server listens on loopback).
    """

    def __init__(self, app: Any, *, api_key: str | None, max_body_bytes: int, loopback_only: bool) -> None:
        self.app, self.max_body_bytes, self.loopback_only = app, max_body_bytes, loopback_only
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Refuse the request, or pass it on with its body counted and the headers added."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = web.Headers(scope=scope)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        received = [0]

        async def receive_limited() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_body_bytes:
                    raise web.HTTPException(413, f"the body is over {self.max_body_bytes} bytes (--max-body-bytes)")
            return message

        await self.app(scope, receive_limited, send_with_headers)

    def _refusal(self, scope: dict, headers: Any) -> Any:
        """The answer refusing the request, or ``None`` to let it through."""
        path = scope["path"]
        if self.loopback_only and not is_loopback(_hostname(headers.get("host", ""))):
            return _error(400, f"Host {headers.get('host', '')!r} refused: the server listens on loopback only and "
                          "answers requests to localhost or 127.0.0.1 (set --host to serve other names)")
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


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    return web.JSONResponse({"error": message}, status_code=status, headers=headers)
