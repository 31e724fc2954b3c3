"""The ``attnpool`` command line: it parses arguments, calls one function of :mod:`attnpool.api`, prints the result.

The ``train`` and ``compare`` flags are built from :class:`~attnpool.config.TrainConfig`'s field metadata by
:mod:`attnpool.cli_flags`, so they cannot drift from the config.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

from attnpool import api
from attnpool._version import __version__
from attnpool.cli_flags import (
    Parser,
    add_import_option,
    add_train_options,
    help_line,
    import_modules,
    overrides,
    refuse_unknown,
    shown_default,
    unknown_flags,
)
from attnpool.config import TrainConfig, make_config
from attnpool.explanations.svg import fmt_number
from attnpool.precision import PRECISIONS
from attnpool.prediction.onnx_engine import INT8_TOLERANCE, QUANTIZE
from attnpool.training.distributed import shutdown
from attnpool.training.progress import console
from attnpool.training.run_log import resume_hint
from attnpool.training.stop_signals import INTERRUPTED, TERMINATED, Terminated, end_by_signal, sigterm_interrupts

# compare's own --output-dir and --overwrite (the comparison folder); no --resume: it keeps finished runs by itself
_COMPARE_OWN = ("output_dir", "overwrite", "resume")


def _defaults(func: Callable) -> dict[str, Any]:
    """The defaults of ``func``'s parameters: an API function's defaults are those of its command."""
    return {name: p.default for name, p in inspect.signature(func).parameters.items() if p.default is not p.empty}


# The API's defaults are the commands' defaults (read once: the functions may be wrapped or patched later).
_API_DEFAULTS = {name: _defaults(getattr(api, name)) for name in ("compare", "demo", "export", "poolers", "serve")}


def _train_config(args: argparse.Namespace) -> TrainConfig:
    """The config ``attnpool train`` runs with these arguments: ``--config`` with the flags given over it."""
    return make_config(args.config, **overrides(args))


def _cmd_train(args: argparse.Namespace) -> int:
    result = api.train(args.config, **overrides(args))
    return 0 if result.metrics.get("complete") else 3


def _cmd_predict(args: argparse.Namespace) -> int:
    keys = ("batch_size", "ensemble", "device", "chunk_rows", "resume", "precision", "folds", "backend", "quantize",
            "int8_tolerance", "threads", "blend_weights", "context_view")
    api.predict(args.run[0] if len(args.run) == 1 else args.run, args.input, args.output,  # it logs what it wrote
                progress=args.verbosity != "quiet", **{k: getattr(args, k) for k in keys})
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.pooling is not None or args.pooling_options is not None:
        raise ValueError("attnpool compare takes its poolers from --poolings NAME[:key=value,...] "
                         "(e.g. --poolings attention:attn_size=128 mean), not --pooling/--pooling-opt")
    own = {"baseline": args.baseline, "bootstrap": args.bootstrap, "output_dir": args.compare_output_dir,
           "overwrite": args.compare_overwrite}
    if args.seeds is not None:  # one number: a count of seeds, for the API to expand; several: the seeds
        own["seeds"] = args.seeds[0] if len(args.seeds) == 1 else args.seeds
    result = api.compare(args.config, poolings=args.poolings, **{k: v for k, v in own.items() if v is not None},
                         **overrides(args, skip=_COMPARE_OWN))
    print(result.markdown)
    print(f"trained {result.trained} run(s); wrote compare.md, compare.csv, compare.json, compare.png in "
          f"{result.output_dir}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    keys = ("limit", "erasure_k", "text_cols", "label", "max_length", "fold", "seed", "batch_size", "device")
    explanation = api.explain_file(args.run, args.input, args.output, json_path=args.json,  # logs what it wrote
                                   **{k: getattr(args, k) for k in keys})
    aopc = [explanation.erasure.aopc[k] for k in ("top", "random", "bottom")]
    top, shuffled, bottom = (fmt_number(value, 4) for value in aopc)
    missing = " (–: no erasure test ran for it)" if "–" in (top, shuffled, bottom) else ""
    print(f"erasure AOPC of {len(explanation.examples)} examples: most-weighted {top}, random {shuffled}, "
          f"least-weighted {bottom}{missing}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    result = api.export(args.model, args.output, format=args.format, fold=args.fold, with_weights=args.with_weights,
                        opset=args.opset, verify=not args.no_verify)
    diff = result.max_abs_diff
    checked = "not verified" if diff is None else f"max |onnxruntime - torch| = {diff:.2e}"
    tokenizer = ", tokenizer beside it" if result.tokenizer_saved else ", no tokenizer found to save"
    print(f"wrote {result.path} (outputs: {', '.join(result.output_names)}; {checked}{tokenizer})")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    lists = ("cors_origins", "cors_headers", "allowed_hosts")  # None when not given
    options = {k: getattr(args, k) or () if k in lists else getattr(args, k) for k in _API_DEFAULTS["serve"]}
    try:
        summary = api.serve(args.run, **options)
    except ImportError as err:  # the optional extra is missing: one line, like the other errors
        print(f"attnpool serve: error: {err}", file=sys.stderr)
        return 2
    print(f"served {summary.requests} requests ({summary.rows} rows in {summary.batches} batches) on {summary.url}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    api.demo(output_dir=args.output_dir, seconds=args.seconds, model=args.model)
    return 0


def _cmd_poolers(args: argparse.Namespace) -> int:
    rows = api.poolers(args.hidden_size)
    header = ("pooler", "parameters", "output_dim", "perm-invariant", "token weights", "note")
    cells = [(r["pooler"], "–" if r["parameters"] is None else f"{r['parameters']:,}", str(r["output_dim"] or "–"),
              "yes" if r["permutation_invariant"] else "no", "yes" if r["token_weights"] else "no", r.get("note") or "")
             for r in rows]
    shown = len(header) if any(r[-1] for r in cells) else len(header) - 1  # the note column only when one says why
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(shown)]
    print(f"attnpool {__version__}: poolers at hidden_size={args.hidden_size} (default options)")
    for row in [header, *cells]:  # the name and the note left-aligned, the numbers and properties right-aligned
        middle = (cell.rjust(w) for cell, w in zip(row[1:5], widths[1:5], strict=True))
        print("  ".join([row[0].ljust(widths[0]), *middle, *row[5:shown]]).rstrip())
    return 0


def _arg(parser: Any, flag: str, text: str, *, default: Any = None, shown: str | None = None, **kwargs: Any) -> None:
    """An option whose help line ends with its default (``shown``: how to say it, when not the value itself)."""
    if kwargs.get("required"):
        parser.add_argument(flag, help=f"{text} (required)", **kwargs)
    else:
        parser.add_argument(flag, default=default, help=help_line(text, shown or shown_default(default)), **kwargs)


def _add_predict(commands: Any) -> None:
    predict = commands.add_parser("predict", help="predict a file with a run's fold models, or blend several runs")
    _arg(predict, "--run", "the --output-dir of attnpool train; several are blended", required=True, nargs="+")
    _arg(predict, "--input", "CSV, TSV, JSONL or Parquet to predict", required=True)
    _arg(predict, "--output", "the file to write (format by extension; not a folder, not in a --run)", required=True)
    _arg(predict, "--batch-size", "rows per forward pass", default=128, type=int)
    _arg(predict, "--device", "cpu, cuda...", shown="cuda when available")
    _arg(predict, "--chunk-rows", "rows read and predicted at a time: bounds memory", default=100_000, type=int)
    _arg(predict, "--resume", "continue an interrupted prediction to the same --output, keeping its finished chunks",
         default=False, action="store_true")
    _add_engine(predict, "the first rows")
    predict.set_defaults(func=_cmd_predict)


def _add_engine(parser: Any, calibration: str) -> None:
    """Which models predict and serve run, and how: folds, ensemble, precision, backend, quantization, threads..."""
    _arg(parser, "--folds", "which trained folds to ensemble", shown="every trained fold", nargs="+", type=int,
         metavar="K")
    _arg(parser, "--ensemble", "mean of the folds, or weighted by each fold's validation score", default="mean",
         choices=["mean", "score"])
    _arg(parser, "--precision", "autocast dtype: auto = bf16 on a GPU with native bf16 (compute "
         "capability 8.0+) or a CPU with it (AMX, AVX512-BF16); else fp32", default="auto", choices=PRECISIONS)
    _arg(parser, "--backend", "torch, or onnx: ONNX Runtime on each fold's graph (exported once into the run)",
         default="torch", choices=["torch", "onnx"])
    _arg(parser, "--quantize", f"with --backend onnx: int8 dynamic quantization, checked against float32 on "
         f"{calibration} and refused with the figure beyond --int8-tolerance", default="none", choices=QUANTIZE)
    _arg(parser, "--int8-tolerance", "largest |int8 - float32| difference of a score accepted",
         default=INT8_TOLERANCE, type=float)
    _arg(parser, "--threads", "CPU threads of the model", shown="OMP_NUM_THREADS or MKL_NUM_THREADS where set, else "
         "one per physical core", type=int)
    _arg(parser, "--blend-weights", "several --run: a weight per run", shown="equal", nargs="+", type=float)
    _arg(parser, "--context-view", "with --group-context: each row's context from the other rows (with), none "
         "(without), or both views' mean (both)", default="with", choices=["with", "without", "both"])


def _add_compare(commands: Any) -> None:
    api_default, compare = _API_DEFAULTS["compare"], commands.add_parser(
        "compare", help="train several poolers over paired seeds and test which beats the baseline",
        description="Train every pooler of --poolings once per seed with the same data, folds, data order and "
        "recipe (attnpool train options), then report each pooler's score with a 95% CI, its difference to the "
        "baseline with an exact sign-flip test over seeds and a paired bootstrap over examples (Holm-corrected), "
        "and its cost. Finished runs in --output-dir are kept: rerunning resumes, adding a pooler trains only "
        "that one.")
    group = compare.add_argument_group("compare options", "the comparison (the recipe's options follow)")
    _arg(group, "--poolings", "the poolers to compare, e.g. attention:attn_size=128 gem max", required=True,
         nargs="+", metavar="NAME[:key=value,...]")
    # "not given" (None) internally, so that the API's defaults apply; --help states them
    _arg(group, "--seeds", "one number N (at most 20): N seeds from --seed on; several numbers: those seeds",
         shown=shown_default(api_default["seeds"]), nargs="+", type=int, metavar="SEED")
    _arg(group, "--baseline", "the pooler the others are tested against", shown=shown_default(api_default["baseline"]))
    _arg(group, "--bootstrap", "paired bootstrap replicates", shown=shown_default(api_default["bootstrap"]), type=int)
    _arg(group, "--output-dir", "the comparison folder", shown=shown_default(api_default["output_dir"]),
         dest="compare_output_dir", metavar="OUTPUT_DIR")
    _arg(group, "--overwrite", "delete an existing comparison in --output-dir first (not one holding its inputs)",
         shown=shown_default(api_default["overwrite"]), dest="compare_overwrite", action="store_true")
    add_train_options(compare, skip=_COMPARE_OWN, hide=("pooling", "pooling_options"))  # --poolings instead
    compare.set_defaults(func=_cmd_compare)


def _add_explain(commands: Any) -> None:
    explain = commands.add_parser(
        "explain", help="show which tokens the pooler weighs, and test whether those weights are faithful",
        description="Explain predictions by the pooling weights (merged to words) and test their faithfulness by "
        "erasure; writes one self-contained HTML report and a JSON file.")
    _arg(explain, "--run", "the --output-dir of attnpool train (or its fold_K folder: that fold), or a model folder "
         "saved with save_pretrained", required=True, metavar="RUN_DIR_OR_MODEL")
    _arg(explain, "--input", "CSV, TSV, JSONL or Parquet with the texts (and labels)", required=True)
    _arg(explain, "--output", "the HTML report (not in the --run)", required=True)
    _arg(explain, "--json", "the JSON file", shown="the HTML path with .json")
    _arg(explain, "--limit", "explain only the first N rows", shown="every row", type=int)
    _arg(explain, "--erasure-k", "remove up to K tokens in the erasure test", default=5, type=int)
    _arg(explain, "--text-cols", "text column(s) of a model folder (a run uses its own)", shown="the run's", nargs="+")
    _arg(explain, "--label", "label column", shown="the run's, else 'label' if present")
    _arg(explain, "--max-length", "truncation", shown="the run's, else 128", type=int)
    _arg(explain, "--fold", "which fold's model of a run", shown="its first trained fold", type=int)
    _arg(explain, "--seed", "seed of the random erasure", default=0, type=int)
    _arg(explain, "--batch-size", "rows per forward pass", default=32, type=int)
    _arg(explain, "--device", "cpu, cuda...", shown="cuda when available")
    explain.set_defaults(func=_cmd_explain)


def _add_export(commands: Any) -> None:
    export = commands.add_parser(
        "export", help="export a trained model (encoder, pooler, head) to one ONNX graph for serving",
        description="Export encoder, pooler and head as one ONNX graph with dynamic batch and sequence axes, check it "
        "against PyTorch in onnxruntime, and save the tokenizer beside it (see docs/serving.md).")
    _arg(export, "--model", "a model folder saved with save_pretrained, or the --output-dir of attnpool train",
         required=True, metavar="MODEL_OR_RUN_DIR")
    _arg(export, "--fold", "which fold's model of a run (a graph holds one)", shown="its first trained fold", type=int)
    _arg(export, "--format", "the serving format", default=_API_DEFAULTS["export"]["format"], choices=["onnx"])
    _arg(export, "--output", "the .onnx file; the tokenizer files go into its folder", required=True)
    _arg(export, "--with-weights", "also output the pooler's token weights (pooling_weights)", default=False,
         action="store_true")
    _arg(export, "--opset", "ONNX opset, from 7 to the newest the installed onnx knows", shown="the exporter's, 18 or "
         "newer", type=int)
    _arg(export, "--no-verify", "skip the onnxruntime vs PyTorch check (difference <= 1e-4 + 1e-5 x |value|)",
         shown="verify", action="store_true")
    export.set_defaults(func=_cmd_export)


def _add_serve(commands: Any) -> None:
    api_default = _API_DEFAULTS["serve"]
    serve = commands.add_parser("serve", help="serve a run (every fold, ensembled as predict does), a blend of runs "
                                "or a model over HTTP, with a web page", description="POST /predict answers rows as "
                                "attnpool predict does, batching concurrent requests; GET / is a page shading the "
                                "words by their pooling weight; /health, /info, /metrics, /openapi.json. Stops on "
                                "SIGTERM or Ctrl+C. Needs pip install 'attnpool[serve]'.")
    _arg(serve, "--run", "the --output-dir of attnpool train (several are blended), or a model folder saved with "
         "save_pretrained", required=True, nargs="+", metavar="RUN_DIR_OR_MODEL")
    _arg(serve, "--host", "the address to listen on (127.0.0.1: this machine only)", default=api_default["host"])
    for flag, text, kind in (("--port", "the port (0: any free port, logged)", int),
                             ("--max-batch", "rows per forward pass at most: concurrent requests are batched", int),
                             ("--max-wait-ms", "how long a request waits for others to join its batch", float),
                             ("--max-rows", "rows per request at most", int),
                             ("--max-body-bytes", "request bodies over this size are refused (413)", int),
                             ("--max-in-flight", "requests handled at once (/health, /metrics aside); more are "
                              "answered 503 with Retry-After", int),
                             ("--body-timeout", "seconds a request's whole body may take to arrive; slower ones "
                              "are answered 408", float)):
        _arg(serve, flag, text, default=api_default[flag[2:].replace("-", "_")], type=kind)
    _arg(serve, "--api-key-env", "name of an environment variable holding the API key every request but /health "
         "must send (Authorization: Bearer KEY)", shown="no key", metavar="VAR")
    _arg(serve, "--allowed-host", "with the default --host: a Host name answered besides localhost, the public "
         "name a reverse proxy on this machine passes on (repeatable)", shown="none", action="extend", nargs="+",
         dest="allowed_hosts", metavar="NAME")
    _arg(serve, "--cors-origin", "web origins allowed to call the API from a browser", shown="none: CORS off",
         action="extend", nargs="+", dest="cors_origins", metavar="ORIGIN")
    _arg(serve, "--cors-header", "a request header such pages may send besides Authorization, Content-Type, "
         "X-API-Key (repeatable)", shown="none", action="extend", nargs="+", dest="cors_headers", metavar="NAME")
    _arg(serve, "--max-length", "truncation, for a model folder (a run uses its own)",
         shown="128, or what the encoder reads if less", type=int)
    _arg(serve, "--device", "cpu, cuda...", shown="cuda when available")
    _add_engine(serve, "--calibration-file")
    _arg(serve, "--calibration-file", "rows to check int8 on (the first 128)", shown="the run's training file")
    serve.set_defaults(func=_cmd_serve)


def _add_demo(commands: Any) -> None:
    api_default = _API_DEFAULTS["demo"]
    demo = commands.add_parser("demo", help="mean vs attention pooling on a generated key-token task (no download)")
    _arg(demo, "--output-dir", "new or empty folder or an earlier demo's (replaced)", default=api_default["output_dir"])
    _arg(demo, "--seconds", "sizes the training set: SECONDS / 0.9 steps of 16 texts a pooler (10 to 150, or a note)",
         default=api_default["seconds"], type=float)
    _arg(demo, "--model", "encoder", default=api_default["model"], shown="the bundled all-MiniLM-L6-v2")
    demo.set_defaults(func=_cmd_demo)


# Commands that write a train.log (what --quiet leaves out of the terminal is there).
_LOGGED_COMMANDS = ("train", "compare")


def _add_verbosity(parser: argparse.ArgumentParser, default: Any, command: str | None = None) -> None:
    """``--quiet`` / ``--verbose``, before the command or after it (there ``default`` is SUPPRESS: not given)."""
    kept = {None: " (train and compare: their train.log keeps everything)",
            **dict.fromkeys(_LOGGED_COMMANDS, " (train.log keeps everything)")}.get(command, "")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const="quiet", default=default,
                       help=help_line(f"print only the summary, warnings and errors{kept}", "off"))
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const="verbose", default=default,
                       help=help_line("also print the Trainer's bars and log dicts and the libraries' messages", "off"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnpool`` command."""
    parser = Parser(prog="attnpool", description="Learned attention pooling for fine-tuning transformer encoders. "
                    "`attnpool COMMAND --help` shows a command's options.")
    parser.add_argument("--version", action="version", version=f"attnpool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    poolers = commands.add_parser("poolers", help="list the available poolers with their parameter counts")
    _arg(poolers, "--hidden-size", "encoder hidden size (a pooler not built at it: the reason)",
         default=_API_DEFAULTS["poolers"]["hidden_size"], type=int)
    poolers.set_defaults(func=_cmd_poolers)

    train = commands.add_parser("train", help="fine-tune an encoder + pooler by k-fold cross-validation",
                                description="Fine-tune an encoder with an attnpool pooler: k folds (or a "
                                "validation file), best checkpoints, out-of-fold predictions, metrics, plot. Every "
                                "option is also a key of --config FILE.yaml; flags given override the file.")
    add_train_options(train)
    train.set_defaults(func=_cmd_train)

    _add_predict(commands)
    _add_compare(commands)
    _add_explain(commands)
    _add_export(commands)
    _add_serve(commands)
    _add_demo(commands)
    _add_verbosity(parser, "normal")
    add_import_option(parser, "imports")
    for name, command in commands.choices.items():  # every command, after its name too: attnpool train ... --quiet
        _add_verbosity(command, argparse.SUPPRESS, name)
        add_import_option(command, "imports_after")
    return parser


def _resume_hint(args: argparse.Namespace) -> str:
    """For an interrupted ``train``: how to go on from its last checkpoint, or to start again (no run recorded yet)."""
    if args.command != "train":
        return ""
    try:
        output_dir = _train_config(args).output_dir
    except Exception:  # noqa: BLE001 - a config that cannot be read now: no hint rather than a second error
        return ""
    return f"; {resume_hint(output_dir)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attnpool`` console script: errors in the input print one clear line, exit 2.

    Ctrl-C prints one line (for ``train``, the command that resumes the run) and returns :data:`INTERRUPTED` (130).
    Under :func:`run` (the console script), SIGTERM (a preemption) stops the command the same way (``train`` logs it
    and releases its run) and it returns :data:`TERMINATED` (143); called from Python, SIGTERM does what the caller
    set it to do.
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    command, misspelt = unknown_flags(parser, argv)
    if misspelt:  # before parsing: a misspelt required flag would be reported as missing, the typo never named
        refuse_unknown(parser, command, misspelt)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would print the top-level usage; the command's, with the closest flag, says more
        refuse_unknown(parser, args.command, unknown)
    try:
        import_modules([*args.imports, *args.imports_after])  # the user's poolers, registered before the command
        with console(args.verbosity):  # log lines on stderr at --quiet / --verbose's level; no library bars
            return args.func(args)
    except (ValueError, FileNotFoundError, OSError, ImportError) as err:  # ImportError: an optional extra missing
        print(f"attnpool {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: one line, not the traceback of wherever it landed
        stopped = isinstance(err, Terminated)
        print(f"attnpool {args.command}: {'terminated (SIGTERM)' if stopped else 'interrupted'}{_resume_hint(args)}",
              file=sys.stderr)
        return TERMINATED if stopped else INTERRUPTED
    finally:
        shutdown()  # under torchrun: leave the process group before the interpreter exits


def run() -> None:
    """The console script and ``python -m attnpool``: :func:`main`, ended by SIGINT after Ctrl-C (SIGTERM after it).

    SIGTERM raises :class:`~attnpool.training.stop_signals.Terminated` meanwhile, so that it stops a command as
    Ctrl-C does (:func:`~attnpool.training.stop_signals.sigterm_interrupts`).

    As an uncaught interrupt ends Python: a calling shell loop stops too (a plain exit 130 let it go on).
    """
    with sigterm_interrupts():  # SIGTERM stops the command as Ctrl-C does (not for callers of main: their process)
        code = main()
    end_by_signal(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
