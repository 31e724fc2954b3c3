"""benchmarks/serve_load.py and predict_memory.py without their servers or predict processes: what the load check
counts, and a --workdir used twice."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import predict_memory as pm  # noqa: E402
import serve_load as sl  # noqa: E402


class _Served(BaseHTTPRequestHandler):
    """A correct, slowish ``attnpool serve``: each answer carries its row's id and 0.5, after 50 ms."""

    protocol_version = "HTTP/1.1"
    rows_run = 0

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # /metrics
        n = type(self).rows_run
        self._send(f"attnpool_batch_rows_sum {n}\nattnpool_batch_rows_count {n}\n".encode(), "text/plain")

    def do_POST(self):  # /predict
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(0.05)
        type(self).rows_run += len(request["rows"])
        self._send(json.dumps({"predictions": [{"id": r["id"], "prediction": 0.5} for r in request["rows"]]}).encode())


class _FakeServer:
    """Stands for ``serve_load.Server`` (an ``attnpool serve`` subprocess): the stub above, in a thread."""

    def __init__(self, run, mode, device, threads):
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _Served)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self):
        self.http.shutdown()
        self.http.server_close()


def test_requests_the_deadline_stopped_are_not_lost(tmp_path, monkeypatch, capsys):
    """--seconds stopped the clients early and the requests they never sent counted as lost: a correct server read
    "answered 24/160 ... every request answered once with its own row: NO"."""
    import attnpool

    def fake_predict(run, rows, out, **kwargs):  # what `attnpool predict` writes for the rows: 0.5 each
        pd.DataFrame({"id": pd.read_csv(rows, dtype={"id": str})["id"], "prediction": 0.5}).to_csv(out, index=False)

    monkeypatch.setattr(sl, "build_run", lambda folder, folds: folder / "run")
    monkeypatch.setattr(sl, "Server", _FakeServer)
    monkeypatch.setattr(attnpool, "predict", fake_predict)
    monkeypatch.setattr(sys, "argv", ["serve_load.py", "--clients", "4", "--requests", "40", "--seconds", "0.4",
                                      "--rows", "50", "--workdir", str(tmp_path)])
    sl.main()
    out = capsys.readouterr().out
    assert "every request sent answered once with its own row: yes" in out and "NO" not in out
    lines = [line for line in out.splitlines() if "clients: " in line and "req/s" in line]
    assert len(lines) == 2  # batched and unbatched
    for line in lines:  # what was sent, all answered; the rest said apart
        answered, sent = line.split("answered ")[1].split(" sent")[0].split("/")
        assert answered == sent and int(sent) < 160  # 40 requests of 50 ms each take 2 s: over 0.4 s
        assert f"({160 - int(sent)} of 160 not sent: --seconds deadline)" in line
    assert "requests not sent: the --seconds deadline stopped their clients" in out


def test_a_lost_or_failed_request_still_fails_the_check(capsys):
    expected = {"r1": 0.5, "r2": 0.5}
    answers = {(0, 0): ("r1", {"predictions": [{"id": "r1", "prediction": 0.5}]})}
    lost = sl.summarise("batched", 1, 2, 1.0, [0.1], answers, [], expected, (0, 0), (1, 1), sent=2)
    assert (lost["answered"], lost["sent"], lost["not_sent"]) == (1, 2, 0)
    sl.report([lost])
    assert "every request sent answered once with its own row: NO" in capsys.readouterr().out


def test_serve_load_reuses_its_workdir(tmp_path, monkeypatch):
    """A second call with the same --workdir failed: "run directory .../run already exists"."""
    import attnpool.config
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    monkeypatch.setattr(attnpool.config, "default_model", lambda: encoder)
    first = sl.build_run(tmp_path / "work", folds=1)
    (first / "stale.txt").write_text("from the first call")
    again = sl.build_run(tmp_path / "work", folds=1)
    assert again == first and not (again / "stale.txt").exists() and (again / "fold_0" / "model").is_dir()


def test_predict_memory_reuses_its_workdir(tmp_path):
    """A second call with the same --workdir failed: FileExistsError on its run folder."""
    data = tmp_path / "work" / "pppm"
    data.mkdir(parents=True)
    first = pm.build_run(tmp_path / "work", data, folds=1, hidden_size=8)
    again = pm.build_run(tmp_path / "work", data, folds=1, hidden_size=8)
    assert again == first and (again / "fold_0" / "model" / "config.json").is_file()


