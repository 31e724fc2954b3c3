"""``attnpool serve --backend onnx``: the ONNX Runtime ensemble of a run's folds, int8 checked at start-up.

The scores come from ONNX Runtime sessions of the folds' graphs, in float32 or int8 whatever ``--precision`` says;
the word weights (``"weights": true``) still come from the PyTorch models, in ``--precision``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from attnpool.data.prediction import PredictionInputs
from attnpool.prediction.engine import FoldEnsemble
from attnpool.prediction.onnx_engine import CALIBRATION_ROWS, OnnxFoldEnsemble, check_tolerance
from attnpool.runs.run import Run, RunError

logger = logging.getLogger("attnpool.serve")


def onnx_scorer(run: Run, models: FoldEnsemble, how: str, quantize: str, threads: int, tolerance: float,
                calibration_file: str | Path | None, batch_size: int | None = None) -> OnnxFoldEnsemble:
    """The ONNX Runtime ensemble of the folds of ``models`` (loaded, weighted ``how``); int8 checked against them.

    ``batch_size``: the most rows the server scores at once (``--max-batch``); int8 is checked at it too, besides
    1 and 64, since dynamic quantization gives each batch one activation scale (a row's error depends on its batch).

    Raises:
        RunError: No calibration rows (no ``calibration_file`` and the run's training file is gone), or int8 that
            departs from the float32 models beyond ``tolerance``.
    """
    if quantize != "none":
        check_tolerance(tolerance)  # before the folds' graphs are exported and quantized
    scorer = OnnxFoldEnsemble.load(run, models.folds, how, quantize, threads=threads, reference=models)
    if quantize == "none":
        return scorer
    cfg = run.config()
    path = calibration_file or cfg.train_file or (Path(cfg.data_dir) / "train.csv" if cfg.preset else None)
    if path is None or not Path(path).is_file():
        raise RunError(f"--quantize {quantize} is checked against the float32 models on rows like the served ones; "
                       f"the run's training file {path or '(none)'} is not there: give --calibration-file FILE")
    inputs = PredictionInputs(cfg, run.info(), path, scorer.tokenizer, log=logger)
    _, encodings = inputs.encode(next(iter(inputs.chunks(CALIBRATION_ROWS))))
    scorer.check(encodings, tolerance=tolerance, batch_size=batch_size)
    return scorer


def scores_precision(scorer: OnnxFoldEnsemble) -> str:
    """What an ONNX ensemble computes its scores in, as ``predict`` names it: ``float32`` or ``int8``."""
    return "float32" if scorer.quantize == "none" else scorer.quantize
