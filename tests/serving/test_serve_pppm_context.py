"""A served PPPM run answers a row with an unknown context code 422, without the server's paths.

The error was predict's: ``rows: /srv/data/pppm/cpc_texts.csv: no text for ...; add a line 'code,title' for each to
cpc_texts.csv``, a file on the server that the client can neither see nor edit.
"""

from __future__ import annotations

import json

import torch
from serve_helpers import asgi

from model_helpers import make_run


def test_an_unknown_context_code_is_refused_as_unknown_to_the_model_without_a_server_path(encoder, tmp_path,
                                                                                           monkeypatch):
    from attnpool.serving.app import Settings, create_app
    from attnpool.serving.service import Service

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    pppm = tmp_path / "pppm"
    pppm.mkdir()
    (pppm / "cpc_texts.csv").write_text("context,text\nA01,red house\n")
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    service = Service.load(run, device="cpu", precision="fp32", threads=torch.get_num_threads())
    app = create_app(service, Settings())
    rows = [{"anchor": "cat", "target": "big cat", "context": "A01"}, {"anchor": "mat", "target": "on mat",
                                                                        "context": "ZZZ"}]
    status, _, body, raised = asgi(app, "POST", "/predict", json.dumps({"rows": rows}).encode())
    assert raised is None
    error = json.loads(body)["error"]
    assert (status, error) == (422, "rows: 1 context code(s) used by 1 rows are unknown to the model: 'ZZZ'; correct "
                               "or drop the rows with those code(s): a code new to the model needs a model trained "
                               "with its title")
    assert str(tmp_path) not in error and "cpc_texts.csv" not in error
