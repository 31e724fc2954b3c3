"""The ``attnpool`` command line: a thin layer that parses arguments and calls the library."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnpool import __version__
from attnpool.pooling import available_poolers, build_pooler


def _cmd_poolers(args: argparse.Namespace) -> int:
    """Print every registered pooler with its parameter count at the given hidden size."""
    rows = []
    for name in available_poolers():
        pooler = build_pooler(name, args.hidden_size)
        params = sum(p.numel() for p in pooler.parameters())
        weights = "yes" if pooler.has_weights else "no"
        invariant = "yes" if pooler.permutation_invariant else "no"
        rows.append((name, f"{params:,}", str(pooler.output_dim), invariant, weights))
    header = ("pooler", "parameters", "output_dim", "perm-invariant", "token weights")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(f"attnpool {__version__}: poolers at hidden_size={args.hidden_size} (default options)")
    for row in [header, *rows]:
        first, *rest = zip(row, widths, strict=True)
        print("  ".join([first[0].ljust(first[1]), *(cell.rjust(w) for cell, w in rest)]))
    return 0


def _parse_value(text: str) -> Any:
    """``--pooling-opt attn_size=128``: JSON values (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    """One flag per ``TrainConfig`` field (``text_cols`` -> ``--text-cols``), all defaulting to 'not given'."""
    from attnpool.training.config import TrainConfig

    helps = {
        "train_file": "training data: CSV, TSV, JSONL or Parquet (by extension)",
        "valid_file": "a fixed validation file instead of --folds",
        "text_cols": "text column(s): one, two (a text pair) or more (joined by the tokenizer's separator)",
        "template": 'text template instead of --text-cols, e.g. "{anchor} [SEP] {target} [SEP] {context_text}"',
        "label": "target column", "task": "regression | binary | multiclass | multilabel",
        "preset": "pppm: the PPPM task from --data-dir", "folds": "k of k-fold cross-validation",
        "group_col": "grouped folds: rows sharing this column's value stay in one fold",
        "model": "encoder: hub name or local folder (default: the offline all-MiniLM-L6-v2)",
        "pooling": f"pooler: {', '.join(available_poolers())}; or several joined by + (attention+mean)",
        "lr": "encoder learning rate",
        "head_lr": "head learning rate", "pooler_lr": "pooler learning rate (default: --head-lr)",
        "llrd": "layer-wise learning-rate decay factor",
        "precision": "auto | fp32 | bf16 | fp16", "eval_steps": "evaluate every N steps (default: each epoch)",
        "resume": "continue an interrupted run in --output-dir", "overwrite": "replace an existing run",
        "limit": "train on a seeded random subset of N rows", "only_folds": "train only these fold ids",
    }
    for f in dataclasses.fields(TrainConfig):
        if f.name == "pooling_options":
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = str(f.type)
        if kind == "bool":
            parser.add_argument(flag, action="store_true", default=None, help=helps.get(f.name))
        elif "list" in kind:
            element = int if "int" in kind.split("[")[1] else str
            if f.name == "pooling_layers":
                parser.add_argument(flag, nargs="+", default=None, help="last | all | layer indices")
            else:
                parser.add_argument(flag, nargs="+", type=element, default=None, help=helps.get(f.name))
        else:
            element = int if kind.startswith("int") else float if kind.startswith("float") else str
            parser.add_argument(flag, type=element, default=None, help=helps.get(f.name))
    parser.add_argument("--pooling-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="pooler option, repeatable (e.g. --pooling-opt attn_size=128)")
    parser.add_argument("--config", help="YAML file of options; flags override it")


def _train_config(args: argparse.Namespace):
    from attnpool.training.config import TrainConfig, load_yaml

    values: dict[str, Any] = load_yaml(args.config) if args.config else {}
    for f in dataclasses.fields(TrainConfig):
        given = getattr(args, f.name, None)
        if given is not None:
            values[f.name] = given
    layers = values.get("pooling_layers")
    if isinstance(layers, list):
        values["pooling_layers"] = layers[0] if layers in (["last"], ["all"]) else [int(x) for x in layers]
    options = dict(values.get("pooling_options") or {})
    for item in args.pooling_opt:
        if "=" not in item:
            raise ValueError(f"--pooling-opt expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        options[key.strip()] = _parse_value(value)
    values["pooling_options"] = options
    return TrainConfig.from_dict(values, where=args.config or "command line")


def _cmd_train(args: argparse.Namespace) -> int:
    from attnpool.training import train

    result = train(_train_config(args))
    return 0 if result.metrics.get("complete") else 3


def _cmd_predict(args: argparse.Namespace) -> int:
    from attnpool.training import predict

    summary = predict(args.run, args.input, args.output, batch_size=args.batch_size, ensemble=args.ensemble,
                      device=args.device, chunk_rows=args.chunk_rows, resume=args.resume, precision=args.precision)
    print(f"wrote {summary.rows} predictions to {args.output}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from attnpool.compare import compare

    if args.pooling is not None or args.pooling_opt:
        raise ValueError("attnpool compare takes its poolers from --poolings NAME[:key=value,...] "
                         "(e.g. --poolings attention:attn_size=128 mean), not --pooling/--pooling-opt")
    cfg = _train_config(args)
    seeds = list(range(cfg.seed, cfg.seed + args.seeds[0])) if len(args.seeds) == 1 else args.seeds
    if len(args.seeds) == 1 and args.seeds[0] < 1:
        raise ValueError(f"--seeds: a single value is a number of seeds and must be >= 1, got {args.seeds[0]}")
    result = compare(cfg, args.poolings, seeds, baseline=args.baseline, output_dir=args.output_dir or "runs/compare",
                     bootstrap=args.bootstrap, overwrite=bool(args.overwrite))
    print(result.markdown)
    print(f"trained {result.trained} run(s); wrote compare.md, compare.csv, compare.json, compare.png in "
          f"{result.output_dir}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from attnpool.explain import explain_file

    explanation = explain_file(args.run, args.input, args.output, json_path=args.json, limit=args.limit,
                               erasure_k=args.erasure_k, text_cols=args.text_cols, label=args.label,
                               max_length=args.max_length, fold=args.fold, seed=args.seed,
                               batch_size=args.batch_size, device=args.device)
    aopc = explanation.erasure.aopc
    print(f"explained {len(explanation.examples)} examples; erasure AOPC: most-weighted {aopc['top'] or 0:.4g}, "
          f"random {aopc['random'] or 0:.4g}, least-weighted {aopc['bottom'] or 0:.4g}")
    print(f"wrote {args.output} and {args.json or Path(args.output).with_suffix('.json')}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from attnpool.export import export_onnx

    result = export_onnx(args.model, args.output, fold=args.fold, with_weights=args.with_weights, opset=args.opset,
                         verify=not args.no_verify)
    diff = result.max_abs_diff
    checked = "not verified" if diff is None else f"max |onnxruntime - torch| = {diff:.2e}"
    tokenizer = ", tokenizer beside it" if result.tokenizer_saved else ", no tokenizer found to save"
    print(f"wrote {result.path} (outputs: {', '.join(result.output_names)}; {checked}{tokenizer})")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from attnpool.training.demo import run_demo

    run_demo(output_dir=args.output_dir, seconds=args.seconds, model=args.model)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnpool`` command."""
    parser = argparse.ArgumentParser(prog="attnpool", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attnpool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    poolers = commands.add_parser("poolers", help="list the available poolers with their parameter counts")
    poolers.add_argument("--hidden-size", type=int, default=1024, help="encoder hidden size (default: 1024)")
    poolers.set_defaults(func=_cmd_poolers)

    train = commands.add_parser("train", help="fine-tune an encoder + pooler by k-fold cross-validation",
                                description="Fine-tune an encoder with an attnpool pooler: k folds (or a "
                                "validation file), best checkpoints, out-of-fold predictions, metrics, plot.")
    _add_train_options(train)
    train.set_defaults(func=_cmd_train)

    predict = commands.add_parser("predict", help="predict a file with the fold models of a run (ensembled)")
    predict.add_argument("--run", required=True, help="the --output-dir of attnpool train")
    predict.add_argument("--input", required=True, help="CSV, TSV, JSONL or Parquet to predict")
    predict.add_argument("--output", required=True, help="where to write the predictions (format by extension)")
    predict.add_argument("--batch-size", type=int, default=128)
    predict.add_argument("--ensemble", choices=["mean", "score"], default="mean",
                         help="mean of the folds, or weighted by each fold's validation score")
    predict.add_argument("--device", default=None, help="cpu, cuda... (default: cuda when available)")
    predict.add_argument("--chunk-rows", type=int, default=100_000,
                         help="rows read and predicted at a time: bounds memory (default: 100000)")
    predict.add_argument("--resume", action="store_true",
                         help="continue an interrupted prediction to the same --output, keeping its finished chunks")
    predict.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                         help="autocast dtype: auto = bf16 on a GPU that has it, else fp32 (default: auto)")
    predict.set_defaults(func=_cmd_predict)

    compare = commands.add_parser(
        "compare", help="train several poolers over paired seeds and test which beats the baseline",
        description="Train every pooler of --poolings once per seed with the same data, folds, data order and "
        "recipe (attnpool train options), then report each pooler's score with a 95%% CI, its difference to the "
        "baseline with a paired t-test over seeds and a paired bootstrap over examples (Holm-corrected), and its "
        "cost. Finished runs in --output-dir are kept: rerunning resumes, adding a pooler trains only that one.")
    compare.add_argument("--poolings", nargs="+", required=True, metavar="NAME[:key=value,...]",
                         help="the poolers to compare, e.g. attention:attn_size=128 gem max")
    compare.add_argument("--seeds", nargs="+", type=int, default=[3],
                         help="one number N: N seeds from --seed on (default: 3); several numbers: those seeds")
    compare.add_argument("--baseline", default="mean", help="the pooler the others are tested against (default: mean)")
    compare.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap replicates (default: 1000)")
    _add_train_options(compare)
    compare.set_defaults(func=_cmd_compare)

    explain = commands.add_parser(
        "explain", help="show which tokens the pooler weighs, and test whether those weights are faithful",
        description="Explain predictions by the pooling weights (merged to words) and test their faithfulness by "
        "erasure; writes one self-contained HTML report and a JSON file.")
    explain.add_argument("--run", required=True, metavar="RUN_DIR_OR_MODEL",
                         help="the --output-dir of attnpool train, or a model folder saved with save_pretrained")
    explain.add_argument("--input", required=True, help="CSV, TSV, JSONL or Parquet with the texts (and labels)")
    explain.add_argument("--output", required=True, help="the HTML report")
    explain.add_argument("--json", default=None, help="the JSON file (default: the HTML path with .json)")
    explain.add_argument("--limit", type=int, default=None, help="explain only the first N rows")
    explain.add_argument("--erasure-k", type=int, default=5, help="remove up to K tokens in the erasure test")
    explain.add_argument("--text-cols", nargs="+", default=None,
                         help="text column(s), for a model folder (a run uses the columns it was trained on)")
    explain.add_argument("--label", default=None, help="label column (default: the run's; else 'label' if present)")
    explain.add_argument("--max-length", type=int, default=None, help="truncation (default: the run's, else 128)")
    explain.add_argument("--fold", type=int, default=None, help="which fold's model of a run (default: the first)")
    explain.add_argument("--seed", type=int, default=0, help="seed of the random erasure")
    explain.add_argument("--batch-size", type=int, default=32)
    explain.add_argument("--device", default=None, help="cpu, cuda... (default: cuda when available)")
    explain.set_defaults(func=_cmd_explain)

    export = commands.add_parser(
        "export", help="export a trained model (encoder, pooler, head) to one ONNX graph for serving",
        description="Export encoder, pooler and head as one ONNX graph with dynamic batch and sequence axes, check it "
        "against PyTorch in onnxruntime, and save the tokenizer beside it (see docs/serving.md).")
    export.add_argument("--model", required=True, metavar="MODEL_OR_RUN_DIR",
                        help="a model folder saved with save_pretrained, or the --output-dir of attnpool train")
    export.add_argument("--fold", type=int, default=None, help="which fold's model of a run (needed if it has several)")
    export.add_argument("--format", choices=["onnx"], default="onnx", help="export format (default: onnx)")
    export.add_argument("--output", required=True, help="the .onnx file; the tokenizer files go into its folder")
    export.add_argument("--with-weights", action="store_true",
                        help="also output the pooler's token weights (pooling_weights)")
    export.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's, 18 or newer)")
    export.add_argument("--no-verify", action="store_true",
                        help="skip the onnxruntime vs PyTorch check (max abs difference <= 1e-4)")
    export.set_defaults(func=_cmd_export)

    demo = commands.add_parser("demo", help="mean vs attention pooling on a generated key-token task (no download)")
    demo.add_argument("--output-dir", default="runs/demo")
    demo.add_argument("--seconds", type=float, default=45.0, help="training budget per pooler (default: 45)")
    demo.add_argument("--model", default=None, help="encoder (default: the bundled all-MiniLM-L6-v2)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attnpool`` console script: errors in the input print one clear line, exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"attnpool {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
