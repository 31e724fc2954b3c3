"""A saved model folder served with an API key: classification answers, text pairs, multi-head word weights."""

from __future__ import annotations

import base64

import pytest
from serve_helpers import API_KEY

BEARER = {"Authorization": f"Bearer {API_KEY}"}


@pytest.mark.parametrize("path", ["/predict", "/info", "/metrics", "/", "/openapi.json"])
def test_every_endpoint_but_health_needs_the_key(keyed_server, path):
    method = "POST" if path == "/predict" else "GET"
    body = {"rows": [{"text": "the cat"}]} if method == "POST" else None
    status, headers, answer = keyed_server.request(method, path, body)
    assert status == 401 and "API key" in answer["error"] and "www-authenticate" in headers
    assert keyed_server.request(method, path, body, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert keyed_server.request(method, path, body, headers=BEARER)[0] == 200


def test_health_needs_no_key_and_the_key_has_three_spellings(keyed_server):
    assert keyed_server.request("GET", "/health")[0] == 200
    assert keyed_server.request("GET", "/info", headers={"X-API-Key": API_KEY})[0] == 200
    basic = base64.b64encode(f"me:{API_KEY}".encode()).decode()
    assert keyed_server.request("GET", "/", headers={"Authorization": f"Basic {basic}"})[0] == 200
    status, headers, _ = keyed_server.request("GET", "/")
    assert status == 401 and headers["www-authenticate"].startswith("Basic")  # a browser asks for the key


def test_classification_answers_with_labels_and_probabilities(keyed_server):
    status, _, info = keyed_server.request("GET", "/info", headers=BEARER)
    assert info["source"] == "model" and info["task"] == "binary" and info["labels"] == ["neg", "pos"]
    assert info["fields"] == ["text"] and info["optional_fields"] == ["text_pair"] and info["folds"] == []
    status, _, body = keyed_server.request("POST", "/predict", {"rows": [{"text": "the cat sat", "id": 7}]},
                                           headers=BEARER)
    assert status == 200, body
    (row,) = body["predictions"]
    assert body["id2label"] == {"0": "neg", "1": "pos"} and row["id"] == 7
    assert set(row["probabilities"]) == {"neg", "pos"} and abs(sum(row["probabilities"].values()) - 1) < 1e-6
    assert row["prediction"] == max(row["probabilities"], key=row["probabilities"].get)


def test_texts_and_pairs_mixed_in_one_request_keep_their_order(keyed_server):
    rows = [{"text": "the cat"}, {"text": "the cat", "text_pair": "a red dog"}, {"text": "big tree"},
            {"text": "big tree", "text_pair": "small house"}]
    status, _, together = keyed_server.request("POST", "/predict", {"rows": rows}, headers=BEARER)
    assert status == 200, together
    for row, answer in zip(rows, together["predictions"], strict=True):
        alone = keyed_server.request("POST", "/predict", {"rows": [row]}, headers=BEARER)[2]["predictions"][0]
        assert alone["probabilities"]["pos"] == pytest.approx(answer["probabilities"]["pos"], abs=1e-6)
    assert together["predictions"][0]["probabilities"] != together["predictions"][1]["probabilities"]


def test_multi_head_weights_sum_to_one_per_head(keyed_server):
    status, _, body = keyed_server.request("POST", "/predict", {"rows": [
        {"text": "the cat sat", "text_pair": "on the mat"}], "weights": True}, headers=BEARER)
    assert status == 200, body
    words = body["predictions"][0]["words"]
    assert all(len(w["weights"]) == 2 for w in words)
    for head in range(2):
        assert abs(sum(w["weights"][head] for w in words) - 1) < 1e-5
    assert [w["text"] for w in words if w["segment"] == 1 and w["kind"] == "word"] == ["on", "the", "mat"]
