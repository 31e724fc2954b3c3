"""Bad requests get a 4xx JSON error saying what and where; none is a 500, and the server keeps serving."""

from __future__ import annotations

import http.client
import json

import pytest
from serve_helpers import MAX_BODY, MAX_ROWS

GOOD = {"first": "the cat", "second": "a dog"}


@pytest.mark.parametrize(("body", "status", "where", "what"), [
    ({"rows": [GOOD, {"first": "a"}]}, 422, "rows[1].second", "missing"),
    ({"rows": [GOOD, GOOD, GOOD, {**GOOD, "label": 1.0}]}, 422, "rows[3].label", "unknown field; a row takes"),
    ({"rows": [GOOD], "model": "/etc/passwd"}, 422, "model", "unknown field"),
    ({"rows": [{"first": 3, "second": "a"}]}, 422, "rows[0].first", "must be a string, got a number"),
    ({"rows": [{**GOOD, "id": [1]}]}, 422, "rows[0].id", "must be a string or an integer, got an array"),
    ({"rows": [{**GOOD, "id": 3.0}]}, 422, "rows[0].id", "must be a string or an integer, got a decimal number"),
    ({"rows": [{**GOOD, "id": "\ud83d"}]}, 422, "rows[0].id", "must be valid Unicode text: it holds a lone surrogate"),
    ({"rows": [{**GOOD, "first": "a\udc00"}]}, 422, "rows[0].first", "must be valid Unicode text"),
    ({"rows": []}, 422, "rows", "empty"),
    ({"rows": [GOOD] * (MAX_ROWS + 1)}, 422, "rows", f"{MAX_ROWS + 1} rows, at most {MAX_ROWS} per request"),
    ({"rows": [{"first": "cat " * 150, "second": "a"}]}, 422, "rows[0].first", "600 characters, at most 512"),
    ({"rows": [GOOD], "weights": "yes"}, 422, "weights", "must be true or false"),
    ({"rows": {"first": "a"}}, 422, "rows", "must be an array of rows"),
    ({"rows": [[1, 2]]}, 422, "rows[0]", "must be an object, got an array"),
    ([GOOD], 422, "body", "must be an object"),
    ({}, 422, "rows", "missing"),
])
def test_invalid_requests_say_what_and_where(server, body, status, where, what):
    got, _, answer = server.request("POST", "/predict", body)
    assert got == status, answer
    assert any(d["where"] == where and d["what"].startswith(what) for d in answer["details"]), answer
    assert f"{where}: {what}" in answer["error"]


def test_malformed_json_and_bodies_that_are_not_json(server):
    status, _, answer = server.request("POST", "/predict", raw=b'{"rows": [', headers={"Content-Type":
                                                                                     "application/json"})
    assert status == 400 and answer["error"].startswith("body: malformed JSON"), answer
    status, _, answer = server.request("POST", "/predict", raw=b"rows=1",
                                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415 and "application/json" in answer["error"]
    status, _, answer = server.request("POST", "/predict", raw=b"", headers={"Content-Type": "application/json"})
    assert status == 422 and "missing" in answer["error"]


def test_bodies_over_the_limit_are_refused(server):
    big = json.dumps({"rows": [{"first": "x" * (MAX_BODY), "second": "a"}]}).encode()
    status, _, answer = server.request("POST", "/predict", raw=big, headers={"Content-Type": "application/json"})
    assert status == 413 and str(MAX_BODY) in answer["error"]
    # without a Content-Length (chunked): refused while it arrives
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("POST", "/predict", body=iter([big[:1000], big[1000:]]),
                       headers={"Content-Type": "application/json"}, encode_chunked=True)
    response = connection.getresponse()
    assert response.status == 413 and str(MAX_BODY) in json.loads(response.read())["error"]
    connection.close()


def test_unknown_endpoints_methods_and_hosts(server):
    status, _, answer = server.request("GET", "/predictions")
    assert status == 404 and "POST /predict" in answer["error"]
    status, _, answer = server.request("GET", "/predict")
    assert status == 405 and "not allowed" in answer["error"]
    status, _, answer = server.request("GET", "/info", headers={"Host": "attacker.example:80"})
    assert status == 400 and "loopback" in answer["error"]
    assert server.request("GET", "/info", headers={"Host": "localhost:1234"})[0] == 200


def test_no_cors_unless_asked(server):
    status, headers, _ = server.request("GET", "/info", headers={"Origin": "http://evil.example"})
    assert status == 200 and "access-control-allow-origin" not in headers
    status, headers, _ = server.request("OPTIONS", "/predict", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in headers


def test_a_text_path_is_only_a_text_and_the_server_still_serves(server):
    status, _, answer = server.request("POST", "/predict", {"rows": [{"first": "/etc/passwd", "second": "file:///"}]})
    assert status == 200 and isinstance(answer["predictions"][0]["prediction"], float)
    long_text = {"first": "cat " * 100, "second": "dog"}  # over max_length tokens, under the character limit
    assert server.request("POST", "/predict", {"rows": [long_text]})[0] == 200
    assert server.request("GET", "/health")[0] == 200
    metrics = server.request("GET", "/metrics")[2]
    assert 'status="500"' not in metrics
