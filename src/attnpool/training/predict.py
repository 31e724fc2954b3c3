"""``predict``: ensemble a run's fold models over a file, fast (length-sorted, dynamically padded batches).

The notebook recipe pads every batch to the data set's maximum length and runs the batches in file order. Here the
rows are sorted by token length so that each batch pads only to its own longest row, batches are larger, and
the output is put back in the input order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnpool.training.runs import RunError, atomic_write, read_run_info

logger = logging.getLogger("attnpool.predict")


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row indices grouped into batches of similar length (longest first, so memory peaks at the start)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def predict_encoded(models: Sequence[torch.nn.Module], encodings: dict[str, list], rows: np.ndarray | None,
                    batch_size: int, tokenizer: Any, device: str | torch.device | None = None,
                    progress: bool = False) -> list[np.ndarray]:
    """Logits of each model for the given rows of pre-tokenised inputs, in the order of ``rows``.

    Args:
        models: Models returning ``.logits``.
        encodings: ``{"input_ids": [...], "attention_mask": [...], ...}`` lists of token lists (unpadded).
        rows: Which rows (default: all).
        batch_size: Rows per forward pass.
        tokenizer: Pads the batches (``tokenizer.pad``).
        device: Where to run; default: CUDA when available.
        progress: Show a progress bar.

    Returns:
        One ``(len(rows), num_labels)`` float32 array per model.
    """
    rows = np.arange(len(encodings["input_ids"])) if rows is None else np.asarray(rows)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    lengths = [len(encodings["input_ids"][i]) for i in rows]
    batches = length_sorted_batches(lengths, batch_size)
    outputs = [np.zeros((len(rows), 0), dtype=np.float32) for _ in models]
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encodings]
    for m in models:
        m.eval().to(device)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    for batch in batches:
        features = tokenizer.pad([{k: encodings[k][rows[i]] for k in keys} for i in batch], return_tensors="pt")
        features = {k: v.to(device) for k, v in features.items()}
        for j, m in enumerate(models):
            logits = m(**features).logits.float().cpu().numpy()
            if outputs[j].shape[1] == 0:
                outputs[j] = np.zeros((len(rows), logits.shape[1]), dtype=np.float32)
            outputs[j][batch] = logits
    return outputs


def load_run_models(run_dir: str | Path) -> tuple[dict[str, Any], list[torch.nn.Module], Any, list[dict]]:
    """The run's info, every finished fold's model, the tokenizer and the fold metrics.

    Raises:
        RunError: Not a run, another run format, no finished fold, or a model folder that cannot be loaded.
    """
    import json

    from transformers import AutoTokenizer

    from attnpool.model import AttnPoolForSequenceClassification

    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    model_dirs = sorted(run_dir.glob("fold_*/model"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not model_dirs:
        raise RunError(f"{run_dir} has no trained fold (no fold_K/model/); finish training with --resume first")
    models, fold_metrics = [], []
    for folder in model_dirs:
        try:
            models.append(AttnPoolForSequenceClassification.from_pretrained(folder))
        except Exception as err:  # noqa: BLE001 - any failure to load means a corrupt checkpoint
            raise RunError(f"cannot load the fold model in {folder}: {err}. The checkpoint is corrupt or incomplete; "
                           "re-train that fold (delete the fold folder and run train --resume)") from err
        metrics_file = folder.parent / "metrics.json"
        fold_metrics.append(json.loads(metrics_file.read_text()) if metrics_file.is_file() else {})
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[0])
    return info, models, tokenizer, fold_metrics


def ensemble_weights(fold_metrics: list[dict], metric: str, how: str) -> np.ndarray:
    """``mean``: equal weights. ``score``: weights proportional to each fold's validation ``metric`` (clipped at 0)."""
    n = len(fold_metrics)
    if how == "mean":
        return np.full(n, 1.0 / n)
    if how != "score":
        raise ValueError(f"ensemble must be 'mean' or 'score', got {how!r}")
    scores = np.array([max(float(m.get(metric) or 0.0), 0.0) for m in fold_metrics])
    if scores.sum() == 0:
        return np.full(n, 1.0 / n)
    return scores / scores.sum()


def predict(run_dir: str | Path, input_file: str | Path, output_file: str | Path, *, batch_size: int = 128,
            ensemble: str = "mean", device: str | None = None, progress: bool = True):
    """Predict a file with every fold model of a run, ensemble, and write the output atomically.

    The output keeps the input's order and its id column; regression writes ``prediction`` (one column per
    target), classification writes the predicted label and one probability column per class.

    Args:
        run_dir: The ``--output-dir`` of ``attnpool train``.
        input_file: CSV, TSV, JSONL or Parquet with the text columns the run was trained on.
        output_file: Where to write (format by extension); written to a temporary name, then renamed.
        batch_size: Rows per forward pass.
        ensemble: ``mean`` or ``score`` (weights proportional to each fold's validation metric).
        device: ``cpu``, ``cuda``...; default: CUDA when available.
        progress: Show a progress bar.

    Returns:
        The written predictions as a ``pandas.DataFrame``.
    """
    from attnpool.training.config import TrainConfig, load_yaml
    from attnpool.training.inputs import load_prediction_inputs, write_table
    from attnpool.training.metrics import primary_metric
    from attnpool.training.recipe import scores_from_logits
    from attnpool.training.runs import CONFIG_FILE

    run_dir = Path(run_dir)
    info, models, tokenizer, fold_metrics = load_run_models(run_dir)
    cfg = TrainConfig.from_dict(load_yaml(run_dir / CONFIG_FILE), where=str(run_dir / CONFIG_FILE))
    frame, encodings = load_prediction_inputs(cfg, info, input_file, tokenizer, log=logger)
    logits = predict_encoded(models, encodings, None, batch_size, tokenizer, device, progress)
    weights = ensemble_weights(fold_metrics, primary_metric(cfg.task)[0], ensemble)
    scores = sum(w * scores_from_logits(cfg.task, lg) for w, lg in zip(weights, logits, strict=True))
    out = frame[[info["id_col"]]].copy() if info.get("id_col") and info["id_col"] in frame else frame.iloc[:, :0].copy()
    if cfg.task == "regression":
        scores = np.asarray(scores).reshape(len(frame), -1)
        names = ["prediction"] if scores.shape[1] == 1 else [f"prediction_{j}" for j in range(scores.shape[1])]
        for j, name in enumerate(names):
            out[name] = scores[:, j]
    else:
        classes = info["classes"]
        if cfg.task == "multilabel":
            out["prediction"] = ["|".join(str(c) for c, on in zip(classes, row >= 0.5, strict=True) if on)
                                 for row in scores]
        else:
            out["prediction"] = [classes[i] for i in np.argmax(scores, axis=1)]
        for j, c in enumerate(classes):
            out[f"prob_{c}"] = scores[:, j]
    atomic_write(output_file, lambda tmp: write_table(out, tmp, like=output_file))
    logger.info("wrote %d predictions of %d fold models (%s ensemble) to %s", len(out), len(models), ensemble,
                output_file)
    return out
