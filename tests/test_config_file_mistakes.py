"""Config-file and ``--config`` mistakes: each refused with what to write instead, or read as the user meant."""

from __future__ import annotations

import json
import re

import pytest

import attnpool
import attnpool.api as api_module
from attnpool import config_checks
from attnpool.cli import main
from attnpool.config import make_config
from attnpool.options import ConfigError, load_yaml
from attnpool.training.recipe import PER_CALL_SAVED


def test_an_unquoted_template_in_yaml_says_to_quote_it(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("train_file: train.csv\ntemplate: {first} [SEP] {second}\n")
    with pytest.raises(ConfigError, match=re.escape(
            "YAML reads an unquoted {first} [SEP] {second} as a mapping: quote the text, "
            "template: '{first} [SEP] {second}'")) as err:
        load_yaml(path)
    assert str(err.value).startswith(f"{path}:2:19: expected <block end>")
    path.write_text("train_file: train.csv\ntemplate: {first}\n")
    with pytest.raises(ConfigError, match=re.escape(
            "template must be text, got {'first': None}; YAML reads an unquoted {first} as a mapping: quote the "
            "text, template: '{first}'")):
        make_config(path)
    path.write_text("train_file: train.csv\ntemplate: [first]\n")
    with pytest.raises(ConfigError, match=re.escape("as a list: quote the text, template: '[first]'")):
        make_config(path)


def test_a_broken_pooling_options_mapping_is_not_told_to_be_quoted(tmp_path):
    """pooling_options is a mapping: quoting it, as the hint said, failed next as "must be a mapping"."""
    path = tmp_path / "t.yaml"
    path.write_text("train_file: train.csv\npooling_options: {attn_size: 64}}\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert str(err.value).startswith(f"{path}:2:") and "quote" not in str(err.value)


def test_a_quoted_template_still_loads(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("train_file: train.csv\ntemplate: '{first} [SEP] {second}'\n")
    assert make_config(path).template == "{first} [SEP] {second}"


@pytest.mark.parametrize("name", ["Attention", "attention_pooling", "AttentionPooling", "attention"])
def test_the_file_s_pooler_named_another_way_keeps_its_pooling_options(tmp_path, name):
    path = tmp_path / "pool.yaml"
    path.write_text("train_file: train.csv\ntext_cols: [first]\npooling: attention\npooling_options:\n"
                    "  attn_size: 8\n")
    assert make_config(path, pooling=name).pooling_options == {"attn_size": 8}
    assert make_config(path, pooling=name, pooling_options={"num_heads": 2}).pooling_options == {
        "attn_size": 8, "num_heads": 2}


@pytest.mark.parametrize("name", ["mean", "attention+mean", "no_such_pooler"])
def test_another_pooler_still_drops_the_file_s_pooling_options(tmp_path, name):
    path = tmp_path / "pool.yaml"
    path.write_text("train_file: train.csv\ntext_cols: [first]\npooling: attention\npooling_options:\n"
                    "  attn_size: 8\n")
    assert make_config(path, pooling=name).pooling_options == {}


def test_same_pooler_compares_registered_classes_part_by_part():
    assert config_checks.same_pooler("Attention+Mean", "attention+mean_pooling")
    assert not config_checks.same_pooler("attention+mean", "attention+max")
    assert config_checks.same_pooler("my_unknown", "my_unknown")
    assert not config_checks.same_pooler("my_unknown", "My_Unknown")  # not registered: compared as written


def test_config_given_twice_is_refused_naming_both_files(tmp_path, capsys):
    for command in (["train"], ["compare", "--poolings", "mean"]):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--config", "a.yaml", "--config=b.yaml"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"attnpool {command[0]}: error: --config given twice (a.yaml, b.yaml): give one file" in err
        assert "usage:" not in err, "one line, as the command's other errors"


def _run_folder(path):
    path.mkdir()
    (path / "run.json").write_text("{}")
    return path


def test_only_the_run_s_own_saved_config_is_reset_not_a_recipe_kept_in_the_run_folder(tmp_path, monkeypatch):
    run = _run_folder(tmp_path / "r1")
    for name in ("config.yaml", "my_recipe.yaml"):
        (run / name).write_text("train_file: t.csv\ntext_cols: [a]\nonly_folds: [1]\noverwrite: true\n")
    assert api_module._saved_call_reset(run / "config.yaml") == dict(PER_CALL_SAVED)
    assert api_module._saved_call_reset(str(run / "config.yaml")) == dict(PER_CALL_SAVED)
    assert api_module._saved_call_reset(run / "my_recipe.yaml") == {}
    seen = []
    monkeypatch.setattr(api_module, "_train", lambda cfg, callbacks=None, given=None: seen.append(cfg))
    attnpool.train(run / "my_recipe.yaml", output_dir=str(tmp_path / "other"))
    assert (seen[-1].only_folds, seen[-1].overwrite) == ([1], True), "the user's own recipe keeps its values"


def test_a_json_config_with_a_byte_order_mark_loads_as_yaml_does(tmp_path):
    values = {"train_file": "train.csv", "text_cols": ["first"], "epochs": 2}
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(values).encode())
    assert load_yaml(path) == values
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbftrain_file: train.csv\ntext_cols: [first]\nepochs: 2\n")
    assert load_yaml(path) == values


def test_a_folder_given_as_config_says_it_is_a_folder(tmp_path, monkeypatch):
    folder = tmp_path / "recipes"
    folder.mkdir()
    with pytest.raises(ConfigError, match=re.escape(f"{folder} is a folder, not a config file")):
        load_yaml(folder)
    run = _run_folder(tmp_path / "r1")
    (run / "config.yaml").write_text("train_file: t.csv\ntext_cols: [a]\n")
    monkeypatch.setattr(api_module, "_train", lambda cfg, callbacks=None, given=None: pytest.fail("trained"))
    with pytest.raises(ConfigError, match=re.escape(
            f"{run} is a folder, not a config file: it is a run, whose recipe is {run / 'config.yaml'} (--config "
            f"{run / 'config.yaml'}); to continue that run, --output-dir {run} --resume")):
        attnpool.train(run)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")


def test_text_cols_written_with_a_comma_is_shown_as_the_list_it_meant(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("id,first,second,label\n0,a b,c,0.5\n1,d,e f,0.25\n")
    path = tmp_path / "t.yaml"
    path.write_text(f"train_file: {data}\ntext_cols: first, second\n")
    cfg = make_config(path)
    assert cfg.text_cols == ["first, second"]
    with pytest.raises(ConfigError, match=re.escape(
            "text_cols 'first, second' is one column name, which ") + ".*" + re.escape(
            "give the columns as a list, text_cols: [first, second] (--text-cols first second)")):
        cfg.validate()
    path.write_text(f"train_file: {data}\ntext_cols: first\ngroup_context: second\ngroup_context_by: id, label\n")
    with pytest.raises(ConfigError, match=re.escape("group_context_by: [id, label]")):
        make_config(path).validate()


def test_a_column_really_named_with_a_comma_is_used_as_named(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text('id,"first, second",label\n0,a b,0.5\n1,d,0.25\n')
    cfg = make_config({"train_file": str(data), "text_cols": "first, second"})
    config_checks.check_comma_names(cfg)  # no error: the file has that column
    assert cfg.text_cols == ["first, second"]
