"""The ``attnpool`` command line: a thin layer that parses arguments and calls the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnpool`` command."""
    parser = argparse.ArgumentParser(prog="attnpool", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attnpool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    poolers = commands.add_parser("poolers", help="list the available poolers with their parameter counts")
    poolers.add_argument("--hidden-size", type=int, default=1024, help="encoder hidden size (default: 1024)")
    poolers.set_defaults(func=_cmd_poolers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attnpool`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
