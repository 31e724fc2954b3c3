"""Admission under load and behind proxies: requests in flight past ``--max-in-flight`` get the app's JSON 503 with
``Retry-After`` while ``/health`` answers; a body that does not arrive within ``--body-timeout`` is a 408 that frees
its place; ``HEAD`` on the ``GET`` endpoints; ``--allowed-host`` for a reverse proxy on the same machine; the CORS
headers a page may send (``--cors-header``) and preflight refusals as JSON errors."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
import torch
from serve_helpers import asgi, asgi_call, lifespan

import attnpool
from attnpool import cli
from attnpool.serving import guard
from attnpool.serving import server as server_module
from attnpool.serving.app import Settings, begin_drain, create_app
from attnpool.serving.service import Service

ROW = json.dumps({"rows": [{"text": "the cat"}]}).encode()


@pytest.fixture
def service(classifier, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return Service.load(classifier, device="cpu", precision="fp32", max_length=16, threads=torch.get_num_threads())


async def held_request(app, started: asyncio.Event, release: asyncio.Event):
    """A POST /predict whose body arrives only once ``release`` is set: in flight until then."""
    sent: list[dict] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}

    async def receive():
        started.set()
        await release.wait()
        return {"type": "http.request", "body": ROW, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_requests_past_max_in_flight_get_a_json_503_and_health_still_answers(service):
    """uvicorn's limit_concurrency answered plain-text 503s without Retry-After, /health included."""
    app = create_app(service, Settings(max_wait_ms=0, max_in_flight=2))

    async def main():
        async with lifespan(app):
            release = asyncio.Event()
            starts = [asyncio.Event(), asyncio.Event()]
            held = [asyncio.ensure_future(held_request(app, started, release)) for started in starts]
            for started in starts:
                await started.wait()
            busy = await asgi_call(app, "POST", "/predict", ROW)
            page = await asgi_call(app, "GET", "/info")
            health = await asgi_call(app, "GET", "/health")
            metrics = await asgi_call(app, "GET", "/metrics")
            release.set()
            statuses = await asyncio.gather(*held)
            after = await asgi_call(app, "POST", "/predict", ROW)
        return busy, page, health, metrics, statuses, after

    busy, page, health, metrics, statuses, after = asyncio.run(main())
    status, headers, body, _ = busy
    assert status == 503 and headers["retry-after"] == "1" and headers["content-type"] == "application/json"
    assert json.loads(body)["error"] == ("busy: the server handles at most 2 requests at once (--max-in-flight) "
                                         "and has that many in flight; retry later")
    assert headers["x-content-type-options"] == "nosniff"
    assert page[0] == 503 and health[0] == 200 and metrics[0] == 200
    text = metrics[2].decode()
    assert 'attnpool_requests_total{path="/predict",status="503"} 1' in text
    assert "attnpool_requests_in_flight 2" in text
    assert statuses == [200, 200] and after[0] == 200
    assert json.loads(asgi(app, "GET", "/info")[2])["max_in_flight"] == 2


def uvicorn_receive(*messages: dict):
    """As uvicorn's ``receive``: ``messages``, then nothing (a client that stops sending, or waits for its answer)."""
    pending = iter(messages)

    async def receive():
        for message in pending:
            return message
        await asyncio.Event().wait()  # cancelled by whoever gives up waiting
    return receive


async def post_with(app, receive) -> tuple[int, dict[str, str], bytes]:
    """A ``POST /predict`` (``Content-Length: 100``) whose body comes from ``receive``: status, headers, body."""
    sent: list[dict] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                         (b"content-length", b"100")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return (start["status"], {k.decode(): v.decode() for k, v in start["headers"]},
            b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def test_a_body_that_does_not_arrive_in_time_is_a_408_that_frees_its_place(service):
    """Headers, one byte of a 100-byte body, then nothing: the request held its --max-in-flight place until TCP gave
    up (neither uvicorn nor Starlette limits how long a body takes), so four such clients made every /predict a 503
    "busy" while /health said ready. A trickle of bytes must not reset the deadline; after the body, waiting for the
    model (and watching for the client leaving) is not limited by it."""
    app = create_app(service, Settings(max_batch=4, max_wait_ms=400, max_in_flight=1, body_timeout=0.2))

    def trickle():
        async def receive():
            await asyncio.sleep(0.05)
            return {"type": "http.request", "body": b" ", "more_body": True}
        return receive

    async def main():
        async with lifespan(app):
            began = time.monotonic()
            stalled = await asyncio.wait_for(post_with(app, uvicorn_receive(
                {"type": "http.request", "body": b"{", "more_body": True})), 10)
            waited = time.monotonic() - began
            trickled = await asyncio.wait_for(post_with(app, trickle()), 10)
            # the lone row waits 0.4 s for company, twice the body's deadline, and is answered
            served = await asyncio.wait_for(post_with(app, uvicorn_receive(
                {"type": "http.request", "body": ROW, "more_body": False})), 10)
            after = await asgi_call(app, "POST", "/predict", ROW)
            metrics = (await asgi_call(app, "GET", "/metrics"))[2].decode()
        return stalled, waited, trickled, served, after, metrics

    stalled, waited, trickled, served, after, metrics = asyncio.run(main())
    status, headers, body = stalled
    assert status == 408 and json.loads(body) == {"error": "the body did not arrive within 0.2 s (--body-timeout)"}
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff"
    assert 0.2 <= waited < 5, waited
    assert trickled[0] == 408, trickled
    assert served[0] == 200 and after[0] == 200, (served, after)  # the place was freed: not 503 "busy"
    assert 'attnpool_requests_total{path="/predict",status="408"} 2' in metrics
    assert 'attnpool_request_errors_total{status="408"} 2' in metrics
    assert "attnpool_requests_in_flight 0" in metrics
    assert json.loads(asgi(app, "GET", "/info")[2])["body_timeout"] == 0.2


def test_body_timeout_is_an_option_of_the_command():
    assert cli.build_parser().parse_args(["serve", "--run", "r"]).body_timeout == 30.0
    assert cli.build_parser().parse_args(["serve", "--run", "r", "--body-timeout", "5"]).body_timeout == 5.0
    for bad in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="body_timeout must be a finite number of seconds > 0"):
            server_module._check_options(port=0, max_batch=1, max_wait_ms=0, max_rows=1, max_body_bytes=1,
                                         max_in_flight=1, body_timeout=bad)


