"""The report renders in a real browser: headless Chromium takes a screenshot that is not blank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from explain_helpers import tiny_model, wordpiece_tokenizer

import attnpool
from attnpool.explanations.page import write_report

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs headless Chromium (Debian package 'chromium')"),
]


def test_report_renders_in_headless_chromium(tmp_path):
    model = tiny_model("multihead_attention", num_labels=2, num_heads=2)
    texts = ["the unbelievable cat sat on the mat", "a big red dog", "the cat , the dog !"]
    result = attnpool.explain(model, wordpiece_tokenizer(), texts, text_pairs=["red dogs", "a cat", "big"],
                              labels=["c0", "c1", "c0"], erasure_k=3)
    html_path, _ = write_report(result, tmp_path / "report.html")
    png = tmp_path / "shot.png"
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1200,1600",
               html_path.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), f"no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    import matplotlib.image

    image = matplotlib.image.imread(png)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert image.shape[:2] == (1600, 1200)
    background = np.median(image.reshape(-1, 3), axis=0)
    differs = np.abs(image - background).max(axis=-1) > 0.1
    assert differs.mean() > 0.02, "the page is (nearly) blank"
    red, green, blue = image[..., 0], image[..., 1], image[..., 2]
    orange = (red > 0.8) & (red - blue > 0.3) & (green < red - 0.1)
    assert orange.sum() > 200, "no word is shaded by its weight"
    dark = image.max(axis=-1) < 0.35
    assert dark.sum() > 2000, "no text was drawn"
