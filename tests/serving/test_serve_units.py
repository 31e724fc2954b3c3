"""The small parts, without a server: Prometheus text, error locations, loopback names, the page's escaping."""

from __future__ import annotations

import pytest
import torch
import yaml
from serve_helpers import asgi, asgi_call

from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.encoders import position_limit
from attnpool.runs.run import RunError
from attnpool.serving.guard import _hostname, is_loopback
from attnpool.serving.metrics import Metrics
from attnpool.serving.page import render_page
from attnpool.serving.schemas import where
from attnpool.serving.service import Service
from model_helpers import make_run, tiny_config


def test_histograms_are_cumulative_and_paths_are_a_closed_set():
    metrics = Metrics(max_batch=8, queue=lambda: (3, 1))
    for seconds in (0.002, 0.02, 3.0):
        metrics.observe_request("/predict", 200, seconds)
    metrics.observe_request("/../../etc/passwd", 404, 0.001)
    metrics.observe_batch(5, 2)
    metrics.observe_batch(8, 8)
    text = metrics.render()
    assert 'attnpool_request_duration_seconds_bucket{path="/predict",le="0.0025"} 1' in text
    assert 'attnpool_request_duration_seconds_bucket{path="/predict",le="0.025"} 2' in text
    assert 'attnpool_request_duration_seconds_bucket{path="/predict",le="+Inf"} 3' in text
    assert 'attnpool_requests_total{path="other",status="404"} 1' in text and "passwd" not in text
    assert 'attnpool_request_errors_total{status="404"} 1' in text
    assert 'attnpool_batch_rows_bucket{le="4.0"} 0' in text and 'attnpool_batch_rows_bucket{le="8.0"} 2' in text
    assert "attnpool_batch_rows_sum 13.0" in text and "attnpool_batch_rows_count 2" in text
    assert "attnpool_queue_rows 3" in text and "attnpool_queue_requests 1" in text
    summary = metrics.summary("http://x")
    assert (summary.requests, summary.rows, summary.batches) == (4, 13, 2)


def test_error_locations_read_like_the_request():
    assert where(("body", "rows", 3, "target")) == "rows[3].target"
    assert where(("body", "weights")) == "weights"
    assert where(("body",)) == "body"


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.8.0.2", True), ("localhost", True),
                                               ("::1", True), ("[::1]", True), ("0.0.0.0", False),
                                               ("10.0.0.1", False), ("attacker.example", False), ("", False)])
def test_loopback_names(host, loopback):
    assert is_loopback(host) is loopback


def test_host_headers_lose_their_port():
    assert _hostname("localhost:8000") == "localhost" and _hostname("[::1]:80") == "::1"
    assert _hostname("127.0.0.1") == "127.0.0.1" and _hostname("evil.example:80") == "evil.example"


def test_the_page_escapes_what_it_shows():
    info = {"fields": ['a"><script>x</script>'], "optional_fields": [], "token_weights": True, "task": "binary",
            "folds": [0], "encoder": "<b>enc</b>", "pooler": {"type": "attention"}, "ensemble": "mean",
            "max_length": 8, "attnpool_version": "0"}
    html, csp = render_page(info)
    assert "<script>x</script>" not in html and "<b>enc</b>" not in html
    assert html.count("<script") == 2 and "\\u003cscript\\u003e" in html  # the config block cannot close early
    assert "script-src 'sha256-" in csp


@pytest.mark.parametrize(("host", "url"), [("127.0.0.1", "http://127.0.0.1:8000"), ("::1", "http://[::1]:8000"),
                                           ("[::1]", "http://[::1]:8000")])
def test_the_url_brackets_an_ipv6_host_once(host, url):
    from attnpool.serving.app import Settings

    assert Settings(host=host, port=8000).url == url


@pytest.mark.parametrize("key", ["", "   ", "clé"])
def test_an_api_key_must_be_set_and_ascii(monkeypatch, key):
    """HTTP headers are read as latin-1: a UTF-8 key beyond ASCII could never match X-API-Key or Bearer."""
    from attnpool.serving.server import read_api_key

    monkeypatch.setenv("ATTNPOOL_TEST_KEY", key)
    with pytest.raises(ValueError, match="ATTNPOOL_TEST_KEY is not set, empty or not ASCII; set it to the key"):
        read_api_key("ATTNPOOL_TEST_KEY")
    monkeypatch.setenv("ATTNPOOL_TEST_KEY", " k3y ")
    assert read_api_key("ATTNPOOL_TEST_KEY") == "k3y"


