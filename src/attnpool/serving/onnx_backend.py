"""``attnpool serve --backend onnx``: the ONNX Runtime ensemble of a run's folds, int8 checked at start-up.

The scores come from ONNX Runtime sessions of the folds' graphs, in float32 or int8 whatever ``--precision`` says;
the word weights (``"weights": true``) still come from the PyTorch models, in ``--precision``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from attnpool.data.prediction import PredictionInputs, context_views
from attnpool.model.encoders import position_limit
from attnpool.prediction.engine import FoldEnsemble
from attnpool.prediction.onnx_engine import CALIBRATION_ROWS, OnnxFoldEnsemble, check_scores, check_tolerance
from attnpool.runs.run import Run, RunError

logger = logging.getLogger("attnpool.serve")


def onnx_scorer(run: Run, models: FoldEnsemble, how: str, quantize: str, threads: int, tolerance: float,
                calibration_file: str | Path | None, batch_size: int | None = None,
                context_view: str = "with") -> OnnxFoldEnsemble:
    """The ONNX Runtime ensemble of the folds of ``models`` (loaded, weighted ``how``); int8 checked against them.

    ``batch_size``: the most rows the server scores at once (``--max-batch``); int8 is checked at it too, besides
    1 and 64, since dynamic quantization gives each batch one activation scale (a row's error depends on its batch).
    The calibration rows are read as the served ones: at the run's ``max_length`` capped at what its encoder reads
    (as ``Service`` caps it), in the service's ``context_view`` (``both``: the mean of the two views' scores).

    Raises:
        RunError: No calibration rows (no ``calibration_file`` and the run's training file is gone), or int8 that
            departs from the float32 models beyond ``tolerance``.
    """
    if quantize != "none":
        check_tolerance(tolerance)  # before the folds' graphs are exported and quantized
    scorer = OnnxFoldEnsemble.load(run, models.folds, how, quantize, threads=threads, reference=models,
                                   command="serve")
    if quantize == "none":
        return scorer
    cfg = run.config()
    path = calibration_file or cfg.train_file or (Path(cfg.data_dir) / "train.csv" if cfg.preset else None)
    if path is None or not Path(path).is_file():
        raise RunError(f"--quantize {quantize} is checked against the float32 models on rows like the served ones; "
                       f"the run's training file {path or '(none)'} is not there: give --calibration-file FILE")
    limit = position_limit(models.models[0])  # Service has warned of a max_length over it already
    compared = []
    for view in context_views(context_view, bool(cfg.group_context), str(run.path)):
        inputs = PredictionInputs(run.config(), run.info(), path, scorer.tokenizer, log=logger, with_context=view)
        inputs.cfg.max_length = inputs.cfg.max_length if limit is None else min(inputs.cfg.max_length, limit)
        _, encodings = inputs.encode(next(iter(inputs.chunks(CALIBRATION_ROWS))))
        compared.append(scorer.compare(encodings, batch_size=batch_size))
    reference = sum(theirs for theirs, _ in compared) / len(compared)
    quantized = {size: sum(ours[size] for _, ours in compared) / len(compared) for size in compared[0][1]}
    check_scores(reference, quantized, tolerance=tolerance, quantize=quantize, command="serve")
    return scorer


def scores_precision(scorer: OnnxFoldEnsemble) -> str:
    """What an ONNX ensemble computes its scores in, as ``predict`` names it: ``float32`` or ``int8``."""
    return "float32" if scorer.quantize == "none" else scorer.quantize
