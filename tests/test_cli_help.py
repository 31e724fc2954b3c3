"""``--help`` shows a switch pair as the plain pair it is, whatever word the switch also takes (``none``)."""

from __future__ import annotations

import argparse
import re

import pytest

from attnpool.cli import _train_config, build_parser, main


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def _pairs(command: str) -> list[tuple[str, str]]:
    """Every ``--x`` / ``--no-x`` pair of the command's shown options."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(a.option_strings[0], a.option_strings[1]) for a in commands.choices[command]._actions
            if len(a.option_strings) == 2 and a.option_strings[1] == "--no-" + a.option_strings[0][2:]
            and a.help != argparse.SUPPRESS]


@pytest.mark.parametrize("command", ["train", "compare"])
def test_every_switch_pair_shows_without_a_word_in_usage_and_options(command, capsys):
    """``--freeze-word-embeddings [none], --no-freeze-word-embeddings [none]`` read as if both took a word."""
    raw = _help(command, capsys)
    usage = " ".join(raw.split("\n\n")[0].split())
    pairs = _pairs(command)
    assert ("--freeze-word-embeddings", "--no-freeze-word-embeddings") in pairs
    for on, off in pairs:
        assert f"[{on} | {off}]" in usage, on
        # option lines (indented 2), not a help text's mention wrapped to a line's start (--freeze-layers')
        lines = [line.strip() for line in raw.splitlines() if re.match(rf"  {on}\b", line)]
        assert lines == [f"{on}, {off}"], lines  # listed once, without [none]
    assert "[none]" not in raw


def test_the_none_reset_of_a_switch_is_in_its_help_text(capsys):
    text = " ".join(_help("train", capsys).split())
    assert ("--freeze-word-embeddings, --no-freeze-word-embeddings freeze the encoder's input word embeddings" in text)
    assert "along their gradient; none after the flag resets a config file's value)" in text


def test_a_switch_pair_parses_as_before(capsys):
    def parsed(*flags):
        return _train_config(build_parser().parse_args(["train", "--train-file", "a.csv", *flags]))

    assert parsed().freeze_word_embeddings is None
    assert parsed("--freeze-word-embeddings").freeze_word_embeddings is True
    assert parsed("--no-freeze-word-embeddings").freeze_word_embeddings is False
    assert parsed("--freeze-word-embeddings", "none").freeze_word_embeddings is None
    assert parsed("--freeze-word-embeddings", "NONE", "--epochs", "2").epochs == 2
    for flags in (["--no-freeze-word-embeddings", "none"], ["--freeze-word-embeddings", "maybe"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(["train", *flags])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "the switch takes no value, except none after --freeze-word-embeddings" in err
        assert "[--freeze-word-embeddings | --no-freeze-word-embeddings]" in " ".join(err.split())  # its usage too


def test_the_help_of_id_col_says_that_none_means_no_id_column(capsys):
    """``--id-col none`` gives no id column, where its help said none reset it to its default (``id``)."""
    text = " ".join(_help("train", capsys).split())
    assert ("--id-col ID_COL the id column, kept in the out-of-fold and prediction files when present (default: id; "
            "none: no id column, the rows of the out-of-fold and prediction files matched by order)") in text
    assert "--ema-decay EMA_DECAY" in text and "none resets a config file's value" in text  # a default of none: reset
    args = build_parser().parse_args(["train", "--train-file", "a.csv", "--id-col", "none"])
    assert _train_config(args).id_col is None


@pytest.mark.parametrize("argv", [
    ["train", "--train-file", "t.csv", "--text-cols", "first", "--text-cols", "second"],
    ["predict", "--run", "a", "--input", "x.csv", "--output", "y.csv", "--folds", "0", "--folds", "1"],
    ["compare", "--poolings", "mean", "--poolings", "max", "--train-file", "t.csv", "--text-cols", "a"],
])
def test_a_list_option_given_twice_is_refused(argv, capsys):
    """argparse kept the last one: `--text-cols first --text-cols second` trained on `second` alone, silently."""
    flag = argv[-2] if argv[0] != "compare" else "--poolings"
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    assert (f"error: argument {flag}: given twice; give all its values after one {flag}: {flag} A B"
            in capsys.readouterr().err)


def test_a_list_option_once_and_a_repeatable_one_still_parse():
    args = build_parser().parse_args(["serve", "--run", "r", "--allowed-host", "a", "--allowed-host", "b"])
    assert args.allowed_hosts == ["a", "b"] and args.run == ["r"]
    args = build_parser().parse_args(["train", "--train-file", "t.csv", "--text-cols", "first", "second"])
    assert list(args.text_cols) == ["first", "second"]
