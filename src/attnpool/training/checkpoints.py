"""The checkpoints of a fold: the newest one written to the end, and its Trainer state."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from attnpool.runs.files import atomic_write_json
from attnpool.training.ema import EMA_FILE

logger = logging.getLogger("attnpool.train")


def numbered_checkpoints(folder: Path) -> list[Path]:
    """``folder``'s checkpoints, the ``checkpoint-N`` folders the Trainer writes, the newest (largest N) first."""
    found = sorted(((int(m.group(1)), p) for p in (folder.iterdir() if folder.is_dir() else ())
                    if p.is_dir() and (m := re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", p.name))), reverse=True)
    return [path for _, path in found]


def last_complete_checkpoint(folder: Path, ema: bool = False) -> str | None:
    """The newest checkpoint in ``folder`` that was written to the end, or ``None``.

    The Trainer writes a checkpoint's files in place and its ``trainer_state.json`` last (the weight average's
    ``ema.safetensors`` with the weights, before it; checkpoints of earlier versions got it after): a run killed
    in the middle of a save leaves a folder without them, which the Trainer cannot resume from; a machine that lost
    power may leave ``trainer_state.json`` cut short. Such a folder, newer than the one returned, is removed, with a
    warning: the Trainer's rotation keeps the checkpoints of the largest steps, so it would outlive the new ones
    (each deleted once saved) until training reached its step again. One whose state is whole but lacks the weight
    average (written without ``ema``) is only passed over. Call it on one process (``on_main``) under torchrun. The
    best checkpoint the state names is pointed at ``folder``'s of that name, whatever path was recorded (a moved or
    copied run's old one, a relative one), or cleared when ``folder`` has none.
    """
    needed = [TRAINER_STATE_NAME, *([EMA_FILE] if ema else [])]
    torn, newest = [], None
    for checkpoint in numbered_checkpoints(folder):
        missing = [name for name in needed if not (checkpoint / name).is_file()]
        state = None if missing else read_state(checkpoint / TRAINER_STATE_NAME)
        if state is not None:
            _relocate_best(checkpoint, state)
            newest = checkpoint
            break
        what = f"no {' or '.join(missing)}" if missing else f"its {TRAINER_STATE_NAME} is cut short"
        torn.append((checkpoint, what, TRAINER_STATE_NAME in missing or not missing))  # no whole state: removed
    then = f"resuming from {newest.name}" if newest else "no complete checkpoint: training starts again"
    for checkpoint, what, stateless in torn:  # no state, or one cut short: the Trainer never resumes from it
        if stateless:
            shutil.rmtree(checkpoint, ignore_errors=True)
        logger.warning("%s was not written to the end (%s: the run stopped while saving it) and cannot be resumed "
                       "from: %s; %s", checkpoint, what, "removed" if stateless else "passed over", then)
    return str(newest) if newest else None


def resume_point(folder: Path, ema: bool = False) -> str | bool | None:
    """What ``Trainer.train(resume_from_checkpoint=...)`` resumes from, for ``True``: a checkpoint, or step 0.

    The newest complete checkpoint; ``None`` (from step 0) where there were only torn ones (removed:
    :func:`last_complete_checkpoint`); ``True`` where there was none, for the Trainer's own error.
    """
    had = numbered_checkpoints(folder)
    return last_complete_checkpoint(folder, ema) or (None if had else True)


def read_state(path: Path) -> dict | None:
    """A checkpoint's ``trainer_state.json``, or ``None`` when it is missing, unreadable, cut short or not an object."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return state if isinstance(state, dict) else None


def _relocate_best(checkpoint: Path, state: dict) -> None:
    """Re-point the best checkpoint at this run's of that name (a copied run's or a relative path), or clear it."""
    best = state.get("best_model_checkpoint")
    here = checkpoint.parent.absolute() / Path(best).name if best else None
    if here is None or best == str(here):
        return
    if not here.is_dir():  # the Trainer then keeps the last weights unless a later evaluation does better
        logger.warning("%s names the best checkpoint %s, not in %s; ignoring it", checkpoint, best, here.parent)
    state["best_model_checkpoint"] = str(here) if here.is_dir() else None
    atomic_write_json(checkpoint / TRAINER_STATE_NAME, state)
