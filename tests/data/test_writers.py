"""write_table: every format reads back with read_table as written, numbers in full."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from attnpool.data import read_table, write_table


def test_jsonl_keeps_every_digit_of_a_float(tmp_path):
    """pandas' to_json rounds to 10 decimals: a predicted probability of 3e-11 was written as 0.0."""
    frame = pd.DataFrame({
        "id": pd.array([1, None], dtype="Int64"),
        "prob": [3e-11, 1 / 3],
        "p32": np.array([0.1, np.nan], dtype=np.float32),
        "probs": [np.array([1.234567890123456e-11, 0.5]), [0.25]],
        "text": ["caf\u00e9", None],
    })
    path = tmp_path / "out.jsonl"
    write_table(frame, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == '{"id":1,"prob":3e-11,"p32":0.1,"probs":[1.234567890123456e-11,0.5],"text":"caf\u00e9"}'
    assert json.loads(lines[1]) == {"id": None, "prob": 1 / 3, "p32": None, "probs": [0.25], "text": None}
    back = read_table(path)
    assert back["prob"].tolist() == [3e-11, 1 / 3] and back["id"].tolist()[0] == 1
