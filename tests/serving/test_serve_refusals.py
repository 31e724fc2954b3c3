"""Refusals that say why and cost little: bodies FastAPI could not parse, validation errors capped, ``serve`` called
inside an event loop, and refused loads that leave the process's thread settings as they were."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
import torch
from serve_helpers import asgi, asgi_call, lifespan

import attnpool
from attnpool.runs.run import RunError
from attnpool.serving import schemas
from attnpool.serving import server as server_module
from attnpool.serving.app import Settings, create_app
from attnpool.serving.service import Service


@pytest.fixture
def service(classifier, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return Service.load(classifier, device="cpu", precision="fp32", max_length=16, threads=torch.get_num_threads())


async def post(app, messages):
    """POST /predict whose body arrives as ``messages`` (ASGI receive events): ``(status, JSON answer)``."""
    sent: list[dict] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
    pending = iter(messages)

    async def receive():
        return next(pending)

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def test_bodies_that_cannot_be_parsed_say_why(service):
    """FastAPI answers each with 'There was an error parsing the body'; a client that left counted as a 400."""
    app = create_app(service, Settings(max_wait_ms=0))
    deep = b'{"rows": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    digits = b'{"rows": [{"text": "the cat", "id": ' + b"7" * 5000 + b"}]}"

    async def main():
        async with lifespan(app):
            left = await post(app, [{"type": "http.request", "body": b'{"rows": [{"te', "more_body": True},
                                    {"type": "http.disconnect"}])
            nested = await post(app, [{"type": "http.request", "body": deep, "more_body": False}])
            long_id = await post(app, [{"type": "http.request", "body": digits, "more_body": False}])
            metrics = (await asgi_call(app, "GET", "/metrics"))[2].decode()
        return left, nested, long_id, metrics

    left, nested, long_id, metrics = asyncio.run(main())
    assert left == (499, {"error": "the client closed the connection while sending its body"})
    assert nested[0] == 400 and nested[1]["error"].startswith("body: JSON nested too deeply to parse")
    assert long_id[0] == 400 and long_id[1]["error"] == ("body: a number of over 4300 digits, too long to read; "
                                                         "send such a number (an id) as a string")
    assert 'attnpool_requests_total{path="/predict",status="499"} 1' in metrics
    assert 'attnpool_requests_total{path="/predict",status="400"} 2' in metrics


def test_many_unknown_fields_are_one_problem(service):
    """A 977 KB body of 76,000 unknown keys was answered with 7.1 MB of details, the event loop blocked 1.8 s."""
    app = create_app(service, Settings())
    row = {"text": "a", **{f"k{i}": 0 for i in range(76_000)}}
    status, _, body, _ = asgi(app, "POST", "/predict", json.dumps({"rows": [row]}).encode())
    assert status == 422 and len(body) < 1000
    assert json.loads(body)["details"] == [{"where": "rows[0]", "what": "76000 unknown fields (k0, k1, k2...); a "
                                            "row takes text (optional: text_pair, id)"}]
    status, _, body, _ = asgi(app, "POST", "/predict", json.dumps({"rows": [{"text": "a"}],
                                                                   **{f"x{i}": 1 for i in range(30)}}).encode())
    assert status == 422 and json.loads(body)["error"] == ("body: 30 unknown fields (x0, x1, x2...); a body takes "
                                                           "rows and weights")
    few = {"rows": [{"text": "a", "b": 1, "c": 2}]}  # up to MAX_DETAILS unknown fields: one problem each
    assert len(json.loads(asgi(app, "POST", "/predict", json.dumps(few).encode())[2])["details"]) == 2


@pytest.mark.parametrize("where", ["body", "row"])
def test_many_unknown_fields_with_a_lone_surrogate_are_a_422(service, where):
    """Over 20 unknown keys, one of the first three a lone surrogate (valid JSON), were a 500: the key was copied
    raw into the error, which FastAPI could not encode; a very long key is cut."""
    app = create_app(service, Settings())
    keys = '"\\ud800":0,"' + "y" * 5000 + '":0,' + ",".join(f'"k{i}":0' for i in range(20))
    body = ('{"rows":[{"text":"a"}],' + keys + "}" if where == "body" else '{"rows":[{"text":"a",' + keys + "}]}")
    status, _, answer, _ = asgi(app, "POST", "/predict", body.encode())
    assert status == 422, answer
    (detail,) = json.loads(answer)["details"]
    assert detail["where"] == ("body" if where == "body" else "rows[0]") and len(answer) < 1000
    assert detail["what"].startswith(f"22 unknown fields (\\ud800, {'y' * 40}..., k0...); a ")


def test_the_details_of_an_invalid_request_are_capped(service):
    app = create_app(service, Settings())
    status, _, body, _ = asgi(app, "POST", "/predict", json.dumps({"rows": [{"text": 1}] * 250}).encode())
    answer = json.loads(body)
    assert status == 422 and len(answer["details"]) == 20, len(answer["details"])
    assert schemas.MAX_DETAILS == 20
    assert answer["details"][-1] == {"where": "rows[19].text", "what": "must be a string, got a number"}
    assert answer["error"].endswith("rows[4].text: must be a string, got a number; and 245 more (details lists "
                                    "the first 20)")
    status, _, body, _ = asgi(app, "POST", "/predict", json.dumps({"rows": [{"text": 1}] * 7}).encode())
    assert json.loads(body)["error"].endswith("; and 2 more") and len(json.loads(body)["details"]) == 7


def test_serve_inside_an_event_loop_is_refused_before_loading(classifier, monkeypatch):
    """In a notebook's cell the models were loaded and warmed up, then uvicorn failed with its own RuntimeError."""
    def load(*args, **kwargs):
        raise AssertionError("the models were loaded")

    monkeypatch.setattr(server_module, "load_service", load)

    async def cell():
        return attnpool.serve(classifier, port=0, device="cpu")

    with pytest.raises(RuntimeError, match=r"runs its own event loop, but this thread already runs one .*run "
                                           r"`attnpool serve` in a terminal, or call attnpool.serve from a thread"):
        asyncio.run(cell())


@pytest.fixture
def one_thread(monkeypatch):
    """The process at one thread and without TOKENIZERS_PARALLELISM, as a notebook may be; restored afterwards."""
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("call", [
    lambda folder: Service.load(folder, backend="bogus", threads=2),  # refused before set_threads
    lambda folder: Service.load(folder / "nothing", threads=2),  # refused after it
    lambda folder: attnpool.serve(folder / "nothing", port=0, threads=2),
    lambda folder: attnpool.serve(folder, port=0, device="cpu", max_length=10_000, threads=2),
])
def test_a_refused_load_leaves_the_thread_settings_as_they_were(classifier, one_thread, call):
    """set_threads ran before any option was checked, and nothing gave its settings back."""
    with pytest.raises((ValueError, RunError)):
        call(classifier)
    assert torch.get_num_threads() == 1 and "TOKENIZERS_PARALLELISM" not in os.environ


@pytest.mark.parametrize("max_length", [2, 3])
def test_a_max_length_with_no_room_for_text_is_refused_at_start_up(classifier, max_length):
    """--max-length 2 on a model folder started, then every request failed with the same error; --max-length 3 left
    room for a text but not a pair, and every text pair was a bare 500 (a model folder takes text_pair)."""
    with pytest.raises(ValueError, match=rf"^max_length {max_length} \(--max-length\) leaves no room for text: the "
                                         r"tokenizer \w+ adds 3 special tokens to each text pair; give --max-length 4 "
                                         "or more"):
        Service.load(classifier, device="cpu", precision="fp32", max_length=max_length,
                     threads=torch.get_num_threads())
