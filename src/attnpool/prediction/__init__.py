"""Prediction with trained runs: fold ensembles, length-sorted batches, files of any size streamed in chunks."""

from attnpool.prediction.engine import FoldEnsemble, ensemble_weights, load_fold_models, predict_encoded
from attnpool.prediction.predict import PredictionSummary, predict

__all__ = ["FoldEnsemble", "PredictionSummary", "ensemble_weights", "load_fold_models", "predict", "predict_encoded"]
