"""A key given twice in a config file: refused with where, not silently the last one."""

from __future__ import annotations

import re

import pytest
import yaml

from attnpool.options import ConfigError, load_yaml


def test_a_yaml_key_given_twice_is_refused_with_its_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("train_file: plain.csv\nlr: 1e-3\nepochs: 2\nlr: 5e-5\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:4:1: duplicate key 'lr' (first at line 2)")):
        load_yaml(path)
    path.write_text("pooling_options:\n  attn_size: 8\n  attn_size: 16\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3:3: duplicate key 'attn_size' (first at line 2)")):
        load_yaml(path)


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("a: &base\n  x: 1\n  y: 2\nb:\n  <<: *base\n  x: 3\n")
    assert load_yaml(path) == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}


def test_a_json_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"lr": 1e-3, "pooling_options": {"eps": 1, "eps": 2}}')
    with pytest.raises(ConfigError, match=re.escape(f"{path}: duplicate key 'eps' in one object")):
        load_yaml(path)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_two_spellings_of_one_option_are_refused(tmp_path, suffix):
    """head-lr and head_lr became one name after the renaming: the later one was kept."""
    path = tmp_path / f"dash{suffix}"
    path.write_text('{"head-lr": 0.001, "head_lr": 0.01}')
    with pytest.raises(ConfigError, match=re.escape(f"{path}: head-lr and head_lr are one option, head_lr")):
        load_yaml(path)
    path.write_text('{"head-lr": 0.001, "lr": 0.01}')
    assert load_yaml(path) == {"head_lr": 0.001, "lr": 0.01}


def test_a_merged_mapping_that_overrides_a_merge_of_its_own_loads_as_before(tmp_path):
    """Merging rewrites the merged mapping's nodes in place: checked during construction, an anchored mapping with
    its own `<<` and an override, merged again later, showed its key twice."""
    path = tmp_path / "deep.yaml"
    path.write_text("pooling_options:\n  inner:\n    deeper: &M\n      <<: {k: 1}\n      k: 2\n  other:\n    <<: *M\n")
    loaded = load_yaml(path)
    assert loaded["pooling_options"]["inner"] == {"deeper": {"k": 2}}
    assert loaded == yaml.safe_load(path.read_text())  # whatever PyYAML makes of the merge, the same
    path.write_text("pooling_options:\n  - {x: 1, x: 2}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2:12: duplicate key 'x' (first at line 2)")):
        load_yaml(path)


@pytest.mark.parametrize(("first", "second"), [("1", "0x1"), ("yes", "true"), ("~", "null"), ("1", "1.0")])
def test_keys_written_otherwise_with_one_value_are_one_key(tmp_path, first, second):
    path = tmp_path / "c.yaml"
    path.write_text(f"pooling_options:\n  {first}: a\n  {second}: b\n")
    with pytest.raises(ConfigError, match=re.escape(f"duplicate key {second!r} (first at line 2)")):
        load_yaml(path)


@pytest.mark.parametrize(("text", "read"), [
    ("seed: 042", {"seed": "042"}), ("folds: 010", {"folds": "010"}), ("label: 0123", {"label": "0123"}),
    ("text_cols: [0123]", {"text_cols": ["0123"]}), ("epochs: 1:00", {"epochs": "1:00"}),
    ("a: 0x1F", {"a": 31}), ("a: 0o17", {"a": 15}), ("a: 1_000", {"a": 1000}), ("a: 1.0e+3", {"a": 1000.0}),
    ("a: 007.5", {"a": 7.5}), ("a: -3", {"a": -3})])
def test_numbers_with_leading_zeros_or_in_base_60_are_text_as_a_flag_s_value_is(tmp_path, text, read):
    """YAML 1.1 read seed: 042 as the octal 34 (--seed 042 is 42), label: 0123 as the column '83', epochs: 1:00 as
    60; plain, hex, binary, 0o octal and underscored numbers stay numbers."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    assert load_yaml(path) == read


def test_a_whole_number_option_written_with_leading_zeros_says_how_to_write_it(tmp_path):
    from attnpool.config import make_config

    path = tmp_path / "c.yaml"
    path.write_text("train_file: t.csv\ntext_cols: [a]\nseed: 042\nlabel: 0123\n")
    with pytest.raises(ConfigError, match=re.escape("seed must be a whole number, got '042'; a number with leading "
                                                    "zeros is read as text (an id or a code; YAML 1.1 read 042 as "
                                                    "octal): write 42")):
        make_config(path)
    path.write_text("train_file: t.csv\ntext_cols: [a]\nseed: 42\nlabel: 0123\n")
    assert make_config(path).label == make_config(None, train_file="t.csv", text_cols=["a"], label="0123").label

