"""The PPPM recipe as a library: k-fold training on transformers' Trainer, ensembled prediction, the demo."""

from attnpool.training.config import TrainConfig
from attnpool.training.predict import PredictionSummary, predict
from attnpool.training.recipe import TrainResult, train
from attnpool.training.runs import RunError

__all__ = ["PredictionSummary", "RunError", "TrainConfig", "TrainResult", "predict", "train"]
