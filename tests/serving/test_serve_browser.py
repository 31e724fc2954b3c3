"""The page in a real browser: headless Chromium fills in a row, gets the prediction and the shaded words."""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse

import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian package 'chromium')"),
]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=15000", "--window-size=1000,900"]


def chromium(tmp_path, url, *args):
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_the_page_predicts_and_shades_the_words(server, tmp_path):
    row = {"first": "the cat sat on the mat", "second": "a big red dog"}
    url = f"http://127.0.0.1:{server.port}/#{urllib.parse.urlencode(row, quote_via=urllib.parse.quote)}"
    dom = chromium(tmp_path, url, "--dump-dom")
    assert 'id="result"' in dom.stdout and "prediction <b>" in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count('class="w"') == len(row["first"].split()) + len(row["second"].split())
    assert dom.stdout.count('class="sp"') == 3  # [CLS] and two [SEP]
    png = tmp_path / "page.png"
    shot = chromium(tmp_path, url, f"--screenshot={png}")
    assert png.is_file(), f"no screenshot (exit {shot.returncode}): {shot.stderr[-2000:]}"
    import matplotlib.image

    image = matplotlib.image.imread(png)[..., :3]  # (H, W, 3) floats in [0, 1]
    background = np.median(image.reshape(-1, 3), axis=0)
    assert (np.abs(image - background).max(axis=-1) > 0.1).mean() > 0.02, "the page is (nearly) blank"
    red, green, blue = image[..., 0], image[..., 1], image[..., 2]
    orange = (red > 0.8) & (red - blue > 0.3) & (green < red - 0.1)  # the shade of the words (nothing else is orange)
    assert orange.sum() > 200, "no word is shaded by its weight"
    assert (image.max(axis=-1) < 0.35).sum() > 1000, "no text was drawn"