def test_the_get_endpoints_answer_head_without_a_body(service):
    """Uptime monitors and `curl -I` send HEAD: FastAPI's GET routes answered 405, /health included."""
    app = create_app(service, Settings(max_wait_ms=0, cors_origins=["https://app.example"]))
    paths = ("/health", "/info", "/", "/metrics", "/openapi.json")

    async def main():
        async with lifespan(app):
            heads = {path: await asgi_call(app, "HEAD", path) for path in paths}
            gets = {path: await asgi_call(app, "GET", path) for path in paths}
            on_predict = await asgi_call(app, "HEAD", "/predict")
            begin_drain(app)
            draining = await asgi_call(app, "HEAD", "/health")
        return heads, gets, on_predict, draining

    heads, gets, on_predict, draining = asyncio.run(main())
    for path in paths:
        (status, headers, body, _), got = heads[path], gets[path]
        assert (status, body) == (200, b""), (path, status, body)
        assert headers["content-type"] == got[1]["content-type"], path
        if path != "/metrics":  # whose numbers change between the two requests
            assert int(headers["content-length"]) == len(got[2]) > 0, path
    assert (draining[0], draining[2]) == (503, b"")
    assert on_predict[0] == 405 and on_predict[2] == b""
    assert set(json.loads(gets["/openapi.json"][2])["paths"]["/health"]) == {"get"}  # no duplicate operation
    preflight = {"origin": "https://app.example", "access-control-request-method": "HEAD"}
    status, headers, _, _ = asgi(app, "OPTIONS", "/health", b"", preflight)
    assert status == 200 and "HEAD" in headers["access-control-allow-methods"]


def test_uvicorn_leaves_the_limit_to_the_app_and_serve_gives_the_threads_back(classifier, monkeypatch):
    """At 1000 connections (idle keep-alive ones included) uvicorn answered 503 text/plain, /health too."""
    configs = []

    class Server:  # uvicorn.Server that stops at once
        should_exit = False

        def __init__(self, config):
            configs.append(config)

        def run(self, sockets):
            pass

    monkeypatch.setattr(server_module.web.uvicorn, "Server", Server)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = attnpool.serve(classifier, port=0, max_length=16, device="cpu", precision="fp32", threads=2)
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert summary.requests == 0 and len(configs) == 1
    assert configs[0].limit_concurrency is None, configs[0].limit_concurrency
    assert threads == 1 and "TOKENIZERS_PARALLELISM" not in os.environ


def test_max_in_flight_is_an_option_of_the_command():
    args = cli.build_parser().parse_args(["serve", "--run", "r"])
    assert args.max_in_flight == 512
    assert cli.build_parser().parse_args(["serve", "--run", "r", "--max-in-flight", "9"]).max_in_flight == 9
    with pytest.raises(ValueError, match="max_in_flight must be an integer >= 1, got 0"):
        server_module._check_options(port=0, max_batch=1, max_wait_ms=0, max_rows=1, max_body_bytes=1,
                                     max_in_flight=0)


def test_a_refused_host_points_at_allowed_host_not_at_host(service):
    """The 400 said "set --host", which binds a public interface; behind a proxy the fix is --allowed-host."""
    app = create_app(service, Settings())
    status, _, body, _ = asgi(app, "GET", "/info", headers={"host": "evil.example:80"})
    message = json.loads(body)["error"]
    assert status == 400 and "--allowed-host evil.example" in message and "Host: localhost" in message, message
    assert "--host" not in message.replace("--allowed-host", "")


