"""Edges of the HTTP layer: a CORS preflight to a server without CORS, a path with a trailing slash, and a row of
no tokens at all (an empty text, with a tokenizer that adds no special tokens)."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from serve_helpers import API_KEY, asgi, asgi_call, lifespan

import attnpool
from attnpool.serving.app import ENDPOINTS, Settings, create_app
from attnpool.serving.service import Service
from model_helpers import save_tiny_encoder

PREFLIGHT = {"origin": "https://app.example", "access-control-request-method": "POST"}


@pytest.fixture
def service(classifier, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return Service.load(classifier, device="cpu", precision="fp32", max_length=16, threads=torch.get_num_threads())


@pytest.mark.parametrize("api_key", [None, API_KEY])
def test_a_preflight_without_cors_says_cors_is_off_and_how_to_allow_the_origin(service, api_key):
    """It was a 405 'OPTIONS is not allowed on /predict' (or a 401 with a key), which read as a routing mistake."""
    app = create_app(service, Settings(api_key=api_key))
    status, headers, body, _ = asgi(app, "OPTIONS", "/predict", b"", PREFLIGHT)
    assert status == 400 and headers["content-type"] == "application/json", body
    assert json.loads(body)["error"] == (
        "CORS preflight refused: CORS is off on this server, so no web page of another origin ('https://app.example' "
        "here) may call it; to allow that origin, start the server with --cors-origin https://app.example")
    assert "access-control-allow-origin" not in headers
    status, _, body, _ = asgi(app, "OPTIONS", "/predict", b"", {"origin": "https://app.example"})  # no preflight
    expected = 401 if api_key else 405
    assert status == expected, body


@pytest.mark.parametrize(("method", "path"), [("POST", "/predict/"), ("GET", "/info/"), ("GET", "/metrics/")])
def test_a_trailing_slash_is_a_json_404_that_names_the_endpoint(service, method, path):
    """It was a bare 307 with an empty body, to an http:// Location (wrong behind a TLS proxy)."""
    app = create_app(service, Settings())
    status, headers, body, _ = asgi(app, method, path, b'{"rows": [{"text": "cat"}]}')
    assert status == 404 and "location" not in headers, (status, headers)
    assert json.loads(body)["error"] == (f"no such endpoint: {path} (without the trailing slash: {path[:-1]}); "
                                         f"the endpoints are {', '.join(ENDPOINTS)}")


@pytest.fixture
def no_special_tokens(tmp_path):
    """A saved model folder on a tiny GPT-2 whose word-level tokenizer adds no special tokens (as a decoder's)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    encoder = save_tiny_encoder(tmp_path / "encoder", family="gpt2")
    words = "the a cat dog sat ran on mat".split()
    backend = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}},
                                         unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")
    assert tokenizer("")["input_ids"] == []
    torch.manual_seed(0)
    model = attnpool.AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention", num_labels=1)
    model.save_pretrained(tmp_path / "model", tokenizer=tokenizer)
    return Service.load(tmp_path / "model", device="cpu", precision="fp32", max_length=16, threads=1)


def test_a_row_of_no_tokens_is_refused_with_its_row_and_field(no_special_tokens):
    """An empty text tokenised to no tokens and was answered 0.0 with no words, as if the model had read it."""
    app = create_app(no_special_tokens, Settings(max_wait_ms=0))

    async def main():
        async with lifespan(app):
            rows = [{"text": "the cat"}, {"text": ""}, {"text": "   "}]
            refused = await asgi_call(app, "POST", "/predict", json.dumps({"rows": rows, "weights": True}).encode())
            pair = await asgi_call(app, "POST", "/predict", json.dumps({"rows": [{"text": "", "text_pair": ""}]})
                                   .encode())
            served = await asgi_call(app, "POST", "/predict", json.dumps({"rows": [{"text": "the cat"}]}).encode())
        return refused, pair, served

    refused, pair, served = asyncio.run(main())
    assert refused[0] == 422, refused
    assert json.loads(refused[2])["error"] == (
        "rows[1].text: no tokens after tokenisation: the text is empty (or holds only what the tokenizer drops) and "
        "the model's tokenizer adds no special tokens, so the model has nothing to read; send some text; and 1 more "
        "row(s) like it")
    assert pair[0] == 422, pair
    assert json.loads(pair[2])["error"].startswith("rows[0] (text, text_pair): no tokens after tokenisation: ")
    assert served[0] == 200 and isinstance(json.loads(served[2])["predictions"][0]["prediction"], float), served


def test_a_row_without_tokens_only_once_its_context_is_left_out_is_refused_too():
    """context view both averages in the rows without their group context: an empty one of those was scored 0."""
    from attnpool.serving.schemas import no_tokens
    from attnpool.serving.service import Job

    service = type("S", (), {"fields": ("anchor",), "optional_fields": ()})()
    with_context = {"input_ids": [[5, 6], [7, 8, 9]]}
    job = Job(with_context, bare={"input_ids": [[5], []]})
    assert no_tokens(job, [{"anchor": "a"}, {"anchor": ""}], service).startswith("rows[1].anchor: no tokens")
    assert no_tokens(Job(with_context, bare={"input_ids": [[5], [7]]}), [{}, {}], service) is None
    blend = Job(with_context, parts=[Job(with_context), Job(with_context, bare={"input_ids": [[], [7]]})])
    assert no_tokens(blend, [{"anchor": ""}, {"anchor": "b"}], service).startswith("rows[0].anchor: no tokens")
