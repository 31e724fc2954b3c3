"""Every endpoint of a served run, over real HTTP: answers equal ``attnpool predict``'s, batched under concurrency."""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
from serve_helpers import metric

import attnpool


def rows_of(frame, ids=True):
    return [{"first": r.first, "second": r.second, **({"id": r.id} if ids else {})} for r in frame.itertuples()]


def test_health_and_info(server, recipe):
    assert server.request("GET", "/health")[:3:2] == (200, {"status": "ready"})
    status, _, info = server.request("GET", "/info")
    assert status == 200
    assert info["attnpool_version"] == attnpool.__version__ and info["task"] == "regression"
    assert info["folds"] == [0, 1] and info["max_length"] == 16 and info["fields"] == ["first", "second"]
    assert info["encoder"] == "encoder" and info["pooler"]["type"] == "attention"  # not the server's path, its name
    assert str(recipe["folder"].parent) not in json.dumps(info)
    assert info["token_weights"] and info["max_rows"] == 20 and info["max_batch"] == 8 and not info["api_key"]


def test_answers_equal_predict_for_the_same_rows(server, recipe):
    status, _, body = server.request("POST", "/predict", {"rows": rows_of(recipe["test"])})
    assert status == 200, body
    predicted = recipe["predicted"]
    assert [p["id"] for p in body["predictions"]] == list(predicted["id"])
    served = np.array([p["prediction"] for p in body["predictions"]])
    np.testing.assert_allclose(served, predicted["prediction"].to_numpy(), atol=1e-5, rtol=0)
    assert body["task"] == "regression" and body["folds"] == [0, 1] and "id2label" not in body


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server, recipe):
    rows, predicted = rows_of(recipe["test"]), recipe["predicted"]
    expected = dict(zip(predicted["id"], predicted["prediction"], strict=True))
    before = server.request("GET", "/metrics")[2]
    jobs = [rows[i % len(rows)] for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda row: server.request("POST", "/predict", {"rows": [row]}), jobs))
    assert all(status == 200 for status, _, _ in answers)
    for row, (_, _, body) in zip(jobs, answers, strict=True):  # none lost, duplicated or swapped
        (prediction,) = body["predictions"]
        assert prediction["id"] == row["id"] and abs(prediction["prediction"] - expected[row["id"]]) < 1e-5
    after = server.request("GET", "/metrics")[2]
    batches = metric(after, "attnpool_batch_rows_count") - metric(before, "attnpool_batch_rows_count")
    rows_run = metric(after, "attnpool_batch_rows_sum") - metric(before, "attnpool_batch_rows_sum")
    assert rows_run == 24 and batches < 24, "concurrent requests were not batched together"
    within = 'attnpool_batch_rows_bucket{le="8.0"}'  # no batch over --max-batch 8 rows
    assert metric(after, within) - metric(before, within) == batches


def test_word_weights_sum_to_one_and_follow_the_text(server):
    row = {"first": "the cat sat on the mat", "second": "a red dog"}
    status, _, body = server.request("POST", "/predict", {"rows": [row, {"first": "", "second": "tree"}],
                                                          "weights": True})
    assert status == 200, body
    words = body["predictions"][0]["words"]
    assert abs(sum(w["weight"] for w in words) - 1) < 1e-5
    assert all(len(w["weights"]) == 1 and w["weight"] >= 0 for w in words)
    assert [w["text"] for w in words if w["kind"] == "word" and w["segment"] == 0] == row["first"].split()
    assert [w["text"] for w in words if w["kind"] == "word" and w["segment"] == 1] == row["second"].split()
    assert {w["text"] for w in words if w["kind"] == "special"} == {"[CLS]", "[SEP]"}
    first = next(w for w in words if w["text"] == "cat")
    assert row["first"][first["start"] : first["end"]] == "cat"
    assert abs(sum(w["weight"] for w in body["predictions"][1]["words"]) - 1) < 1e-5
    plain = server.request("POST", "/predict", {"rows": [row]})[2]["predictions"][0]
    assert "words" not in plain and abs(plain["prediction"] - body["predictions"][0]["prediction"]) < 1e-5


def test_metrics_are_prometheus_text(server):
    server.request("GET", "/health")
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE attnpool_request_duration_seconds histogram" in text
    assert metric(text, 'attnpool_requests_total{path="/health",status="200"}') >= 1
    assert metric(text, "attnpool_queue_rows") == 0 and metric(text, "attnpool_queue_requests") == 0
    assert 'attnpool_request_duration_seconds_bucket{path="/health",le="+Inf"}' in text


def test_openapi_documents_every_field(server):
    status, _, schema = server.request("GET", "/openapi.json")
    assert status == 200 and schema["info"]["version"] == attnpool.__version__
    assert schema["info"]["description"].startswith("Predictions of 2 fold(s) of run (regression)")
    row = schema["components"]["schemas"]["Row"]
    assert set(row["properties"]) == {"first", "second", "id"} and set(row["required"]) == {"first", "second"}
    assert row["additionalProperties"] is False
    assert all(p.get("description") for p in row["properties"].values())
    body = schema["components"]["schemas"]["PredictRequest"]
    assert body["properties"]["rows"]["maxItems"] == 20 and "weights" in body["properties"]
    answer = schema["components"]["schemas"]["RowPrediction"]
    assert all(p.get("description") for p in answer["properties"].values())
    assert {"400", "413", "415", "422", "503"} <= set(schema["paths"]["/predict"]["post"]["responses"])
    assert server.request("GET", "/docs")[0] == 404  # it would load scripts from a CDN


def test_the_page_is_self_contained(server):
    status, headers, html = server.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert 'data-field="first"' in html and 'data-field="second"' in html
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "unsafe-inline" not in csp
    assert "http://" not in html and "https://" not in html  # no external asset
    assert headers["x-content-type-options"] == "nosniff"
