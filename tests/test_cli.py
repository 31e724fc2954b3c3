from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnpool import __version__, api
from attnpool.cli import _train_config, build_parser, main
from attnpool.cli_flags import unknown_flags
from attnpool.config import GROUPS, TrainConfig
from model_helpers import save_tiny_encoder, write_toy_csv


def test_poolers_lists_every_pooler_with_its_parameter_count(capsys):
    assert main(["poolers", "--hidden-size", "1024"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("attention "))
    assert "525,312" in line and "1024" in line
    assert "multihead_attention" in out and "gem" in out


def test_poolers_lists_the_poolers_it_cannot_build_at_that_size_with_the_reason(capsys):
    """--hidden-size 100 stopped the whole listing at latent_attention (8 heads); 0 named a random pooler."""
    assert main(["poolers", "--hidden-size", "100"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["pooler", "parameters", "output_dim", "perm-invariant", "token", "weights",
                                           "note"]
    line = next(row for row in out.splitlines() if row.startswith("latent_attention "))
    assert line.split()[1:3] == ["–", "–"] and "hidden_size 100 is not divisible by num_heads=8" in line
    assert next(row for row in out.splitlines() if row.startswith("attention ")).split()[1:3] == ["5,100", "100"]
    rows = {row["pooler"]: row for row in api.poolers(100)}
    assert rows["latent_attention"]["parameters"] is None and "num_heads=8" in rows["latent_attention"]["note"]
    assert rows["attention"]["note"] is None and rows["attention"]["parameters"] == 5100
    assert main(["poolers", "--hidden-size", "1024"]) == 0  # every pooler built: no note column
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == "weights"
    assert main(["poolers", "--hidden-size", "0"]) == 2
    assert "attnpool poolers: error: --hidden-size must be >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--hidden-size must be >= 1"):
        api.poolers(-3)


def test_console_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "attnpool.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("attnpool ")


def test_python_dash_m_attnpool_is_the_attnpool_command():
    result = subprocess.run([sys.executable, "-m", "attnpool", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == f"attnpool {__version__}"
    result = subprocess.run([sys.executable, "-m", "attnpool", "nosuchcommand"], capture_output=True, text=True)
    assert result.returncode == 2 and "invalid choice" in result.stderr


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def _sections(raw: str) -> dict[str, list[str]]:
    """``--help`` output as {heading: [one string per option entry]}."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in raw.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = sections.setdefault(line[:-1], [])
        elif line.startswith("  -") and current is not None:
            current.append(line.strip())
        elif line.startswith("   ") and current:
            current[-1] += " " + line.strip()
    return sections


def test_train_help_lists_every_config_option_with_its_default_under_its_group(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    raw = capsys.readouterr().out
    sections = _sections(raw)
    headings = [f"{group} options" for group in GROUPS]
    assert [h for h in sections if h.endswith(" options")] == headings, "the config's groups, in its order"
    for f in dataclasses.fields(TrainConfig):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        entries = [e for e in sections[f"{f.metadata['group']} options"] if re.split("[ ,]", e)[0] == flag]
        assert len(entries) == 1, f.name
        assert "(default: " in entries[0], entries[0]
    text = " ".join(raw.split())  # argparse wraps lines
    for shown in ("--lr LR encoder learning rate (its top layer; see llrd) (default: 2e-05)",
                  "--output-dir OUTPUT_DIR the run directory (default: runs/attnpool)",
                  "--pooling-layers LAYER [LAYER ...] the layers the pooler reads",
                  "--pooling-opt KEY=VALUE an option of the pooler, repeatable, each key once (e.g. attn_size=128); "
                  "a + combination's parts take theirs inside poolers=[...] (default: none)",
                  "--task {regression,binary,multiclass,multilabel} what the label is (multilabel: classes joined by "
                  "|, e.g. sports|news) (default: regression)",
                  "--loss {mse,bce,cross_entropy,pearson,none} the training loss (pearson: 1 - the batch's Pearson r, "
                  "regression only; PPPM 1st place) (default: from the task",
                  "with this decay, e.g. 0.999 (PPPM 2nd place, Kaggle 2022) (default: off; none resets a config "
                  "file's value)",
                  "--head-dropout HEAD_DROPOUT dropout on the pooled vector before the head (default: 0.1)",
                  "--label-bins LABEL_BINS regression labels are binned", "(default: every fold; none alone resets",
                  "--gradient-checkpointing, --no-gradient-checkpointing", "(default: 42)", "(default: 3.0)",
                  "--config FILE a YAML"):
        assert shown in text, shown
    assert text.count("(default: ") == len(dataclasses.fields(TrainConfig)) + 4  # --config, -q, -v, --import


def test_compare_help_shows_the_api_defaults_of_its_own_options(capsys):
    text = _help(["compare"], capsys)
    assert "(default: runs/compare)" in text and "(default: runs/attnpool)" not in text
    assert "number N (at most 20): N seeds from --seed on; several numbers: those seeds (default: 3)" in text
    assert "the pooler the others are tested against (default: mean)" in text
    assert "--head-lr HEAD_LR" in text and "recipe options:" in text
    assert "--pooling-opt" not in text and "--pooling " not in text  # refused: --poolings names the poolers


def test_every_option_of_every_command_says_its_default(capsys):
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == {"poolers", "train", "predict", "compare", "explain", "export", "demo", "serve"}
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                assert name == "compare" and action.dest in ("pooling", "pooling_options") or action.dest == "help"
                continue
            assert action.help, f"{name} {action.option_strings}"
            assert "(default: " in action.help or action.help.endswith("(required)"), (name, action.help)
            assert action.help.endswith("(required)") == action.required, (name, action.help)


def test_no_help_text_shows_docstring_markup():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = [("attnpool", parser.format_help()), *((n, c.format_help()) for n, c in commands.choices.items())]
    for name, text in helps:
        assert not re.search(r":(mod|class|func|meth|data|attr):`|``", text), (name, text)
    assert "attnpool COMMAND --help" in parser.format_help().replace("\n", " ")


def test_flags_default_to_not_given_so_the_config_file_wins_where_no_flag_is_given(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\nlr: 0.5\nfolds: 3\ngradient_checkpointing: true\n"
                    "pooling_options:\n  attn_size: 32\n")
    args = build_parser().parse_args(["train", "--config", str(path), "--folds", "4", "--pooling-opt", "gated=true",
                                      "--pooling-layers", "0", "-1"])
    cfg = _train_config(args)
    assert (cfg.train_file, cfg.lr, cfg.folds, cfg.gradient_checkpointing) == ("a.csv", 0.5, 4, True)
    assert cfg.pooling_options == {"attn_size": 32, "gated": True} and cfg.pooling_layers == [0, -1]
    args = build_parser().parse_args(["train", "--config", str(path), "--no-gradient-checkpointing",
                                      "--pooling-layers", "all", "--overwrite"])
    cfg = _train_config(args)
    assert not cfg.gradient_checkpointing and cfg.pooling_layers == "all" and cfg.overwrite and not cfg.resume


def test_none_resets_an_optional_option_of_the_config_file(tmp_path):
    """A file's ema_decay, recurrent or id_col could not be turned off from the command line."""
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\nema_decay: 0.999\nrecurrent: lstm\nid_col: key\nhead_hidden_size: 64\n")
    args = build_parser().parse_args(["train", "--config", str(path), "--ema-decay", "none", "--recurrent", "None",
                                      "--id-col", "none"])
    cfg = _train_config(args)
    assert (cfg.ema_decay, cfg.recurrent, cfg.id_col, cfg.head_hidden_size) == (None, None, None, 64)
    assert _train_config(build_parser().parse_args(["train", "--config", str(path)])).ema_decay == 0.999


class Recorder:
    def __init__(self, result):
        self.calls, self.result = [], result

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def test_train_passes_the_given_flags_to_the_api_and_exits_3_when_incomplete(monkeypatch, tmp_path):
    fake = Recorder(SimpleNamespace(metrics={"complete": False}))
    monkeypatch.setattr(api, "train", fake)
    assert main(["train", "--train-file", "a.csv", "--text-cols", "q", "a", "--epochs", "1.5", "--only-folds", "0",
                 "--pooling-opt", "attn_size=8", "--resume"]) == 3
    assert fake.calls == [((None,), {"train_file": "a.csv", "text_cols": ["q", "a"], "epochs": 1.5,
                                     "only_folds": [0], "pooling_options": {"attn_size": 8}, "resume": True})]
    fake.result = SimpleNamespace(metrics={"complete": True})
    assert main(["train", "--config", str(tmp_path / "r.yaml")]) == 0
    assert fake.calls[-1] == ((str(tmp_path / "r.yaml"),), {})


def test_compare_passes_a_seed_count_or_the_seeds_to_the_api(monkeypatch, capsys):
    fake = Recorder(SimpleNamespace(markdown="| table |", trained=0, output_dir="out"))
    monkeypatch.setattr(api, "compare", fake)
    common = ["compare", "--poolings", "max", "gem", "--train-file", "a.csv", "--lr", "0.1"]
    assert main([*common, "--seeds", "2"]) == 0
    assert fake.calls[-1] == ((None,), {"poolings": ["max", "gem"], "seeds": 2, "train_file": "a.csv", "lr": 0.1})
    assert main([*common, "--seeds", "5", "7", "--output-dir", "cmp", "--overwrite", "--baseline", "cls"]) == 0
    assert fake.calls[-1][1] == {"poolings": ["max", "gem"], "seeds": [5, 7], "output_dir": "cmp", "overwrite": True,
                                 "baseline": "cls", "train_file": "a.csv", "lr": 0.1}
    assert "| table |" in capsys.readouterr().out
    assert main([*common, "--pooling", "mean"]) == 2 and len(fake.calls) == 2
    assert "--poolings NAME[:key=value,...]" in capsys.readouterr().err


def test_export_format_reaches_the_api(monkeypatch):
    fake = Recorder(SimpleNamespace(max_abs_diff=None, tokenizer_saved=False, path="m.onnx", output_names=["logits"]))
    monkeypatch.setattr(api, "export", fake)
    assert main(["export", "--model", "m", "--output", "m.onnx", "--fold", "1", "--no-verify", "--format", "onnx"]) == 0
    assert main(["export", "--model", "m", "--output", "m.onnx", "--with-weights"]) == 0
    assert fake.calls == [(("m", "m.onnx"), {"format": "onnx", "fold": 1, "with_weights": False, "opset": None,
                                            "verify": False}),
                          (("m", "m.onnx"), {"format": "onnx", "fold": None, "with_weights": True, "opset": None,
                                            "verify": True})]


def test_a_malformed_config_file_is_one_line_with_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\nlr 0.1\nfolds: 3\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnpool train: error: {path}:3:1: could not find expected ':'")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml does not exist" in capsys.readouterr().err


def test_a_bad_pooling_opt_is_an_input_error(capsys):
    assert main(["train", "--train-file", "a.csv", "--text-cols", "q", "--pooling-opt", "attn_size"]) == 2
    assert "option 'attn_size' of --pooling-opt is not key=value" in capsys.readouterr().err


def test_a_misspelt_flag_gets_the_commands_usage_and_the_closest_flag(capsys):
    """argparse printed the top-level usage (attnpool [-h] [--version] ... COMMAND) and no hint."""
    with pytest.raises(SystemExit) as exited:
        main(["train", "--max-lenght", "32"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: attnpool train ")
    assert "attnpool train: error: unrecognized arguments: --max-lenght (did you mean --max-length?) 32" in err


def test_none_alone_resets_a_list_of_numbers_or_a_computed_switch_of_the_config_file(tmp_path, capsys):
    """A file's only_folds or freeze_word_embeddings could not be reset from the command line."""
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\ntext_cols: [q, a]\nonly_folds: [0]\ngroup_context_by: [q]\n"
                    "freeze_word_embeddings: false\n")

    def config(*flags):
        return _train_config(build_parser().parse_args(["train", "--config", str(path), *flags]))

    cfg = config("--only-folds", "none", "--freeze-word-embeddings", "none")
    assert (cfg.only_folds, cfg.group_context_by, cfg.freeze_word_embeddings) == (None, ["q"], None)
    assert config("--template", "{q}").text_cols == []  # --template replaces the file's columns
    assert config().freeze_word_embeddings is False and config("--freeze-word-embeddings").freeze_word_embeddings
    assert config("--no-freeze-word-embeddings").freeze_word_embeddings is False
    assert config("--only-folds", "1").only_folds == [1]
    assert main(["train", "--config", str(path), "--only-folds", "0", "none"]) == 2
    assert "attnpool train: error: --only-folds: none stands alone (it resets a config file's value), got 0 none" in (
        capsys.readouterr().err)
    for flags in (["--no-freeze-word-embeddings", "none"], ["--freeze-word-embeddings", "maybe"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(["train", *flags])
        assert exited.value.code == 2
        assert "the switch takes no value, except none after --freeze-word-embeddings" in capsys.readouterr().err


def test_a_column_named_none_is_a_column_of_the_list_flags(tmp_path, capsys):
    """--text-cols None reset text_cols to [] (a column named None could not be read); only numbers' none resets."""
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\ntext_cols: [q, a]\ngroup_context_by: [q]\n")
    for word in ("None", "none", "NONE"):
        cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--text-cols", word, "b",
                                                       "--group-context-by", word]))
        assert (cfg.text_cols, cfg.group_context_by) == ([word, "b"], [word])
        cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--text-cols", word]))
        assert cfg.text_cols == [word]
    text = _help(["train"], capsys)
    assert "they replace its template (default: none) --template" in text  # not "none alone resets"
    assert "of group_context's groups (default: none; PPPM: anchor context) --group" in text
    assert "(default: every fold; none alone resets a config file's value)" in text


def test_a_template_flag_replaces_a_config_files_text_columns_and_the_reverse(tmp_path):
    """The flag is the user's latest word: the file's text_cols with --template was refused, and stuck."""
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\ntext_cols: [q, a]\n")
    cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--template", "{q} [SEP] {a}"]))
    assert (cfg.text_cols, cfg.template) == ([], "{q} [SEP] {a}")
    path.write_text("train_file: a.csv\ntemplate: '{q}'\n")
    cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--text-cols", "q"]))
    assert (cfg.text_cols, cfg.template) == (["q"], None)


def test_overwrite_and_resume_undo_a_config_files_value(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("train_file: a.csv\ntext_cols: q\nresume: true\noverwrite: true\n")
    cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--no-resume"]))
    assert (cfg.resume, cfg.overwrite) == (False, True)
    cfg = _train_config(build_parser().parse_args(["train", "--config", str(path), "--no-overwrite"]))
    assert (cfg.resume, cfg.overwrite) == (True, False)


def test_a_misspelt_required_flag_is_named_with_the_closest_flag_not_reported_missing(capsys):
    """--ouptut for the required --output said only "the following arguments are required: --output"."""
    with pytest.raises(SystemExit) as exited:
        main(["predict", "--run", "r", "--input", "a.csv", "--ouptut", "p.csv"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: attnpool predict ")
    assert "unrecognized arguments: --ouptut (did you mean --output?) p.csv" in err
    assert "required" not in err


def test_an_abbreviated_flag_is_not_taken_for_a_misspelt_one(monkeypatch):
    """argparse accepts a flag's unique prefix (--out for --output): the early check leaves it to argparse."""
    seen = {}
    monkeypatch.setattr("attnpool.cli._cmd_predict", lambda args: seen.setdefault("output", args.output) and 0)
    assert main(["predict", "--run", "r", "--input", "a.csv", "--out", "p.csv"]) == 0
    assert seen == {"output": "p.csv"}


def test_a_value_that_starts_with_dashes_and_holds_a_space_is_a_value_not_a_flag(capsys):
    """As argparse reads it: the early check took '-- {text}' for an unknown flag (exit 2, "did you mean")."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--template", "-- {text}", "--help"])
    assert exit_.value.code == 0 and "--template" in capsys.readouterr().out
    assert unknown_flags(build_parser(), ["train", "--template", "--- {title} ---", "--lr", "-1e-5"]) == ("train", [])
    assert unknown_flags(build_parser(), ["train", "--tempalte=a b", "x"]) == ("train", ["--tempalte=a b", "x"])


@pytest.mark.parametrize("command", ["predict", "export", "explain", "serve", "demo", "poolers"])
def test_quiet_mentions_train_log_only_for_the_commands_that_write_one(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "train.log" not in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["train", "compare"])
def test_quiet_says_train_log_keeps_everything_for_train_and_compare(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "(train.log keeps everything)" in " ".join(capsys.readouterr().out.split())


# ---------------------------------------------------------------- --import: a user's poolers

USER_POOLER = """
import torch
from attnpool import Pooler, register_pooler


@register_pooler
class HalfMeanPooling(Pooler):
    name = "user_half_mean"

    def pool(self, hidden_states, mask):
        weights = mask.to(hidden_states.dtype) / mask.sum(1, keepdim=True).clamp(min=1)
        return 0.5 * torch.einsum("bt,bth->bh", weights, hidden_states), None
"""


def test_train_with_a_user_pooler_imported_from_the_working_directory(tmp_path):
    """No command could use a registered pooler: attnpool train --pooling mine said Unknown pooler 'mine'."""
    (tmp_path / "my_cli_poolers.py").write_text(textwrap.dedent(USER_POOLER))
    write_toy_csv(tmp_path / "train.csv", n=24)
    encoder = save_tiny_encoder(tmp_path / "encoder")
    script = Path(sys.executable).with_name("attnpool")  # the console script: no working directory on its sys.path
    command = [str(script) if script.is_file() else sys.executable, *([] if script.is_file() else ["-m", "attnpool"]),
               "--import", "my_cli_poolers", "train", "--train-file", "train.csv", "--text-cols", "first", "second",
               "--model", encoder, "--pooling", "user_half_mean", "--epochs", "1", "--folds", "2", "--batch-size",
               "8", "--max-length", "16", "--output-dir", "run", "--quiet"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()


@pytest.mark.parametrize("command", ["train", "predict", "export", "explain", "serve", "compare"])
def test_import_before_or_after_the_command_registers_the_poolers_before_it_runs(command, tmp_path, monkeypatch):
    modules = [f"user_before_{command}", f"user_after_{command}"]
    for name in modules:
        (tmp_path / f"{name}.py").write_text("IMPORTED = True\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path)  # found in the working directory, as python -m would
    monkeypatch.setattr(sys, "path", list(sys.path))
    seen = []
    monkeypatch.setattr(f"attnpool.cli._cmd_{command}", lambda args: seen.append(set(modules) <= set(sys.modules)))
    required = {"train": [], "predict": ["--run", "r", "--input", "a", "--output", "b"], "export": ["--model", "m",
                "--output", "o"], "explain": ["--run", "r", "--input", "a", "--output", "b"], "serve": ["--run", "r"],
                "compare": ["--poolings", "mean"]}[command]
    try:
        assert main(["--import", modules[0], command, *required, "--import", modules[1]]) is None
    finally:
        for name in modules:
            sys.modules.pop(name, None)
    assert seen == [True]


def test_a_module_that_fails_to_import_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(api, "train", lambda *args, **kwargs: pytest.fail("ran without the module"))
    assert main(["--import", "no_such_module_here", "train", "--train-file", "a.csv"]) == 2
    err = capsys.readouterr().err
    assert err == ("attnpool train: error: --import no_such_module_here: ModuleNotFoundError: No module named "
                   "'no_such_module_here' (run from the folder holding no_such_module_here.py, or add that folder "
                   "to PYTHONPATH)\n")
    # the module's name is not taken for the command: a misspelt flag after it is still named
    assert unknown_flags(build_parser(), ["--import", "mine", "train", "--max-lenght", "3"]) == (
        "train", ["--max-lenght", "3"])