def test_a_refused_host_that_is_no_host_name_is_not_suggested_for_allowed_host(service):
    """The 400 suggested --allowed-host 'evil.com<script>', which --allowed-host itself refuses."""
    app = create_app(service, Settings())
    status, _, body, _ = asgi(app, "GET", "/info", headers={"host": "evil.com<script>"})
    message = json.loads(body)["error"]
    assert status == 400 and "--allowed-host NAME (or make the proxy send Host: localhost)" in message, message


def test_a_reverse_proxy_on_this_machine_may_pass_its_public_host(service):
    """Caddy, Traefik and nginx's `proxy_set_header Host $host` pass the public name: every request was a 400."""
    app = create_app(service, Settings(allowed_hosts=["Models.Example.com"]))
    assert asgi(app, "GET", "/info", headers={"host": "models.example.com"})[0] == 200
    assert asgi(app, "GET", "/info", headers={"host": "models.example.com.:443"})[0] == 200
    assert asgi(app, "GET", "/info", headers={"host": "localhost:8000"})[0] == 200
    assert asgi(app, "GET", "/info", headers={"host": "evil.example:80"})[0] == 400
    args = cli.build_parser().parse_args(["serve", "--run", "r", "--allowed-host", "a.example", "--allowed-host",
                                          "b.example", "c.example"])
    assert args.allowed_hosts == ["a.example", "b.example", "c.example"]


@pytest.mark.parametrize(("hosts", "headers", "host", "cors", "message"), [
    (["a.example:443"], [], "127.0.0.1", False, "--allowed-host 'a.example:443': give a host name"),
    (["https://a.example"], [], "127.0.0.1", False, "without scheme, port or path"),
    (["abc.de:443"], [], "127.0.0.1", False, "give a host name or address as clients send it in Host"),
    (["a.example"], [], "0.0.0.0", False, "on --host 0.0.0.0 every Host is answered: leave --allowed-host out"),
    ([], ["X Request"], "127.0.0.1", True, "--cors-header 'X Request': not an HTTP header name"),
    ([], ["X-Request-ID"], "127.0.0.1", False, "--cors-header needs --cors-origin"),
])
def test_allowed_hosts_and_cors_headers_are_checked(hosts, headers, host, cors, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        guard.check_names(hosts, headers, host=host, cors=cors)
    guard.check_names(["a.example", "::1", "[fe80::1]"], ["X-Request-ID", "traceparent"], host="::1", cors=True)


def test_a_refused_preflight_is_a_json_error_that_says_what_was_refused(service):
    """Starlette answers 'Disallowed CORS origin' or '... headers' in plain text; every other error is JSON."""
    app = create_app(service, Settings(cors_origins=["https://app.example"]))
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    status, headers, body, _ = asgi(app, "OPTIONS", "/predict", b"", {
        **preflight, "access-control-request-headers": "x-request-id"})
    assert status == 400 and headers["content-type"] == "application/json", body
    error = json.loads(body)["error"]
    assert error.startswith("CORS preflight refused: request headers 'x-request-id' are not allowed (allowed: ")
    assert "x-api-key" in error and "--cors-header NAME" in error
    status, headers, body, _ = asgi(app, "OPTIONS", "/predict", b"", {**preflight, "origin": "https://evil.example"})
    assert status == 400 and json.loads(body)["error"] == ("CORS preflight refused: origin 'https://evil.example' "
                                                           "is not one of --cors-origin")
    assert "access-control-allow-origin" not in headers
    status, headers, _, _ = asgi(app, "OPTIONS", "/predict", b"", preflight)
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    status, headers, _, _ = asgi(app, "GET", "/info", b"", {"origin": "https://app.example"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"


def test_a_cors_page_may_send_the_headers_of_cors_header(service):
    """X-Request-ID or traceparent failed the preflight: the allowed headers were fixed."""
    app = create_app(service, Settings(cors_origins=["https://app.example"], cors_headers=["X-Request-ID",
                                                                                           "traceparent"]))
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    status, headers, _, _ = asgi(app, "OPTIONS", "/predict", b"", {
        **preflight, "access-control-request-headers": "x-request-id, traceparent, content-type, x-api-key"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    assert "X-Request-ID" in headers["access-control-allow-headers"]
    status, _, body, _ = asgi(app, "OPTIONS", "/predict", b"", {
        **preflight, "access-control-request-headers": "x-request-id, x-custom"})
    assert status == 400 and "request headers 'x-custom' are not allowed" in json.loads(body)["error"]
    args = cli.build_parser().parse_args(["serve", "--run", "r", "--cors-origin", "https://app.example",
                                          "--cors-header", "X-Request-ID", "--cors-header", "traceparent"])
    assert args.cors_headers == ["X-Request-ID", "traceparent"] and args.cors_origins == ["https://app.example"]
