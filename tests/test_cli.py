from __future__ import annotations

import subprocess
import sys

from attnpool.cli import main


def test_poolers_lists_every_pooler_with_its_parameter_count(capsys):
    assert main(["poolers", "--hidden-size", "1024"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("attention "))
    assert "525,312" in line and "1024" in line
    assert "multihead_attention" in out and "gem" in out


def test_console_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "attnpool.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("attnpool ")
