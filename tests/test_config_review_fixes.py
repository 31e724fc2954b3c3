"""Review findings on the options: each refused (or said better) at validation, before a run folder is made."""

from __future__ import annotations

import re

import pytest

from attnpool.cli import main
from attnpool.config import TrainConfig, make_config
from attnpool.options import ConfigError, parse_options


def _toy(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("id,first,second,label\n0,a b,c,0.5\n1,d,e f,0.25\n2,g,h,0.75\n3,i,j,0\n")
    return data


@pytest.mark.parametrize("template", ["first second", "{{first}} [SEP] {{second}}", "  "])
def test_a_template_without_a_placeholder_is_refused_by_the_cli(tmp_path, capsys, template):
    """It passed validate, built no text and failed in the tokenizer with an IndexError traceback, in a run folder."""
    data, run = _toy(tmp_path), tmp_path / "run"
    assert main(["train", "--train-file", str(data), "--template", template, "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"attnpool train: error: template {template!r} has no placeholder, so no column's text goes in: write " \
           "each column as {column}, e.g. --template '{first} [SEP] {second}' (template: \"{first} [SEP] {second}\" " \
           "in a config file); {{ and }} are literal braces, not placeholders" in err
    assert f"{data} has the columns id, first, second, label" in err
    assert not run.exists()


def test_a_template_without_a_placeholder_is_refused_in_a_config_file(tmp_path):
    data = _toy(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(f"train_file: {data}\ntemplate: \"{{{{first}}}} [SEP] {{{{second}}}}\"\n")
    with pytest.raises(ValueError, match=re.escape("template '{{first}} [SEP] {{second}}' has no placeholder")):
        make_config(path).validate()
    TrainConfig(train_file=str(data), template="{{literal}} {first}").validate()  # one placeholder is enough


def test_the_valid_file_being_the_train_file_is_refused(tmp_path, capsys, monkeypatch):
    """It trained and validated on the same rows: best checkpoint, early stopping and the scores in-sample."""
    data, run = _toy(tmp_path), tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--train-file", str(data), "--valid-file", "./train.csv", "--text-cols", "first",
                 "--output-dir", str(run)]) == 2
    assert ("attnpool train: error: --valid-file ./train.csv is the training file (--train-file "
            f"{data}): the model would be validated on the rows it trains on, so the best checkpoint, early stopping "
            "and the scores would be in-sample; give a held-out file as --valid-file, or leave it out for k-fold "
            "cross-validation (--folds)") in capsys.readouterr().err
    assert not run.exists()
    other = tmp_path / "valid.csv"
    other.write_text(data.read_text())  # same rows, another file: not checked (no content comparison)
    TrainConfig(train_file=str(data), valid_file=str(other), text_cols=["first"]).validate()


def test_a_pooling_opt_key_given_twice_is_refused(tmp_path, capsys):
    """The last one silently won, while list flags given twice and a file's duplicate keys are refused."""
    data, run = _toy(tmp_path), tmp_path / "run"
    assert main(["train", "--train-file", str(data), "--text-cols", "first", "--pooling-opt", "attn_size=8",
                 "--pooling-opt", " attn_size=16", "--output-dir", str(run)]) == 2
    assert ("attnpool train: error: --pooling-opt gives attn_size twice (attn_size=8 and  attn_size=16): give "
            "--pooling-opt attn_size=VALUE once, with the value you mean") in capsys.readouterr().err
    assert not run.exists()
    with pytest.raises(ConfigError, match=re.escape("--pooling-opt gives a twice (a=1 and a=2)")):
        parse_options(["a=1", "b=3", "a=2"], "--pooling-opt", once=True)


def test_a_pooling_opt_flag_still_overrides_a_config_files_key(tmp_path, monkeypatch):
    """Only the flags' own duplicates are refused: a flag over the file's pooling_options key still wins."""
    from attnpool import api

    calls = []
    monkeypatch.setattr(api, "train", lambda *args, **kwargs: calls.append((args, kwargs)) or type(
        "R", (), {"metrics": {"complete": True}})())
    path = tmp_path / "c.yaml"
    path.write_text("train_file: x.csv\ntext_cols: [q]\npooling_options:\n  attn_size: 8\n  num_heads: 2\n")
    assert main(["train", "--config", str(path), "--pooling-opt", "attn_size=16"]) == 0
    assert calls[-1] == ((str(path),), {"pooling_options": {"attn_size": 16}})
    assert make_config(path, **calls[-1][1]).pooling_options == {"attn_size": 16, "num_heads": 2}


def test_a_combinations_part_option_says_which_part_takes_it_and_the_combined_form(tmp_path, capsys):
    """`attention+mean` with attn_size said "pooler 'combined' got unknown option(s)", a name never typed."""
    data, run = _toy(tmp_path), tmp_path / "run"
    assert main(["train", "--train-file", str(data), "--text-cols", "first", "--pooling", "attention+mean",
                 "--pooling-opt", "attn_size=8", "--pooling-opt", "combine=project", "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert ("pooler combination 'attention+mean' takes only its own options (poolers, combine, num_layers), got "
            "attn_size (an option of its part attention): give each part its options inside poolers, --pooling "
            "combined --pooling-opt 'poolers=[{\"type\": \"attention\", \"attn_size\": 8}, \"mean\"]' --pooling-opt "
            "combine=project") in err
    assert "'combined' got unknown" not in err
    assert not run.exists()
    with pytest.raises(ValueError, match=re.escape("got attn_size (an option of its part attention): give each part "
                                                   "its options inside poolers, --pooling combined --pooling-opt "
                                                   "'poolers=[{\"type\": \"attention\", \"attn_size\": 8}, \"mean\"]'"
                                                   ", and drop zz, which no part takes")):
        TrainConfig(train_file="x.csv", text_cols=["q"], pooling="attention+mean",
                    pooling_options={"attn_size": 8, "zz": 1}).validate()
    # the form shown is one that validates
    TrainConfig(train_file="x.csv", text_cols=["q"], pooling="combined",
                pooling_options={"poolers": [{"type": "attention", "attn_size": 8}, "mean"],
                                 "combine": "project"}).validate()


def test_a_comma_in_text_cols_from_the_flag_is_not_said_to_be_yaml(tmp_path, capsys):
    """The error always said "YAML reads text_cols: first,second as one text", also after --text-cols first,second."""
    data, run = _toy(tmp_path), tmp_path / "run"
    assert main(["train", "--train-file", str(data), "--text-cols", "first,second", "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert (f"text_cols 'first,second' is one column name, which {data} lacks (a comma does not split columns, "
            "after --text-cols or in a config file): give the columns as a list, text_cols: [first, second] "
            "(--text-cols first second)") in err
    assert "YAML" not in err


def test_the_text_cols_help_names_the_tokenizers_separator():
    text = TrainConfig.__dataclass_fields__["text_cols"].metadata["help"]
    assert "joined by the tokenizer's separator" in text
    assert "[SEP]" not in text


def test_a_run_begun_with_the_valid_file_as_the_train_file_still_resumes(tmp_path):
    """Its saved config wins on --resume: the refusal's advice (another --valid-file) could not be followed."""
    (tmp_path / "t.csv").write_text("text,label\na,1\n")
    same = {"train_file": str(tmp_path / "t.csv"), "valid_file": str(tmp_path / "t.csv"), "text_cols": ["text"]}
    TrainConfig(**same, resume=True).validate()
    with pytest.raises(ValueError, match="is the training file"):
        TrainConfig(**same).validate()
