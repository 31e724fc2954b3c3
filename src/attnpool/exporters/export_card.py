"""The model card (``README.md``) an ONNX export writes beside its graph, unless the folder's own is to be kept."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from torch import nn

from attnpool.exporters.models import _TOKENIZER_FILES, _base_model
from attnpool.model.card import (
    CARD_FILE,
    ExportFacts,
    card_graph,
    is_attnpool_card,
    is_stamped,
    may_rewrite_card,
    model_card,
    read_card,
    stamp_card,
    training_facts,
)
from attnpool.model.card_facts import encoder_source
from attnpool.model.encoders import looks_like_local_path

logger = logging.getLogger("attnpool.export")


def stage_card(staging: Path, output: Path, model: nn.Module, model_dir: Path | None, facts: ExportFacts,
               fold: tuple[int, int] | None = None) -> None:
    """A model card for the export folder: the model's, its training (from the source folder's card), the graph.

    It is written with a fingerprint (:func:`stamp_card`), so that the next export there refreshes it only while it is
    unedited (:func:`may_rewrite_card`). A ``README.md`` beside ``output`` is kept, and no card written, when it is
    the user's: one attnpool did not write, or one it wrote that was edited since, or one of an attnpool that marked
    no card as generated (it cannot be told from an edited one) unless it is an export card of this graph (each
    export rewrote those then: ``predict --backend onnx``'s fold graphs, re-exported after a retrain, among them).
    Nor is one written into a saved model folder (``config.json`` beside ``output``): its card describes the model
    and how to load it with transformers, which an export card would replace; nor over the card of another graph
    still in the folder (one exported there before, with the same tokenizer). ``fold``: ``(K, N)``, the graph holds
    fold K of a run's N (:func:`run_fold`).
    """
    folder = output.parent
    if (folder / "config.json").is_file():
        logger.info("%s is a saved model folder: its model card is kept, no export card written", folder)
        return
    # an export card of this very graph from an attnpool that stamped no card: refreshed, as every export was then
    earlier = not is_stamped(folder) and card_graph(read_card(folder)) == output.name
    if (folder / CARD_FILE).exists() and not may_rewrite_card(folder) and not earlier:
        whose = ("was edited since attnpool wrote it, or was written by an attnpool that did not mark its cards"
                 if is_attnpool_card(read_card(folder)) else "is one of your own")
        logger.warning("%s: %s %s: kept, no model card written for %s (delete it and export again for a fresh card)",
                       folder, CARD_FILE, whose, output.name)
        return
    described = card_graph(read_card(folder))
    if described and described != output.name and (folder / described).is_file():
        logger.warning("%s's README.md describes the graph %s there: kept, no card written for %s", folder,
                       described, output.name)
        return
    card = model_card(model.config, architecture=type(model).__name__, num_parameters=sum(p.numel() for p in
                      model.parameters()), training=training_facts(model_dir) if model_dir else None, export=facts,
                      has_weights=_base_model(model).pooler.has_weights)
    (staging / CARD_FILE).write_text(stamp_card(_with_fold(card, fold)), encoding="utf-8")


def _with_fold(card: str, fold: tuple[int, int] | None) -> str:
    """``card`` with a line after the graph's saying which fold of its run the graph holds."""
    if fold is None:
        return card
    k, n = fold
    line = (f"- **Fold:** fold {k}, the only finished fold of its train run" if n == 1 else
            f"- **Fold:** fold {k} of {n} of its train run (this graph holds that fold's model alone); `attnpool "
            f"predict --run` averages all {n} folds (to do the same with each fold's graph, see \"Ensembling folds\" "
            "in attnpool's docs/serving.md)")
    return re.sub(r"^(- \*\*Graph:\*\* .*)$", lambda m: f"{m.group(1)}\n{line}", card, count=1, flags=re.M)


def tokenizer_from(model: nn.Module, model_dir: Path | None, output: Path) -> str | None:
    """Where the tokenizer of a graph exported without one is, for its card.

    The model folder (relative to the graph's, ``../model`` for a run's ``fold_K/onnx``) when it holds one, else the
    encoder's source (a folder or hub name); ``None``: neither.
    """
    if model_dir is not None and any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        return Path(os.path.relpath(model_dir.resolve(), output.parent.resolve())).as_posix()
    source = encoder_source(model.config)
    if source and (os.path.isdir(source) or not looks_like_local_path(source)):
        return source
    return None
