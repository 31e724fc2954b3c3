"""A tiny trained run and a tiny saved classifier, served by real ``attnpool serve`` processes for the session.

The three servers start together, as soon as what each serves exists, so that their start-ups (mostly importing
torch and transformers) overlap each other and the training of the run.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from serve_helpers import API_KEY, MAX_BODY, MAX_ROWS, Server

import attnpool
from model_helpers import save_tiny_encoder, tiny_tokenizer, write_toy_csv

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

@pytest.fixture(scope="session")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder") / "encoder")


@pytest.fixture(scope="session")
def recipe(tmp_path_factory, encoder, keyed_server):  # the keyed server starts while the run trains
    """A two-fold regression run on text pairs (``first``, ``second``), trained for real, and rows to predict."""
    folder = tmp_path_factory.mktemp("serve")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    test = write_toy_csv(folder / "test.csv", n=9, seed=1)
    attnpool.train(train_file=str(folder / "train.csv"), text_cols=["first", "second"], model=encoder, folds=2,
                   epochs=1, max_length=16, batch_size=8, pooling_options={"attn_size": 8}, precision="fp32",
                   output_dir=str(folder / "run"))
    attnpool.predict(folder / "run", folder / "test.csv", folder / "predicted.csv", progress=False,
                     device="cpu", precision="fp32")
    predicted = pd.read_csv(folder / "predicted.csv", dtype={"id": str})
    return {"folder": folder, "run": folder / "run", "encoder": encoder, "test": test, "predicted": predicted}


@pytest.fixture(scope="session")
def classifier(tmp_path_factory, encoder):
    """A saved two-class model folder with a two-head pooler (untrained: its numbers are random but fixed)."""
    folder = tmp_path_factory.mktemp("classifier") / "model"
    torch.manual_seed(0)
    model = attnpool.AttnPoolForSequenceClassification.from_encoder(
        encoder, pooling="multihead_attention", pooling_options={"num_heads": 2}, num_labels=2,
        id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model.save_pretrained(folder, tokenizer=tiny_tokenizer())
    return folder


@pytest.fixture(scope="session")
def run_servers(recipe):
    """Both servers of the run, started at once (see ``server`` and ``draining_server``)."""
    served = {
        "server": Server("--run", str(recipe["run"]), "--max-batch", "8", "--max-wait-ms", "30", "--max-rows",
                         str(MAX_ROWS), "--max-body-bytes", str(MAX_BODY), "--precision", "fp32"),
        "draining": Server("--run", str(recipe["run"]), "--max-wait-ms", "5000"),
    }
    yield served
    for one in served.values():
        one.terminate()
    for one in served.values():
        one.stop()


@pytest.fixture(scope="session")
def server(run_servers):
    """The run, served with small limits so that each can be hit; a 30 ms wait makes concurrent requests batch."""
    return run_servers["server"]


@pytest.fixture(scope="session")
def draining_server(run_servers):
    """The run, served with a 5 s wait for company: a request stays queued long enough to be caught by SIGTERM."""
    return run_servers["draining"]


@pytest.fixture(scope="session")
def keyed_server(classifier):
    """The model folder, served with an API key."""
    served = Server("--run", str(classifier), "--api-key-env", "ATTNPOOL_TEST_KEY", "--max-length", "16",
                    env={"ATTNPOOL_TEST_KEY": API_KEY})
    yield served
    served.stop()
