"""Checks of TrainConfig.validate that need no data: refused before the run folder is made, not in fold 0."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from attnpool.config import TrainConfig, make_config
from attnpool.config_checks import check_pooler
from attnpool.options import ConfigError

BASE = {"train_file": "x.csv", "text_cols": ["q"]}


def test_the_preset_field_lists_its_choices():
    """An unknown preset passed validate (the field had no choices, so --help listed none) and failed at the data."""
    assert TrainConfig.__dataclass_fields__["preset"].metadata["choices"] == ("pppm",)
    with pytest.raises(ValueError, match=r"preset must be one of pppm, got 'ppm'"):
        TrainConfig(preset="ppm", data_dir="d").validate()


@pytest.mark.parametrize(("values", "message"), [
    ({"preset": "pppm"}, "--preset pppm needs --data-dir DIR"),
    ({"preset": "pppm", "data_dir": "d", "task": "binary"}, "--preset pppm is a regression task (scores 0 to 1), "
                                                            "got --task binary"),
    ({"preset": "pppm", "data_dir": "d", "text_cols": ["anchor"]}, "not --text-cols"),
    ({**BASE, "template": "{q}"}, "give the text columns or a template, not both"),
    ({**BASE, "group_context": "label", "group_context_by": ["q"]}, "that is the label column"),
    ({"preset": "pppm", "data_dir": "d", "group_context": "score"}, "that is the label column"),
    ({**BASE, "group_context": "q"}, "--group-context q needs --group-context-by COL"),
])
def test_data_free_checks_fail_in_validate(values, message):
    """These passed validate and failed only when the data loaded, after the run folder and train.log existed (in
    compare: after the bad recipe was saved, which then refused the corrected command)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig(**values).validate()


def test_the_preset_still_validates_with_its_data_folder():
    TrainConfig(preset="pppm", data_dir="d").validate()
    TrainConfig(preset="pppm", data_dir="d", template="{anchor} [SEP] {target}", group_context="target").validate()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_pooler_option_is_refused(value):
    """--pooling-opt temperature=NaN passed validate and the trial build; the run said "complete" with NaN scores."""
    with pytest.raises(ValueError, match=r"pooling option temperature must be a finite number, got .*--pooling-opt "
                                         r"temperature=VALUE"):
        make_config(**BASE, pooling_options={"temperature": value}).validate()


def test_a_non_finite_pooler_option_is_refused_in_a_config_file_nested_and_in_a_spec(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train_file: x.csv\ntext_cols: [q]\npooling_options:\n  temperature: .nan\n")
    with pytest.raises(ValueError, match="pooling option temperature must be a finite number, got nan"):
        make_config(path).validate()
    with pytest.raises(ValueError, match=re.escape("pooling option extra.w[1] must be a finite number, got inf")):
        make_config(**BASE, pooling_options={"extra": {"w": [1.0, float("inf")]}}).validate()
    cfg = make_config(**BASE, pooling_options={"temperature": float("nan")})
    with pytest.raises(ValueError, match=re.escape("fix --poolings attention:temperature=nan")):
        check_pooler(cfg, "attention:temperature=nan")


def test_numpy_numbers_become_python_numbers():
    """np.float64 lr failed when the run saved config.yaml (after the data loaded); an np.int64 batch size and an
    np.float32 epochs were refused as no (whole) number."""
    cfg = make_config(**BASE, lr=np.float64(2e-5), batch_size=np.int64(8), epochs=np.float32(1.5),
                      max_length=np.float64(64.0), only_folds=[np.int64(0)], pooling_options={"attn_size": np.int64(8)},
                      limit=np.int32(100)).validate()
    assert (type(cfg.lr), type(cfg.batch_size), type(cfg.epochs), type(cfg.max_length), type(cfg.limit)) == (
        float, int, float, int, int)
    assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.max_length, cfg.limit) == (2e-5, 8, 1.5, 64, 100)
    assert type(cfg.only_folds[0]) is int and type(cfg.pooling_options["attn_size"]) is int
    yaml.safe_dump(cfg.to_dict())  # what the run saves
    with pytest.raises(ConfigError, match="batch_size must be a whole number"):
        make_config(**BASE, batch_size=np.float64(8.5))


def test_messages_say_where_a_value_came_from(tmp_path):
    """text_cols from the file were called --text-cols; `limit: 1e3` did not say that YAML reads it as text."""
    path = tmp_path / "cols.yaml"
    path.write_text("train_file: plain.csv\ntext_cols: [q]\n")
    with pytest.raises(ConfigError, match=re.escape(f"not text_cols (from {path}: drop them there)")):
        make_config(path, preset="pppm", data_dir="d")
    with pytest.raises(ConfigError, match=re.escape("not --text-cols")):
        make_config(path, preset="pppm", data_dir="d", text_cols=["anchor"])
    path.write_text("train_file: plain.csv\ntext_cols: [q]\nlimit: 1e3\n")
    with pytest.raises(ConfigError, match=re.escape("limit must be a whole number, got '1e3'; YAML reads 1e3 as text, "
                                                    "not a number (its exponent form needs a dot and a sign: 1.0e+3): "
                                                    "write 1000")):
        make_config(path)
