"""Load on ``attnpool serve``: N concurrent clients x M requests, with dynamic batching and without, with MiniLM.

What it measures: throughput (answered requests per second), latency p50/p95/p99 (each request timed by its
client, from sending to the last byte of the answer) and the mean batch size (rows per model call, from the
server's ``/metrics``), for the same load served twice, side by side in one run:

* **batched**: ``--max-batch 64 --max-wait-ms 5`` (the defaults), concurrent requests run together;
* **unbatched**: ``--max-batch 1 --max-wait-ms 0``, one request (of one row) per forward pass.

And what it checks: every request is answered exactly once with its own row's answer (each carries a distinct
id, and each answer must carry that id and the value ``attnpool predict`` writes for the row), so none is lost,
duplicated or swapped; the answers equal ``attnpool predict`` on the same rows within 1e-5.

Model: nothing is trained. A run directory is written with ``--folds`` fold models built around the real
all-MiniLM-L6-v2 encoder (``attnpool.config.default_model()``, offline) with a fresh attention pooler and head,
so the figures show serving the real encoder's compute; trained weights change no timing. Rows: text pairs of 2-8
words from a word list (seeded), ``max_length`` 64.

Load: loopback only (127.0.0.1), each client one keep-alive connection sending its requests one after another;
bounded in count (``--requests`` per client) and in time (``--seconds`` per mode: a client stops when it is up).
The check counts what the clients sent: requests a client never sent because ``--seconds`` was up are reported
apart (``N of M not sent: --seconds deadline``), not as lost. The server is a ``python -m attnpool serve``
subprocess on a free port, started per mode. A ``--workdir`` of an earlier call is reused: its run is written again.

Usage::

    python benchmarks/serve_load.py                      # 16 clients x 40 requests, both modes
    python benchmarks/serve_load.py --clients 1 4 16     # several concurrency levels
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

WORDS = ("adjustable gas flow drum valve photoconductor inorganic layer coating wheel sensor signal vehicle "
         "polymer bearing housing circuit optical fiber member locking seal pump motor ring plate the a of for "
         "with light water heat control system device method rotating shaft").split()
READY = re.compile(r"ready on http://127\.0\.0\.1:(\d+)")
MODES = {"batched": ["--max-batch", "64", "--max-wait-ms", "5"],
         "unbatched": ["--max-batch", "1", "--max-wait-ms", "0"]}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="+", default=[16], help="concurrent clients (one level each)")
    p.add_argument("--requests", type=int, default=40, help="requests per client (one row each)")
    p.add_argument("--seconds", type=float, default=120.0, help="time limit of one load, per mode and level")
    p.add_argument("--folds", type=int, default=1, help="fold models in the run (each runs every row)")
    p.add_argument("--rows", type=int, default=400, help="distinct rows the requests cycle through")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the server (default: torch's)")
    p.add_argument("--workdir", default=None, help="where to write the run (default: a temporary folder, deleted)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    # Checked before the run is built and the server started: 0 clients failed only then, in the thread pool, and
    # 0 requests answered nothing and compared nothing (max |served - predict| = nan).
    if min(args.clients) < 1:
        p.error(f"--clients must be positive integers (concurrent clients per level), got "
                f"{' '.join(map(str, args.clients))}; e.g. --clients 1 4 16")
    if args.requests < 1:
        p.error(f"--requests must be a positive integer (requests per client), got {args.requests}; e.g. --requests 40")
    return args


def build_run(folder: Path, folds: int) -> Path:
    """A run directory as ``attnpool train`` leaves it (text pairs, regression), with untrained MiniLM fold models."""
    import torch
    from transformers import AutoTokenizer

    from attnpool.config import TrainConfig, default_model
    from attnpool.model import AttnPoolForSequenceClassification
    from attnpool.runs import Run

    encoder = default_model()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    run = Run.create(folder / "run", overwrite=True)  # a --workdir of an earlier call: its run, written again
    cfg = TrainConfig(train_file="(benchmark: no training)", text_cols=["anchor", "target"], model=encoder,
                      folds=max(folds, 2), max_length=64)
    run.write_config(cfg.to_dict())
    run.write_info({"task": "regression", "classes": None, "label": "score", "id_col": "id", "num_folds": folds})
    for fold in range(folds):
        torch.manual_seed(fold)
        model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention")
        model.save_pretrained(run.model_dir(fold), tokenizer=tokenizer)
    return run.path


def make_rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    phrase = lambda: " ".join(rng.choice(WORDS, size=rng.integers(2, 9)))  # noqa: E731
    return pd.DataFrame({"id": [f"r{i:05d}" for i in range(n)], "anchor": [phrase() for _ in range(n)],
                         "target": [phrase() for _ in range(n)]})


class Server:
    """``attnpool serve`` in a subprocess on a free loopback port."""

    def __init__(self, run: Path, mode: list[str], device: str, threads: int | None) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
        command = [sys.executable, "-m", "attnpool", "serve", "--run", str(run), "--port", "0", "--device", device,
                   "--precision", "fp32", *mode]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=env)
        self.lines: list[str] = []
        self.port: int | None = None
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stdout:
                self.lines.append(line)
                if (found := READY.search(line)) is not None:
                    self.port = int(found.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(300) or self.port is None:
            self.stop()
            sys.exit("the server did not start:\n" + "".join(self.lines)[-4000:])

    def stop(self) -> None:
        """SIGTERM, and wait for the drained server to exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def call(connection: http.client.HTTPConnection, method: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    response = connection.getresponse()
    payload = response.read()
    return response.status, payload


def batch_totals(port: int) -> tuple[float, float]:
    """``(rows, batches)`` the server has run so far (its /metrics)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    _, text = call(connection, "GET", "/metrics")
    connection.close()
    values = dict(line.rsplit(" ", 1) for line in text.decode().splitlines() if line.startswith("attnpool_batch_rows_"))
    return float(values["attnpool_batch_rows_sum"]), float(values["attnpool_batch_rows_count"])


def load(port: int, rows: list[dict], clients: int, requests: int, seconds: float):
    """Run the load; ``(wall seconds, latencies in s, answers {(client, i): (sent id, answer)}, errors, sent)``.

    ``sent``: the requests the clients sent, ``clients * requests`` unless the ``seconds`` deadline stopped some.
    """
    deadline = time.monotonic() + seconds
    answers: dict[tuple[int, int], tuple[str, dict]] = {}
    latencies: list[float] = []
    errors: list[str] = []
    sent = [0] * clients  # per client: what it sent, not what it was asked to (the deadline stops it)
    lock = threading.Lock()
    start_line = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        start_line.wait()
        for i in range(requests):
            if time.monotonic() > deadline:
                break
            row = rows[(c * requests + i) % len(rows)]
            sent[c] += 1
            started = time.perf_counter()
            status, payload = call(connection, "POST", "/predict", {"rows": [row]})
            took = time.perf_counter() - started
            with lock:
                if status != 200:
                    errors.append(f"{status}: {payload[:200]!r}")
                    continue
                latencies.append(took)
                answers[c, i] = (row["id"], json.loads(payload))
        connection.close()

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, c) for c in range(clients)]
        start_line.wait()
        began = time.perf_counter()
        for f in futures:
            f.result()
        wall = time.perf_counter() - began
    return wall, latencies, answers, errors, sum(sent)


def main() -> None:
    args = parse_args()
    import torch

    import attnpool

    folder = Path(args.workdir or tempfile.mkdtemp(prefix="attnpool-serve-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        run = build_run(folder, args.folds)
        frame = make_rows(args.rows, args.seed)
        frame.to_csv(folder / "rows.csv", index=False)
        attnpool.predict(run, folder / "rows.csv", folder / "predicted.csv", progress=False, device=args.device,
                         precision="fp32")
        expected = dict(pd.read_csv(folder / "predicted.csv", dtype={"id": str})[["id", "prediction"]].itertuples(
            index=False))
        rows = frame.to_dict("records")
        print(f"attnpool {attnpool.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs, device "
              f"{args.device}; run: {args.folds} fold model(s) of all-MiniLM-L6-v2 + attention pooler, max_length 64; "
              f"{args.requests} requests of one row per client, {args.rows} distinct text pairs of 2-8 words")
        results = []
        for mode, options in MODES.items():
            server = Server(run, options, args.device, args.threads)
            try:
                for clients in args.clients:
                    warm = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                    for row in rows[:8]:
                        call(warm, "POST", "/predict", {"rows": [row]})
                    warm.close()
                    before = batch_totals(server.port)
                    wall, latencies, answers, errors, sent = load(server.port, rows, clients, args.requests,
                                                                  args.seconds)
                    after = batch_totals(server.port)
                    results.append(summarise(mode, clients, args.requests, wall, latencies, answers, errors,
                                             expected, before, after, sent))
                    print("  " + results[-1]["line"], flush=True)
            finally:
                server.stop()
        report(results)
    finally:
        if args.workdir is None:
            shutil.rmtree(folder, ignore_errors=True)


def summarise(mode, clients, requests, wall, latencies, answers, errors, expected, before, after, sent) -> dict:
    """The figures and checks of one load; ``sent``: the requests the clients sent (the deadline may stop them).

    Requests never sent (``clients * requests - sent``) are no lost answers: they counted as lost, and a correct
    server stopped by ``--seconds`` read "answered once ...: NO".
    """
    swapped = sum(1 for row_id, body in answers.values()
                  if len(body["predictions"]) != 1 or body["predictions"][0].get("id") != row_id)
    diffs = [abs(body["predictions"][0]["prediction"] - expected[row_id]) for row_id, body in answers.values()]
    p50, p95, p99 = (1000 * np.percentile(latencies, q) if latencies else float("nan") for q in (50, 95, 99))
    rows, batches = after[0] - before[0], after[1] - before[1]
    out = {"mode": mode, "clients": clients, "planned": clients * requests, "sent": sent,
           "not_sent": clients * requests - sent, "answered": len(answers),
           "errors": len(errors), "swapped": swapped, "max_diff": max(diffs, default=float("nan")), "wall": wall,
           "throughput": len(answers) / wall, "p50": p50, "p95": p95, "p99": p99,
           "mean_batch": rows / batches if batches else float("nan"), "rows": rows}
    out["line"] = (f"{mode:>9}, {clients:>3} clients: {out['throughput']:7.1f} req/s, p50 {p50:6.1f} ms, p95 "
                   f"{p95:6.1f} ms, p99 {p99:6.1f} ms, mean batch {out['mean_batch']:5.1f} rows; answered "
                   f"{len(answers)}/{sent} sent{_not_sent(out)}, errors {len(errors)}, wrong id {swapped}, max "
                   f"|served - predict| {out['max_diff']:.1e}")
    return out


def _not_sent(r: dict) -> str:
    """`` (N of M not sent: --seconds deadline)`` where the deadline stopped clients, else nothing."""
    return f" ({r['not_sent']} of {r['planned']} not sent: --seconds deadline)" if r.get("not_sent") else ""


def report(results: list[dict]) -> None:
    print()
    print("| mode | clients | requests answered / sent | req/s | p50 (ms) | p95 (ms) | p99 (ms) | mean batch (rows) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['clients']} | {r['answered']}/{r['sent']}{_not_sent(r)} | {r['throughput']:.1f} | "
              f"{r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['mean_batch']:.1f} |")
    by = {(r["mode"], r["clients"]): r for r in results}
    print()
    for clients in sorted({r["clients"] for r in results}):
        batched, unbatched = by.get(("batched", clients)), by.get(("unbatched", clients))
        if batched and unbatched:
            ratio = batched["throughput"] / unbatched["throughput"]
            print(f"{clients} clients: batched / unbatched throughput {ratio:.2f}x, p99 {batched['p99']:.1f} ms vs "
                  f"{unbatched['p99']:.1f} ms")
    complete = all(r["answered"] == r["sent"] and not r["errors"] and not r["swapped"] for r in results)
    worst = max(r["max_diff"] for r in results)
    not_sent = sum(r.get("not_sent", 0) for r in results)
    print(f"every request sent answered once with its own row: {'yes' if complete else 'NO'}; "
          f"max |served - attnpool predict| = {worst:.1e} ({'within' if worst <= 1e-5 else 'OVER'} 1e-5)")
    if not_sent:
        print(f"{not_sent} of {sum(r['planned'] for r in results)} requests not sent: the --seconds deadline stopped "
              "their clients (raise --seconds to send them all)")


if __name__ == "__main__":
    main()
