"""Where an encoder comes from: a missing folder, an invalid name, a hub name the Hub cannot give, a cached one."""

from __future__ import annotations

import json
import os
import sys

import pytest
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.utils import _http as hub_http
from transformers import AutoModel, BertConfig, BertModel

from attnpool import AttnPoolForSequenceClassification
from attnpool.cli import main
from attnpool.model import sources
from model_helpers import write_toy_csv

NAME = "attnpool-tests/no-such-encoder"


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No route to the Hub, as on a machine without internet: every request fails at once (no retries, no DNS).

    Counts the file requests tried. The hub cache is an empty folder, so that nothing real is found in it.
    """
    calls = []

    def refuse(*args, **kwargs):
        if sys._getframe(1).f_code.co_name == "_http_backoff_base":  # a file request (not the agent registry's)
            calls.append(args)
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(hub_http, "get_session", refuse)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "RETRY_DELAY_S", 0.0)
    return calls


def _no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("AutoModel.from_pretrained was reached: the hub name should have failed before it")

    monkeypatch.setattr(AutoModel, "from_pretrained", refuse)


def test_unreachable_hub_name_fails_once_with_a_clear_error(no_network, monkeypatch):
    _no_model_load(monkeypatch)
    with pytest.raises(OSError) as caught:
        AttnPoolForSequenceClassification.from_encoder(NAME)
    message = str(caught.value)
    assert f"{NAME!r} is not a local folder" in message
    assert "Hugging Face Hub cannot be reached" in message
    assert f"hf download {NAME}" in message
    assert "--model" in message and "all-MiniLM-L6-v2" in message  # leaving it out gives the default
    assert len(no_network) == 2  # one lookup asked again: not the safetensors check's and from_pretrained's retries


def test_offline_hub_name_says_offline_not_couldnt_connect(no_network, monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError) as caught:
        AttnPoolForSequenceClassification.from_encoder(NAME)
    message = str(caught.value)
    assert "HF_HUB_OFFLINE=1" in message and "is not a local folder" in message
    assert "couldn't connect" not in message
    assert not no_network


def test_from_pretrained_unreachable_hub_name(no_network):
    with pytest.raises(OSError) as caught:
        AttnPoolForSequenceClassification.from_pretrained(NAME)
    message = str(caught.value)
    assert f"the model {NAME!r} is not a local folder" in message and "hf download" in message
    assert "all-MiniLM" not in message  # a saved model has no default to fall back on
    assert len(no_network) == 2


def test_a_network_blip_is_asked_again_and_a_hub_answer_is_not(monkeypatch):
    """The lookup had no retries at all: one dropped connection failed the load as "cannot be reached"."""
    answers = [ConnectionError("[Errno 104] Connection reset by peer"), None]
    seen = []

    def lookup(url, token=None):
        seen.append(url)
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    monkeypatch.setattr(sources.huggingface_hub, "get_hf_file_metadata", lookup)
    monkeypatch.setattr(sources, "RETRY_DELAY_S", 0.0)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    sources.check_hub_source(NAME, {"cache_dir": "/nonexistent-cache"})  # the second answer: found
    assert len(seen) == 2
    missing = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # the Hub's 404, whatever its HTTP client
    Exception.__init__(missing, "404 Client Error")
    missing.__context__ = ConnectionError("an earlier connection error, handled")
    answers[:] = [missing, None]
    seen.clear()
    with pytest.raises(OSError, match="has no repository of that name"):
        sources.check_hub_source(NAME, {"cache_dir": "/nonexistent-cache"})
    assert len(seen) == 1  # the Hub answered: not asked again


def _cache_encoder(cache: os.PathLike, name: str) -> None:
    """A tiny encoder in the hub cache's layout, as ``hf download`` leaves it."""
    repo = os.path.join(cache, "models--" + name.replace("/", "--"))
    commit = "0" * 40
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w", encoding="utf-8") as file:
        file.write(commit)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    BertModel(config).save_pretrained(os.path.join(repo, "snapshots", commit))


def test_cached_hub_name_still_loads_offline(no_network, monkeypatch):
    _cache_encoder(hub_constants.HF_HUB_CACHE, NAME)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    model = AttnPoolForSequenceClassification.from_encoder(NAME)
    assert model.config.encoder.hidden_size == 16
    assert not no_network


def test_cached_hub_name_loads_with_cache_dir_option(no_network, tmp_path, monkeypatch):
    _cache_encoder(tmp_path / "elsewhere", NAME)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    options = {"cache_dir": str(tmp_path / "elsewhere")}
    model = AttnPoolForSequenceClassification.from_encoder(NAME, encoder_kwargs=options)
    assert model.config.encoder.num_hidden_layers == 1


def test_missing_local_path_names_the_resolved_folder(no_network, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        AttnPoolForSequenceClassification.from_encoder("../models/minilm")
    message = str(caught.value)
    assert "'../models/minilm': no such folder" in message
    assert os.path.abspath(os.path.join(tmp_path, "..", "models", "minilm")) in message
    assert "hub name (org/model" in message and "all-MiniLM-L6-v2" in message
    assert "Repo id must" not in message
    assert not no_network


def test_invalid_hub_name_is_not_a_validation_traceback(no_network):
    with pytest.raises(FileNotFoundError) as caught:
        AttnPoolForSequenceClassification.from_encoder("my encoder")
    message = str(caught.value)
    assert "'my encoder' is neither a folder" in message and "nor a valid Hugging Face hub name" in message
    assert not no_network


def test_local_folder_is_never_looked_up(tmp_path):
    """A local folder is never looked up on the Hub: the check returns before asking it."""
    from attnpool.model.sources import check_hub_source

    (tmp_path / "config.json").write_text(json.dumps({}), encoding="utf-8")
    check_hub_source(str(tmp_path), {"local_files_only": True})  # would raise for a hub name


def test_train_and_demo_say_it_before_the_tokenizer_and_make_no_run_folder(no_network, tmp_path, capsys):
    """attnpool train read the encoder's tokenizer first: a mistyped folder got the hub's "Repo id must be in the
    form ..." and an unreachable name a minute and a half of retries, then the hub's message."""
    write_toy_csv(tmp_path / "train.csv", n=12)
    args = ["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--folds", "2"]
    assert main([*args, "--model", "../models/minilm", "--output-dir", str(tmp_path / "a")]) == 2
    said = capsys.readouterr().err
    assert f"no such folder (resolved to {os.path.abspath('../models/minilm')})" in said and "Repo id" not in said
    assert main([*args, "--model", NAME, "--output-dir", str(tmp_path / "b")]) == 2
    assert "Hugging Face Hub cannot be reached" in capsys.readouterr().err and len(no_network) == 2
    assert main(["demo", "--model", NAME, "--output-dir", str(tmp_path / "c")]) == 2
    assert "Hugging Face Hub cannot be reached" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
