"""What goes wrong inside the server is answered, never a hang nor a crash of the answer: a blank second text with
word weights, scores that are not finite, a batcher that does not run, a body that is not UTF-8, a large answer."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
import torch
from serve_helpers import asgi, asgi_call, lifespan

from attnpool.serving import web
from attnpool.serving.app import ScoresNotFinite, Settings, check_finite, create_app
from attnpool.serving.service import Answer, Service


@pytest.fixture
def service(classifier, monkeypatch):
    """The saved two-class model folder (fields ``text`` and ``text_pair``), loaded in this process."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return Service.load(classifier, device="cpu", precision="fp32", max_length=16, threads=torch.get_num_threads())


def served(app, *calls):
    """Each ``(method, path, body)`` requested at once while the app's lifespan runs: ``(status, JSON)`` each."""
    async def main():
        async with lifespan(app):
            answers = await asyncio.gather(*(asgi_call(app, method, path, json.dumps(body).encode())
                                             for method, path, body in calls))
        return [(status, json.loads(body)) for status, _, body, _ in answers]
    return asyncio.run(main())


def test_a_blank_second_text_with_weights_is_answered_with_its_requests_batch(service):
    """The words were re-tokenised one row at a time, which drops an empty pair: a 500 for the whole batch."""
    app = create_app(service, Settings(max_wait_ms=200))  # the requests sent at once are one batch
    blank = {"rows": [{"text": "the cat", "text_pair": ""}, {"text": "a dog", "text_pair": "   "}], "weights": True}
    other = {"rows": [{"text": "red tree", "text_pair": "big house"}, {"text": "sat"}], "weights": True}
    (status, answer), (other_status, other_answer) = served(app, ("POST", "/predict", blank),
                                                            ("POST", "/predict", other))
    assert (status, other_status) == (200, 200), (answer, other_answer)
    for row in answer["predictions"]:
        assert [w["kind"] for w in row["words"]][-2:] == ["special", "special"]  # [SEP] [SEP]: the empty pair's
    assert [w["text"] for w in other_answer["predictions"][0]["words"]] == ["[CLS]", "red", "tree", "[SEP]", "big",
                                                                           "house", "[SEP]"]
    assert app.state.metrics.summary("x").batches == 1


def test_scores_that_are_not_finite_are_a_500_naming_the_rows(service, monkeypatch):
    """NaN scores (an fp16 overflow) crashed the JSON writer: 'Out of range float values are not JSON compliant'."""
    scores = service.ensemble.scores

    def some_nan(encodings, **options):
        out = scores(encodings, **options)
        out[1] = np.nan
        out[2, 0] = np.inf
        return out

    monkeypatch.setattr(service.ensemble, "scores", some_nan)
    app = create_app(service, Settings(max_wait_ms=0))
    [(status, answer)] = served(app, ("POST", "/predict", {"rows": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}))
    assert status == 500
    assert answer["error"].startswith("rows[1], rows[2]: the model's scores or word weights are not finite"), answer
    assert answer["error"].endswith("(precision fp32): check the model: its weights may hold NaN"), answer
    words = [[{"weights": [0.5, 0.5]}], [{"weights": [0.5, float("nan")]}]]
    with pytest.raises(ScoresNotFinite, match=r"^rows\[1\]: .*\(precision bf16\): serve with --precision fp32"):
        check_finite(Answer(np.array([[0.2, 0.8], [0.3, 0.7]]), words), "bf16")


def test_an_app_whose_lifespan_did_not_run_is_not_ready_and_says_why(service):
    """Mounted in another app, the lifespan does not run: /health said ready and every request waited forever."""
    app = create_app(service, Settings())
    status, _, body, _ = asgi(app, "GET", "/health")
    assert status == 503 and "the batcher is not running: the app's lifespan did not start it" in json.loads(body)[
        "status"]
    status, _, body, _ = asgi(app, "POST", "/predict", json.dumps({"rows": [{"text": "a"}]}).encode())
    assert status == 503 and json.loads(body)["error"].startswith("unavailable: the batcher is not running")
    assert served(app, ("GET", "/health", None))[0] == (200, {"status": "ready"})


