"""The README's commands: every ``attnpool`` line of its bash blocks is one the CLI accepts.

A renamed or removed option, or a synopsis written as ``[--flag]``, breaks a newcomer's copy and paste; this
catches it. Nothing runs: each line is parsed by the real parser, and a ``train`` line also builds and validates its
``TrainConfig`` (the files it names need not exist).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from attnpool.cli import _train_config, build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands(text: str) -> list[list[str]]:
    """The arguments of each ``attnpool`` command in the bash blocks of ``text``.

    Continued lines are joined, comments dropped, and ``a; b && c | d`` splits into its commands.
    """
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            segment: list[str] = []
            for word in [*shlex.split(line, comments=True), ";"]:  # a; b && c | d: each on its own
                if word not in {";", "&&", "||", "|"}:
                    segment.append(word)
                    continue
                while segment and re.fullmatch(r"[A-Z_]+=.*", segment[0]):  # ENV=value attnpool ...
                    segment = segment[1:]
                if segment and Path(segment[0]).name == "attnpool":
                    commands.append(segment[1:])
                segment = []
    return commands


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_readme_commands_are_found():
    assert len(COMMANDS) >= 15
    assert {argv[0] for argv in COMMANDS} >= {"train", "predict", "compare", "explain", "export", "serve", "demo"}


def test_a_synopsis_in_brackets_is_caught():
    text = "```bash\nattnpool predict --run a b --input x.csv [--blend-weights 1 2]\n```\n"
    (argv,) = readme_commands(text)
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


@pytest.mark.parametrize("argv", COMMANDS, ids=shlex.join)
def test_every_readme_command_parses(argv, capsys):
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"README: `attnpool {shlex.join(argv)}` is refused by the CLI: {capsys.readouterr().err.strip()}")
    if argv[0] == "train":
        _train_config(args)