def test_predict_memory_writes_its_rows_whole_or_not_at_all(tmp_path, monkeypatch):
    """main() reuses rows_N.csv when it exists: a write cut short left a half file that later calls measured."""
    import numpy as np

    source = pm.pppm_source(str(tmp_path / "no_pppm"), np.random.default_rng(0))
    path = tmp_path / "rows_100.csv"
    real = pd.DataFrame.to_csv

    def cut_short(frame, target, **kwargs):
        real(frame.iloc[:10], target, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", cut_short)
    with pytest.raises(KeyboardInterrupt):
        pm.write_rows(path, 100, source, np.random.default_rng(1))
    assert list(tmp_path.iterdir()) == []  # neither the half file nor a temporary one
    monkeypatch.undo()
    pm.write_rows(path, 100, source, np.random.default_rng(1))
    assert len(pd.read_csv(path)) == 100


def test_predict_memory_draws_its_own_rows_for_another_seed_or_data(tmp_path, monkeypatch):
    """rows_N.csv in a reused --workdir was read back whatever --seed or --data-dir asked: a second call with another
    seed measured the first call's rows. The file is now named after every option that decides its rows."""
    measured = []

    def measure(run, data, out, chunk_rows, args, log):  # no predict process: which rows it would have read
        measured.append(pd.read_csv(data, dtype=str, keep_default_na=False))
        out.write_text("id,score\n" + "".join(f"{i},0.5\n" for i in measured[-1]["id"]))
        return 1.0, 1.0

    monkeypatch.setattr(pm, "build_run", lambda folder, data_dir, folds, hidden_size: folder / "run")
    monkeypatch.setattr(pm, "measure", measure)
    pppm = tmp_path / "pppm"
    pppm.mkdir()
    pd.DataFrame({"id": ["a", "b"], "anchor": ["gas valve", "drum"], "target": ["valve", "wheel"],
                  "context": ["A01", "B02"], "score": [0.5, 0.25]}).to_csv(pppm / "train.csv", index=False)
    pd.DataFrame({"context": ["A01", "B02"], "text": ["HUMAN NECESSITIES", "OPERATIONS"]}).to_csv(
        pppm / "cpc_texts.csv", index=False)
    work = tmp_path / "work"
    calls = [(0, "none"), (1, "none"), (0, "none"), (0, "pppm")]  # (--seed, --data-dir)
    for seed, data in calls:
        monkeypatch.setattr(sys, "argv", ["predict_memory.py", "--sizes", "50", "--workdir", str(work), "--seed",
                                          str(seed), "--data-dir", str(tmp_path / data)])
        pm.main()
    assert all(len(rows) == 50 for rows in measured)
    assert not measured[1]["id"].isin(measured[0]["id"]).any()  # another seed: other rows (it measured seed 0's)
    assert measured[2].equals(measured[0])  # the same options: the file of the first call, read again
    assert set(measured[3]["anchor"]) <= {"gas valve", "drum"}  # the real phrases, not an earlier call's made-up ones
    assert set(measured[3]["context"]) <= {"A01", "B02"} and not measured[3].equals(measured[0])
    assert sorted(p.name for p in work.glob("rows_*.csv")) == sorted(
        {pm.rows_name(50, seed, tmp_path / data) for seed, data in calls})


def test_predict_memory_measures_the_predict_process_s_own_peak_not_this_script_s(tmp_path):
    """measure() returned os.wait4's ru_maxrss, which on Linux also counts the peak of the process the child was
    started from: main() builds the models and writes the 1M-row file before it measures, so the README's figures
    could be this script's memory. Here the parent peaks at 1.5 GiB, then predicts 20 rows (a few hundred MiB)."""
    from types import SimpleNamespace

    import numpy as np

    rng = np.random.default_rng(0)
    source = pm.pppm_source(str(tmp_path / "no_pppm"), rng)
    data_dir = tmp_path / "pppm"
    data_dir.mkdir()
    source[3].to_csv(data_dir / "cpc_texts.csv", index=False)
    run = pm.build_run(tmp_path, data_dir, folds=1, hidden_size=8)
    rows = tmp_path / "rows.csv"
    pm.write_rows(rows, 20, source, rng)
    size = 1536 * 2**20
    block = bytearray(size)
    block[::4096] = b"\1" * len(range(0, size, 4096))  # every page resident: this process's peak
    del block
    args = SimpleNamespace(batch_size=8, threads=1)
    peak, wall = pm.measure(run, rows, tmp_path / "pred.csv", 10, args, tmp_path / "log.txt")
    assert len(pd.read_csv(tmp_path / "pred.csv")) == 20 and wall > 0
    assert 0 < peak < 1024  # MiB: the predict process's own, ~570; 2,090 before (the parent's)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--clients", "4", "0"], "--clients must be positive integers (concurrent clients per level), got 4 0"),
        (["--requests", "0"], "--requests must be a positive integer (requests per client), got 0"),
    ],
)
def test_no_clients_or_requests_are_usage_errors(tmp_path, monkeypatch, capsys, argv, message):
    """--clients 0 failed in the thread pool only after the run was built and the server started; --requests 0
    compared nothing and printed "max |served - predict| = nan"."""
    monkeypatch.setattr(sl, "build_run", lambda folder, folds: pytest.fail("built the run"))
    monkeypatch.setattr(sl, "Server", lambda *a, **k: pytest.fail("started the server"))
    monkeypatch.setattr(sys, "argv", ["serve_load.py", *argv, "--workdir", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        sl.main()
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