def test_an_error_inside_the_model_is_a_500_with_the_security_and_cors_headers(classifier, monkeypatch, caplog):
    """Starlette answers unhandled errors outside the middleware: a CORS page could not read them, no nosniff.

    The answer names the error's type only: its text may quote other requests' rows or the server's paths; the
    server's log has it, with the traceback.
    """
    import json

    import torch

    from attnpool.serving.app import Settings, create_app
    from attnpool.serving.service import Service

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    service = Service.load(classifier, device="cpu", precision="fp32", threads=torch.get_num_threads())

    def broken(*args, **kwargs):
        raise RuntimeError("the model fell over")

    monkeypatch.setattr(service, "encode", broken)
    app = create_app(service, Settings(cors_origins=["http://app.example"]))
    status, headers, body, raised = asgi(app, "POST", "/predict", json.dumps({"rows": [{"text": "a"}]}).encode(),
                                          {"origin": "http://app.example"})
    assert raised is None
    assert status == 500 and json.loads(body)["error"] == ("internal error: RuntimeError in POST /predict; the "
                                                           "server's log has the details")
    assert "fell over" not in body.decode() and "the model fell over" in caplog.text and "Traceback" in caplog.text
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert headers["access-control-allow-origin"] == "http://app.example"
    metrics = asgi(app, "GET", "/metrics")[2].decode()
    assert 'attnpool_requests_total{path="/predict",status="500"} 1' in metrics
    # a POST to another path is routed (404, 405), not refused for its body type (415)
    status, _, body, _ = asgi(app, "POST", "/predictions", b"rows=1", {"content-type": "text/plain"})
    assert status == 404 and "no such endpoint: /predictions" in json.loads(body)["error"]
    status, _, body, _ = asgi(app, "POST", "/health", b"", {"content-type": "text/plain"})
    assert status == 405 and "POST is not allowed on /health" in json.loads(body)["error"]
    status, _, body, _ = asgi(app, "POST", "/predict", b"rows=1", {"content-type": "text/plain"})
    assert status == 415 and "application/json" in json.loads(body)["error"]


def test_a_second_lifespan_of_the_same_app_serves_again(classifier, monkeypatch):
    """Tests and apps that mount this one run its lifespan more than once: the second must not answer as draining."""
    import asyncio
    import json

    import torch

    from attnpool.serving.app import Settings, begin_drain, create_app
    from attnpool.serving.service import Service

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    service = Service.load(classifier, device="cpu", precision="fp32", threads=torch.get_num_threads())
    app = create_app(service, Settings(max_wait_ms=0))
    body = json.dumps({"rows": [{"text": "a cat"}]}).encode()

    async def lifespan_once(drain: bool):
        events: asyncio.Queue = asyncio.Queue()
        await events.put({"type": "lifespan.startup"})
        sent: list[str] = []

        async def send(message):
            sent.append(message["type"])

        task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                         events.get, send))
        while "lifespan.startup.complete" not in sent:
            assert not task.done(), sent
            await asyncio.sleep(0.01)
        health = (await asgi_call(app, "GET", "/health"))[0]
        predicted = await asgi_call(app, "POST", "/predict", body)
        if drain:
            begin_drain(app)  # what a SIGTERM does
            assert (await asgi_call(app, "GET", "/health"))[0] == 503
        await events.put({"type": "lifespan.shutdown"})
        await task
        return health, predicted[0], json.loads(predicted[2])

    first = asyncio.run(lifespan_once(drain=True))
    second = asyncio.run(lifespan_once(drain=False))
    assert first[:2] == (200, 200) and second[:2] == (200, 200), (first, second)
    assert second[2] == first[2]


@pytest.mark.parametrize(("family", "limit"), [("bert", 64), ("roberta", 68), ("gpt2", 64), ("deberta-v3", None),
                                               ("modernbert", None)])
def test_the_position_limit_is_the_longest_row_the_encoder_reads(family, limit):
    """RoBERTa counts positions from pad_token_id + 1 (70 - 2); relative and rotary positions set no limit."""
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config(family), num_labels=1).eval()
    assert position_limit(model) == limit
    for length, reads in ((limit, True), (limit + 1, False)) if limit else ((200, True),):
        ids = torch.full((1, length), 5)
        try:
            with torch.no_grad():
                model(input_ids=ids, attention_mask=torch.ones_like(ids))
        except (IndexError, RuntimeError):
            assert not reads, length
        else:
            assert reads, length


def test_a_model_folder_max_length_is_checked_against_the_encoder(classifier, monkeypatch):
    """--max-length 100 on a 64-position encoder made every long request a 500; 0 became 128; -3 a traceback."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    with pytest.raises(RunError, match=r"--max-length 100 is over .* 64 tokens .*; give --max-length 64 or less"):
        Service.load(classifier, device="cpu", precision="fp32", max_length=100)
    for bad in (0, -3, True, 2.5, "16"):
        with pytest.raises(ValueError, match=r"--max-length must be an integer >= 1"):
            Service.load(classifier, device="cpu", precision="fp32", max_length=bad)
    assert Service.load(classifier, device="cpu", precision="fp32").max_length == 64  # 128 unless it reads less
    service = Service.load(classifier, device="cpu", precision="fp32", max_length=64)
    (answer,) = service.run([service.encode([{"text": "the cat " * 60}])], batch_size=4)  # 121 tokens: truncated
    assert answer.scores.shape == (1, 2)


def test_a_run_whose_max_length_its_encoder_cannot_read_is_capped_with_a_warning(encoder, tmp_path, caplog):
    """Trained on short rows only, such a run's long requests were a 500; it reads their first 64 tokens now."""
    make_run(tmp_path / "run", encoder, folds=1)
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({**config, "max_length": 100}, sort_keys=False))
    service = Service.load(tmp_path / "run", device="cpu", precision="fp32")
    assert service.max_length == 64 and "max_length 100 (its config.yaml), over the 64 tokens" in caplog.text
    (answer,) = service.run([service.encode([{"first": "the cat " * 60, "second": "dog"}])], batch_size=4)
    assert answer.scores.shape == (1,)
