"""Option values written as text: ``KEY=VALUE`` items of ``--pooling-opt``, compare's pooler specs, config files."""

from __future__ import annotations

import argparse

import pytest

from attnpool import options
from attnpool.cli_flags import add_train_options, overrides
from attnpool.comparison.specs import PoolerSpec
from attnpool.options import parse_options, parse_value, typed_value
from attnpool.pooling import build_pooler


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("True", True), ("TRUE", True), ("yes", True), ("Yes", True), ("on", True), (" ON ", True),
    ("false", False), ("False", False), ("no", False), ("NO", False), ("off", False), (" Off", False),
])
def test_parse_value_reads_the_switch_words_as_bools_in_any_case(text, expected):
    """``learnable_p=False`` was the text 'False', which the pooler's bool() took for True."""
    assert parse_value(text) is expected
    assert options.parse_switch(text) is expected  # what the poolers' on/off options accept


@pytest.mark.parametrize(("text", "expected"), [
    ("128", 128), ("0", 0), ("1", 1), ("0.5", 0.5), ("1e-7", 1e-7), ("[1, 2]", [1, 2]), ("null", None),
    ('"no"', "no"), ('"False"', "False"),  # a word as text: quoted, as JSON
    ("mean", "mean"), ("none", "none"), ("nope", "nope"), ("offset", "offset"), ("", ""),
])
def test_parse_value_keeps_json_values_and_other_text(text, expected):
    assert parse_value(text) == expected and type(parse_value(text)) is type(expected)
    if not isinstance(expected, bool):
        assert options.parse_switch(text) is None


def test_parse_options_reads_the_words_as_bools():
    assert parse_options(["learnable_p=False", "fused=off", "layer_norm=Yes", "init=xavier"], "--pooling-opt") == {
        "learnable_p": False, "fused": False, "layer_norm": True, "init": "xavier"}


def test_pooling_opt_false_turns_the_option_off_in_the_pooler_built():
    parser = argparse.ArgumentParser()
    add_train_options(parser)
    values = overrides(parser.parse_args(["--pooling", "gem", "--pooling-opt", "learnable_p=False"]))
    assert values["pooling_options"] == {"learnable_p": False}
    gem = build_pooler(values["pooling"], 8, **values["pooling_options"])
    assert gem.learnable_p is False and not gem.p_param.requires_grad  # a fixed exponent, not a parameter


def test_compare_specs_and_config_files_read_the_words_as_bools():
    assert PoolerSpec.parse("attention:fused=off,attn_size=4").options == {"fused": False, "attn_size": 4}
    assert typed_value("pooling_options", dict, {"layer_norm": "False", "num_seeds": "2"}, "run.yaml") == {
        "layer_norm": False, "num_seeds": 2}
