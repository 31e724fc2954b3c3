"""attnpool without pyarrow (the optional ``parquet`` extra): every command ran into its import, ``--help`` too.

pyarrow was imported at module level by the prediction modules, loaded by ``import attnpool``. In a subprocess whose
imports of pyarrow fail, attnpool imports, ``--help`` prints, a CSV predicts, and a Parquet output says how to
install pyarrow before any model loads.
"""

from __future__ import annotations

import json
import subprocess
import sys

from model_helpers import make_run, save_tiny_encoder, write_toy_csv

_WITHOUT_PYARROW = r"""
import contextlib, io, json, sys

class NoPyarrow:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoPyarrow())
sys.modules["datasets"] = None  # built on pyarrow: not installed without it (transformers' Trainer then skips it)
run, data, folder = sys.argv[1:4]
import attnpool
from attnpool.cli import run as cli
from attnpool.data import DataError

found = {}
sys.argv = ["attnpool", "--help"]
help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    cli()
found["help"] = "predict" in help_text.getvalue()
found["rows"] = attnpool.predict(run, data, folder + "/out.csv", progress=False, threads=1, precision="fp32").rows
try:
    attnpool.predict(run, data, folder + "/out.parquet", progress=False, threads=1, precision="fp32")
except DataError as err:
    found["parquet"] = str(err)
found["pyarrow"] = "pyarrow" in sys.modules
print(json.dumps(found))
"""


def test_attnpool_runs_without_pyarrow_and_says_how_to_get_it_for_parquet(tmp_path):
    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)
    write_toy_csv(tmp_path / "in.csv", n=4)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PYARROW, str(run), str(tmp_path / "in.csv"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"help": True, "rows": 4, "pyarrow": False, "parquet": (
        f"{tmp_path / 'out.parquet'}: writing Parquet needs the pyarrow package; install it (`pip install "
        "'attnpool[parquet]'`) or write a .csv, .tsv or .jsonl output")}
    assert not (tmp_path / "out.parquet").exists()