def test_a_worker_that_died_makes_the_server_unhealthy(service):
    async def main():
        async with lifespan(app):
            app.state.batcher._worker.cancel()
            await asyncio.sleep(0.01)
            return await asgi_call(app, "GET", "/health")

    app = create_app(service, Settings())
    status, _, body, _ = asyncio.run(main())
    assert status == 503 and json.loads(body)["status"].startswith("the batcher is not running: its worker was")


def test_the_answer_is_written_off_the_event_loop_and_byte_for_byte_as_before(service, monkeypatch):
    """256 rows with their words took 0.6 s to write on the event loop, stalling /health and every request."""
    threads, respond = [], service.respond

    def recorded(*args):
        threads.append(threading.current_thread())
        return respond(*args)

    monkeypatch.setattr(service, "respond", recorded)
    app = create_app(service, Settings(max_wait_ms=0))
    body = {"rows": [{"text": "the cat", "text_pair": "sat"}, {"text": "dog", "id": 7}], "weights": True}

    async def main():
        async with lifespan(app):
            return await asgi_call(app, "POST", "/predict", json.dumps(body).encode())

    status, headers, raw, _ = asyncio.run(main())
    assert status == 200 and headers["content-type"] == "application/json"
    assert threads and threading.main_thread() not in threads
    assert raw == web.JSONResponse(json.loads(raw)).body  # the bytes Starlette's JSONResponse writes


def test_a_body_that_is_not_utf8_says_so(service):
    app = create_app(service, Settings())
    status, _, body, _ = asgi(app, "POST", "/predict", '{"rows": [{"text": "café"}]}'.encode("latin-1"))
    error = json.loads(body)["error"]
    assert status == 400, error
    assert error == "the body is not valid UTF-8 JSON (byte 0xe9 at position 23): send UTF-8"


def test_requests_whose_clients_left_are_withdrawn_and_counted_499(service):
    """Nothing cancelled a handler whose client left: its rows kept their place in the queue, used the model, and
    counted as 200; clients that time out and retry filled the queue with dead work."""
    app = create_app(service, Settings(max_batch=4, max_wait_ms=60_000))  # one row waits a minute for company
    one, four = ({"rows": [{"text": "the cat"}] * n} for n in (1, 4))  # four rows: a full batch, run at once
    batcher, leave, calls = app.state.batcher, asyncio.Event(), {"receive": 0, "watch cancelled": 0}

    def uvicorn_receive(body, left):
        """As uvicorn's: the body, then nothing until the client leaves (``left``) or the answer is complete."""
        messages = iter([{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}])

        async def receive():
            calls["receive"] += 1
            for message in messages:
                return message
            try:
                await (left.wait() if left else asyncio.Event().wait())
            except asyncio.CancelledError:
                calls["watch cancelled"] += 1
                raise
            return {"type": "http.disconnect"}
        return receive

    async def call(receive):
        sent = []
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}

        async def send(message):
            sent.append(message)
        await app(scope, receive, send)
        return next(m["status"] for m in sent if m["type"] == "http.response.start")

    async def main():
        async with lifespan(app):
            gone = [asyncio.ensure_future(call(uvicorn_receive(one, leave))) for _ in range(3)]
            while batcher.queued_requests < 3:
                await asyncio.sleep(0.01)
            leave.set()  # the three clients leave before their batch ran
            statuses = await asyncio.wait_for(asyncio.gather(*gone), 10)
            queued, rows_before = (batcher.queued_rows, batcher.queued_requests), app.state.metrics.summary("x").rows
            calls["receive"] = 0
            stayed = await call(uvicorn_receive(four, None))
            repeated = await asgi_call(app, "POST", "/predict", json.dumps(four).encode())  # repeats the request
            metrics = (await asgi_call(app, "GET", "/metrics"))[2].decode()
        return statuses, queued, rows_before, stayed, repeated[0], metrics

    statuses, queued, rows_before, stayed, repeated, metrics = asyncio.run(main())
    assert statuses == [499, 499, 499] and queued == (0, 0) and rows_before == 0
    assert (stayed, repeated) == (200, 200)
    assert calls == {"receive": 2, "watch cancelled": 1}  # the body, then one watch, which the answer ended
    assert 'attnpool_requests_total{path="/predict",status="499"} 3' in metrics
    assert 'attnpool_requests_total{path="/predict",status="200"} 2' in metrics
    assert "attnpool_rows_total 8" in metrics and "attnpool_queue_rows 0" in metrics
