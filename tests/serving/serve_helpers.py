"""A real ``attnpool serve`` in a subprocess on a free loopback port, a small standard-library HTTP client, and
requests to an app in this process (ASGI calls: the test client of Starlette needs httpx, which is not installed)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

API_KEY = "test-key-8f3b"  # of the keyed server
MAX_ROWS = 20  # rows per request of the run's server
MAX_BODY = 4000  # bytes per body of the run's server
READY = re.compile(r"ready on http://127\.0\.0\.1:(\d+)")


class Server:
    """``python -m attnpool serve ARGS --port 0``: started at once, ready when its log says on which port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "attnpool", "serve", *args, "--port", "0", "--device", "cpu"]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=environment)
        self.lines: list[str] = []
        self._port: int | None = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            found = READY.search(line)
            if found:
                self._port = int(found.group(1))
                self._ready.set()
        self._ready.set()  # the process ended

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def port(self) -> int:
        if not self._ready.wait(120) or self._port is None:
            raise RuntimeError(f"the server did not start (exit {self.process.poll()}):\n{self.output[-4000:]}")
        return self._port

    def request(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
                raw: bytes | None = None, timeout: float = 60) -> tuple[int, dict[str, str], Any]:
        return request(self.port, method, path, body, headers=headers, raw=raw, timeout=timeout)

    def terminate(self) -> None:
        """SIGTERM, without waiting."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait: the exit status."""
        self.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(10)
        return code


def request(port: int, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
            raw: bytes | None = None, timeout: float = 60, host: str = "127.0.0.1"
            ) -> tuple[int, dict[str, str], Any]:
    """One HTTP request: ``(status, headers (lower-case names), the JSON answer or the text)``."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    sent = {**({"Content-Type": "application/json"} if body is not None else {}), **(headers or {})}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        text = response.read().decode()
        answer_headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()
    kind = answer_headers.get("content-type", "")
    return response.status, answer_headers, json.loads(text) if kind.startswith("application/json") else text


def wait_until(condition, timeout: float = 30, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(interval)
    return False


def metric(text: str, name: str) -> float:
    """The value of one sample line of Prometheus text (``name`` with its labels, as written)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def asgi(app, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None):
    """One request to an ASGI app in this process: (status, headers, body, the exception it raised or None)."""
    return asyncio.run(asgi_call(app, method, path, body, headers))


async def asgi_call(app, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None):
    """:func:`asgi` on the running loop (the app's lifespan may run on it: see :func:`lifespan`)."""
    sent: list[dict] = []
    all_headers = {"host": "127.0.0.1:8000", "content-type": "application/json", **(headers or {})}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.encode(), v.encode()) for k, v in all_headers.items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    try:
        await app(scope, receive, send)
        raised = None
    except Exception as exc:  # Starlette re-raises what it answered in its outermost layer
        raised = exc
    start = next(m for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, answer, raised


@contextlib.asynccontextmanager
async def lifespan(app):
    """The app's lifespan on the running loop, as uvicorn runs it: started on entry, shut down on exit."""
    events: asyncio.Queue = asyncio.Queue()
    await events.put({"type": "lifespan.startup"})
    sent: list[str] = []

    async def send(message):
        sent.append(message["type"])

    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, events.get, send))
    while "lifespan.startup.complete" not in sent:
        assert not task.done(), sent
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        await events.put({"type": "lifespan.shutdown"})
        await task
