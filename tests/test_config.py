"""TrainConfig: one declaration per option (help, group, choices), YAML/JSON loading, make_config, option text."""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import pytest

from attnpool.config import (
    GROUPS,
    SCHEDULERS,
    ConfigError,
    TrainConfig,
    load_yaml,
    make_config,
    parse_options,
)
from attnpool.options import parse_pooling_layers
from attnpool.precision import PRECISIONS
from attnpool.tasks import LOSSES, TASKS
from model_helpers import users_item_pooler

# Every field and its default: run directories and users' YAML files rely on these (model is computed).
DEFAULTS = {
    "train_file": None, "valid_file": None, "text_cols": [], "template": None, "label": "label", "id_col": "id",
    "task": "regression", "preset": None, "data_dir": None, "limit": None,
    "group_context": None, "group_context_by": [], "group_context_pooling": "all",
    "group_context_dropout": 0.0,
    "folds": 5, "only_folds": None, "group_col": None, "label_bins": 10, "split_seed": None,
    "pooling": "attention", "pooling_options": {}, "pooling_layers": "last", "recurrent": None,
    "recurrent_layers": 1, "encoder_dropout": None, "head_dropout": 0.1,
    "multi_sample_dropout": 1, "head_hidden_size": None, "output_activation": None, "loss": None,
    "reinit_layers": 0, "freeze_layers": None, "freeze_word_embeddings": None,
    "epochs": 3.0, "batch_size": 16, "eval_batch_size": 64, "grad_accum": 1, "max_length": 128, "lr": 2e-5,
    "head_lr": 1e-3, "pooler_lr": None, "llrd": 1.0, "weight_decay": 0.01, "warmup_ratio": 0.1,
    "scheduler": "cosine", "precision": "auto", "gradient_checkpointing": False, "eval_steps": None,
    "early_stopping_patience": None, "ema_decay": None, "adversarial": None, "adversarial_start": 1.0,
    "adversarial_eps": None, "adversarial_lr": 1.0, "seed": 42,
    "output_dir": "runs/attnpool", "overwrite": False, "resume": False, "report_to": "none",
}


def test_field_names_and_defaults_are_unchanged():
    values = TrainConfig().to_dict()
    assert isinstance(values.pop("model"), str)
    assert values == DEFAULTS
    assert list(values) == list(DEFAULTS)  # the order of the saved config.yaml too


def test_every_field_declares_one_line_of_help_and_a_group_in_config_order():
    fields = dataclasses.fields(TrainConfig)
    for f in fields:
        help_text = f.metadata.get("help")
        assert isinstance(help_text, str) and len(help_text) > 10 and "\n" not in help_text, f.name
        assert f.metadata.get("group") in GROUPS, f.name
    order = [f.metadata["group"] for f in fields]
    seen = list(dict.fromkeys(order))
    assert seen == list(GROUPS), "groups appear in the declared order"
    assert order == sorted(order, key=seen.index), "each group's fields are contiguous"
    groups = {f.name: f.metadata["group"] for f in fields}
    assert (groups["train_file"], groups["folds"], groups["pooling"], groups["lr"], groups["resume"]) == (
        "data", "validation", "model", "recipe", "output")


def test_choices_come_from_the_modules_that_own_them_and_validate_checks_them():
    choices = {f.name: f.metadata.get("choices") for f in dataclasses.fields(TrainConfig)}
    assert choices["task"] == TASKS and choices["precision"] == PRECISIONS and choices["scheduler"] == SCHEDULERS
    assert choices["loss"] == LOSSES
    base = {"train_file": "x.csv", "text_cols": ["a"]}
    TrainConfig(**base).validate()
    TrainConfig(**base, loss="bce", output_activation="sigmoid").validate()
    with pytest.raises(ValueError, match="^loss bce on a regression target .*add --output-activation sigmoid"):
        TrainConfig(**base, loss="bce").validate()  # its raw logits were the predictions
    TrainConfig(**base, task="multilabel", loss="bce").validate()
    TrainConfig(preset="pppm", data_dir="d", loss="bce").validate()  # the preset adds the sigmoid
    with pytest.raises(ValueError, match=r"^output_activation sigmoid is for regression targets in \[0, 1\], got task "
                                         r"multilabel, whose scores are already probabilities .*; drop "
                                         "output_activation$"):
        TrainConfig(**base, task="multilabel", output_activation="sigmoid").validate()
    for name, bad in (("task", "ranking"), ("precision", "fp8"), ("scheduler", "step"), ("loss", "hinge"),
                      ("output_activation", "tanh")):
        with pytest.raises(ValueError, match=f"^{name} must be one of .*, got '{bad}'$"):
            TrainConfig(**base, **{name: bad}).validate()


@pytest.mark.parametrize(("name", "text", "where"), [
    ("tab.yaml", "label: score\n\tfolds: 3\n", ":2:1: found character '\\t' that cannot start any token"),
    ("colon.yaml", "label: score\nfolds 3\nlr: 1\n", ":3:1: could not find expected ':'"),
    ("indent.yaml", "model: x\n  task: binary\n", ":2:7: mapping values are not allowed here"),
    ("flow.yaml", "lr: 1e-3\nepochs: [1, 2\nseed: 3\n", ":3:5: expected ',' or ']', but got ':'"),
    ("bad.json", '{"lr": 1e-3,\n "folds": }', ":2:11: Expecting value"),
])
def test_a_syntax_error_is_one_line_naming_file_line_and_column(tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    message = str(info.value)
    assert message.startswith(f"{path}{where}") and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_load_yaml_keeps_its_other_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping of option: value, got list"):
        load_yaml(tmp_path / "list.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(tmp_path / "empty.yaml") == {}
    (tmp_path / "dashes.yaml").write_text("train-file: a.csv\nhead_lr: 0.01\n")
    assert load_yaml(tmp_path / "dashes.yaml") == {"train_file": "a.csv", "head_lr": 0.01}
    (tmp_path / "typo.yaml").write_text("lr: 0.1\nepoch: 2\n")
    with pytest.raises(ConfigError,
                       match=r"typo.yaml: unknown option\(s\) epoch \(did you mean epochs\?\); valid options: "):
        make_config(tmp_path / "typo.yaml")


@pytest.mark.parametrize(("given", "expected"), [
    (["last"], "last"), (["all"], "all"), (["0", "-1"], [0, -1]), (["+3"], [3]), ([2, -1], [2, -1]),
    ("last", "last"), ((1, 2), [1, 2]), (-2, [-2]), ("0 -1", [0, -1]),  # a config file's `pooling_layers: -2`
])
def test_pooling_layers_from_the_command_line_are_normalised(given, expected):
    assert make_config(pooling_layers=given).pooling_layers == expected
    assert TrainConfig(pooling_layers=given).pooling_layers == expected
    assert parse_pooling_layers(given) == expected


@pytest.mark.parametrize("bad", [["last", "0"], ["x"], ["1.5"], [True], [0.5], "lasts", 1.5])
def test_pooling_layers_that_are_neither_words_nor_indices_are_refused(bad):
    with pytest.raises(ConfigError, match="pooling_layers must be last, all or layer indices"):
        make_config(pooling_layers=bad)


def test_parse_options_parses_json_values_and_names_a_bad_item():
    assert parse_options(["attn_size=128", "norm=true", "name=mine", "sizes=[1, 2]", "ratio=0.5", "eq=a=b"],
                         "--pooling-opt") == {"attn_size": 128, "norm": True, "name": "mine", "sizes": [1, 2],
                                              "ratio": 0.5, "eq": "a=b"}
    assert parse_options([" attn_size =8", "attn_size=16"], "x") == {"attn_size": 16}  # a later key wins
    assert parse_options([], "x") == {}
    with pytest.raises(ConfigError, match=r"^option 'attn_size' of --pooling-opt is not key=value; expected "
                                          r"KEY=VALUE, e\.g\. attn_size=128$"):
        parse_options(["num_heads=2", "attn_size"], "--pooling-opt")
    with pytest.raises(ConfigError, match="option '=3' of 'attention:=3' is not key=value"):
        parse_options(["=3"], "'attention:=3'")


def test_make_config_from_a_config_a_dict_or_a_file_with_overrides(tmp_path):
    base = TrainConfig(train_file="a.csv", text_cols=["q"], lr=1e-4, pooling_options={"attn_size": 64})
    cfg = make_config(base, lr=3e-4, folds=3)
    assert (cfg.train_file, cfg.lr, cfg.folds, cfg.text_cols) == ("a.csv", 3e-4, 3, ["q"])
    assert base.lr == 1e-4, "the given config is not changed"
    assert make_config({"train_file": "b.csv", "epochs": 1}, epochs=2).to_dict() == {
        **TrainConfig().to_dict(), "train_file": "b.csv", "epochs": 2}
    assert make_config() == TrainConfig()
    (tmp_path / "recipe.yaml").write_text("train_file: c.csv\nlr: 0.0005\nfolds: 4\npooling_options:\n"
                                          "  attn_size: 32\n  num_heads: 2\n")
    (tmp_path / "recipe.json").write_text(json.dumps({"train_file": "c.csv", "lr": 0.0005, "folds": 4}))
    for path in (tmp_path / "recipe.yaml", str(tmp_path / "recipe.json")):
        cfg = make_config(path, folds=2, seed=7)
        assert (cfg.train_file, cfg.lr, cfg.folds, cfg.seed) == ("c.csv", 0.0005, 2, 7)
    # a dict option is merged key by key, as --pooling-opt adds to the file's pooling_options
    cfg = make_config(tmp_path / "recipe.yaml", pooling_options={"num_heads": 4, "gated": True})
    assert cfg.pooling_options == {"attn_size": 32, "num_heads": 4, "gated": True}
    assert make_config(base, pooling_options={"dropout": 0.1}).pooling_options == {"attn_size": 64, "dropout": 0.1}
    # another pooler does not inherit the file's options ("pooler 'mean' got unknown option(s) attn_size")
    assert make_config(tmp_path / "recipe.yaml", pooling="mean", text_cols=["q"]).validate().pooling_options == {}
    assert make_config(base, pooling="attention").pooling_options == {"attn_size": 64}  # the same pooler keeps them
    # ... and the new pooler's own options are not merged into the old pooler's (gem got attn_size before)
    assert make_config(base, pooling="gem", pooling_options={"p": 3}).validate().pooling_options == {"p": 3}
    # one rule, options given or not: a related pooler does not inherit them either (they are given again)
    assert make_config(base, pooling="multihead_attention", pooling_options={"num_heads": 2}).pooling_options == {
        "num_heads": 2}
    with pytest.raises(ConfigError, match=r"recipe.yaml: unknown option\(s\) learning_rate"):
        make_config(tmp_path / "recipe.yaml", learning_rate=1.0)
    with pytest.raises(FileNotFoundError):
        make_config(tmp_path / "nope.yaml")



def test_the_word_embeddings_freeze_by_default_except_for_fgm_and_contradictions_are_refused():
    base = {"train_file": "x.csv", "text_cols": ["a"]}
    assert TrainConfig(**base).resolved_freeze_word_embeddings() is True
    assert TrainConfig(**base, freeze_word_embeddings=False).resolved_freeze_word_embeddings() is False
    assert TrainConfig(**base, freeze_layers=1).resolved_freeze_word_embeddings() is True
    fgm = TrainConfig(**base, adversarial="fgm").validate()
    assert fgm.resolved_freeze_word_embeddings() is False  # fgm perturbs them along their gradient: trained
    assert TrainConfig(**base, adversarial="awp").validate().resolved_freeze_word_embeddings() is True
    with pytest.raises(ValueError, match="^adversarial fgm perturbs the word embeddings along their gradient, and "
                                         "--freeze-word-embeddings: train them"):
        TrainConfig(**base, adversarial="fgm", freeze_word_embeddings=True).validate()
    with pytest.raises(ValueError, match="and --freeze-layers, which freezes them: train them"):
        TrainConfig(**base, adversarial="fgm", freeze_layers=0).validate()
    with pytest.raises(ValueError, match="^freeze_layers=2 freezes the word embeddings too; drop "
                                         "--no-freeze-word-embeddings"):
        TrainConfig(**base, freeze_layers=2, freeze_word_embeddings=False).validate()


def test_missing_text_columns_lists_the_columns_of_the_training_file(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("review,stars\ngood,5\n")
    with pytest.raises(ValueError, match=r"^say which columns hold the text: --text-cols COL \[COL \.\.\.\] or "
                                         rf"--template .*; {path} has the columns review, stars$"):
        TrainConfig(train_file=str(path)).validate()
    with pytest.raises(ValueError, match=r"or --template '\{a\} \[SEP\] \{b\}'$"):  # unreadable: its own error later
        TrainConfig(train_file=str(tmp_path / "absent.csv")).validate()


def test_a_pooler_name_or_option_that_cannot_build_is_refused_by_validate_with_the_valid_ones():
    base = {"train_file": "t.csv", "text_cols": ["text"]}
    TrainConfig(**base, pooling="attention", pooling_options={"attn_size": 128}).validate()
    TrainConfig(**base, pooling="attention+mean", pooling_options={"combine": "project"}).validate()
    with pytest.raises(ValueError, match=r"^pooling: Unknown pooler 'meen'\. Did you mean 'mean'\?"):
        TrainConfig(**base, pooling="meen").validate()
    with pytest.raises(ValueError, match=r"^pooling with pooling_options attn_size=128: pooler 'mean' got unknown "
                                         r"option\(s\) attn_size; valid options: \(none\)$"):
        TrainConfig(**base, pooling="mean", pooling_options={"attn_size": 128}).validate()
    with pytest.raises(ValueError, match=r"pooler 'attention' got unknown option\(s\) atn_size; valid options: .*"
                                         r"attn_size"):
        TrainConfig(**base, pooling="attention", pooling_options={"atn_size": 128}).validate()


def test_one_value_where_a_list_is_expected_is_a_list_of_one(tmp_path):
    """YAML's `text_cols: review` is the column review, not the columns r, e, v, i, w."""
    (tmp_path / "c.yaml").write_text("text_cols: review\ngroup_context_by: anchor\nonly_folds: 1\ntrain_file: x.csv\n")
    cfg = TrainConfig.from_dict(load_yaml(tmp_path / "c.yaml"))
    assert (cfg.text_cols, cfg.group_context_by, cfg.only_folds) == (["review"], ["anchor"], [1])
    assert TrainConfig(text_cols=["a", "b"], only_folds=[0, 2]).only_folds == [0, 2]


@pytest.mark.parametrize(("options", "message"), [
    ({"only_folds": [5]}, r"^only_folds names folds \[5\]; the folds are numbered 0 to 4 \(folds=5\)$"),
    ({"only_folds": [-1, 0]}, r"^only_folds names folds \[-1, 0\]; the folds are numbered 0 to 4"),
    ({"only_folds": []}, r"^only_folds names folds \[\]"),
    ({"only_folds": [1], "valid_file": "v.csv"}, r"numbered 0 to 0 \(valid_file: one fold\)$"),
    ({"warmup_ratio": 1.0}, r"^warmup_ratio is a share of the training steps, in \[0, 1\), got 1.0$"),
    ({"warmup_ratio": -0.1}, r"^warmup_ratio is a share"),
])
def test_folds_to_train_and_the_warm_up_share_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(train_file="x.csv", text_cols=["a"], **options).validate()
    TrainConfig(train_file="x.csv", text_cols=["a"], only_folds=[0, 4], warmup_ratio=0.99).validate()



def test_a_config_files_values_are_read_as_their_options_types(tmp_path):
    """YAML 1.1 reads `lr: 1e-4` as the string "1e-4": validate passed it and the optimizer failed in fold 0."""
    (tmp_path / "c.yaml").write_text("lr: 1e-4\nhead_lr: 5e-3\nbatch_size: 16.0\nlabel: 2021\nema_decay:\n")
    cfg = make_config(tmp_path / "c.yaml")
    assert (cfg.lr, cfg.head_lr, cfg.batch_size, cfg.label, cfg.ema_decay) == (1e-4, 5e-3, 16, "2021", None)
    assert type(cfg.batch_size) is int and type(cfg.lr) is float
    assert make_config({"epochs": 1, "text_cols": None}).epochs == 1  # an int is a number; a list option's null passes
    for line, message in [("batch_size: '16'", "batch_size must be a whole number, got '16'"),
                          ("batch_size: 1.5", "batch_size must be a whole number, got 1.5"),
                          ("epochs:", "epochs needs a value; remove the line to keep its default"),
                          ("gradient_checkpointing: 'no'", "gradient_checkpointing must be true or false, got 'no'"),
                          ("lr: fast", "lr must be a number, got 'fast'")]:
        (tmp_path / "bad.yaml").write_text(line + "\n")
        with pytest.raises(ConfigError, match=f"^{re.escape(str(tmp_path / 'bad.yaml'))}: {re.escape(message)}"):
            make_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(("options", "message"), [
    ({"lr": -2e-5}, "lr must be >= 0, got -2e-05"),
    ({"head_lr": -1e-3}, "head_lr must be >= 0, got -0.001"),
    ({"pooler_lr": float("nan")}, "pooler_lr must be >= 0, got nan"),
    ({"weight_decay": -0.1}, "weight_decay must be >= 0, got -0.1"),
    ({"early_stopping_patience": 0}, "early_stopping_patience must be positive, got 0"),
    ({"limit": 0}, "limit must be positive, got 0"),
    ({"eval_steps": 0}, "eval_steps must be positive, got 0"),
    ({"multi_sample_dropout": 0}, "multi_sample_dropout must be positive, got 0"),
    ({"reinit_layers": -2}, "reinit_layers must be >= 0, got -2"),
    ({"freeze_layers": -1}, "freeze_layers must be >= 0, got -1"),
    ({"head_dropout": 1.5}, "head_dropout must be in [0, 1), got 1.5"),
    ({"overwrite": True, "resume": True}, "overwrite deletes the run that resume would continue: give one of them"),
])
def test_values_that_would_train_wrong_or_fail_later_are_refused_by_validate(options, message):
    """A negative learning rate trained uphill for the whole run; zero patience or limit silently meant "off"."""
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        TrainConfig(train_file="x.csv", text_cols=["a"], **options).validate()
    TrainConfig(train_file="x.csv", text_cols=["a"], lr=0.0, weight_decay=0.0, reinit_layers=0, freeze_layers=0,
                head_dropout=0.0, early_stopping_patience=1, limit=1, resume=True).validate()


def test_a_config_files_pooling_options_are_read_as_pooling_opt_reads_them(tmp_path):
    """YAML reads `eps: 1e-7` as the string "1e-7": validate passed it and gem failed with a TypeError in fold 0."""
    (tmp_path / "gem.yaml").write_text("train_file: a.csv\ntext_cols: q\npooling: gem\npooling_options:\n"
                                       "  eps: 1e-7\n  p: '4'\n")
    cfg = make_config(tmp_path / "gem.yaml").validate()
    assert cfg.pooling_options == {"eps": 1e-7, "p": 4} and type(cfg.pooling_options["eps"]) is float
    assert make_config(tmp_path / "gem.yaml", pooling_options={"eps": 1e-6}).pooling_options == {"eps": 1e-6, "p": 4}
    # the top-level numbers were already read as their options' types, optional ones too
    (tmp_path / "rates.yaml").write_text("lr: 1e-4\npooler_lr: 3e-4\nadversarial: awp\nadversarial_eps: 1e-3\n"
                                         "weight_decay: 1e-2\n")
    cfg = make_config(tmp_path / "rates.yaml")
    assert (cfg.lr, cfg.pooler_lr, cfg.adversarial_eps, cfg.weight_decay) == (1e-4, 3e-4, 1e-3, 1e-2)
    assert all(type(v) is float for v in (cfg.lr, cfg.pooler_lr, cfg.adversarial_eps, cfg.weight_decay))


def test_pooling_options_that_are_not_a_mapping_are_refused_naming_the_form(tmp_path):
    """A list or a string crashed the error message itself ('list' object has no attribute 'items')."""
    for text in ("[attn_size=128]", "attn_size=128"):
        (tmp_path / "c.yaml").write_text(f"train_file: a.csv\ntext_cols: q\npooling_options: {text}\n")
        with pytest.raises(ConfigError, match=r"c\.yaml: pooling_options must be a mapping: key: value lines "
                                              r"indented under pooling_options: \(e\.g\. '  attn_size: 128'\), got "):
            make_config(tmp_path / "c.yaml")
    with pytest.raises(ValueError, match=r"^pooling_options must be a mapping of option names to values \(--pooling"):
        TrainConfig(train_file="a.csv", text_cols=["q"], pooling_options=["attn_size=128"]).validate()


def test_empty_lines_of_a_config_file_are_no_columns_and_no_options(tmp_path):
    """`text_cols:` (None) with a template passed validate and failed in fold 0 on len(None)."""
    (tmp_path / "c.yaml").write_text("train_file: a.csv\ntext_cols:\ntemplate: '{a} [SEP] {b}'\ngroup_context_by:\n"
                                     "pooling_options:\n")
    cfg = make_config(tmp_path / "c.yaml").validate()
    assert (cfg.text_cols, cfg.group_context_by, cfg.pooling_options) == ([], [], {})
    assert TrainConfig(text_cols=None, group_context_by=None, pooling_options=None).to_dict() == TrainConfig(
        text_cols=[], group_context_by=[], pooling_options={}).to_dict()


def test_a_pooler_that_does_not_build_is_refused_by_validate_naming_its_options():
    """attn_size=-3 or a recurrent layer before a multi-layer pooler failed in fold 0, after the run was written."""
    base = {"train_file": "t.csv", "text_cols": ["text"]}
    with pytest.raises(ValueError, match=r"^pooling with pooling_options attn_size=-3: the pooler does not build "
                                         r"\(tried at a stand-in hidden size of \d+\): ValueError: AttentionPooling: "
                                         r"attn_size must be >= 1, got -3; fix the value in --pooling-opt KEY=VALUE"):
        TrainConfig(**base, pooling_options={"attn_size": -3}).validate()
    with pytest.raises(ValueError, match=r"^pooling with pooling_options eps=abc: the pooler does not build .*"
                                         r"ValueError: GeMPooling: eps must be a number > 0, got 'abc' \(str\)"):
        TrainConfig(**base, pooling="gem", pooling_options={"eps": "abc"}).validate()
    with pytest.raises(ValueError, match=r"^recurrent lstm runs over one sequence of token states, but pooler "
                                         r"'weighted_layer' reads several encoder layers stacked .* or drop "
                                         r"--recurrent"):
        TrainConfig(**base, pooling="weighted_layer", recurrent="lstm").validate()
    with pytest.raises(ValueError, match="but pooler 'combined' reads several encoder layers"):
        TrainConfig(**base, pooling="attention+weighted_layer", recurrent="gru").validate()
    TrainConfig(**base, recurrent="lstm").validate()
    # values that depend on the encoder's hidden size are left to the real build: no real split is refused
    for pooling, options in (("multihead_attention", {"num_heads": 12}), ("multihead_attention", {"num_heads": 5}),
                             ("multihead_attention", {"num_heads": 64}), ("ggem", {"num_groups": 1024})):
        TrainConfig(**base, pooling=pooling, pooling_options=options).validate()
    assert logging.getLogger("attnpool.pooling").level == logging.NOTSET, "the trial build restores the logger"


def test_a_pooler_that_builds_at_a_real_hidden_size_or_needs_real_tensors_is_not_refused_by_validate():
    """The trial build at a stand-in size on the meta device refused heads that split a real encoder (pma
    num_heads=11: hidden size 704) and every pooler of a user's calling .item() in __init__, resumed runs too."""
    base = {"train_file": "t.csv", "text_cols": ["text"]}
    for pooling in ("pma", "adaptive", "multihead_attention"):
        TrainConfig(**base, pooling=pooling, pooling_options={"num_heads": 11}).validate()
    with pytest.raises(ValueError, match=r"^pooling with pooling_options num_heads=-1: the pooler does not build .*"
                                         r"num_heads must be >= 1, got -1"):
        TrainConfig(**base, pooling="pma", pooling_options={"num_heads": -1}).validate()

    with users_item_pooler("test_config_scaled_mean"), users_item_pooler("test_config_scaled_layers",
                                                                           needs_all_layers=True):
        TrainConfig(**base, pooling="test_config_scaled_mean", pooling_options={"scale": 2.0}).validate()
        TrainConfig(**base, pooling="attention+test_config_scaled_mean", recurrent="lstm").validate()
        with pytest.raises(ValueError, match="but pooler 'test_config_scaled_layers' reads several encoder layers"):
            TrainConfig(**base, pooling="test_config_scaled_layers", recurrent="lstm").validate()


@pytest.mark.parametrize(("options", "message"), [
    ({"seed": -1}, "seed must be in [0, 2**32 - 1], the seeds numpy and torch take, got -1; give --seed N with N >= 0"),
    ({"seed": 2**32}, "seed must be in [0, 2**32 - 1]"),
    ({"split_seed": -5}, "split_seed must be in [0, 2**32 - 1], the seeds numpy and torch take, got -5; give "
                         "--split-seed N"),
    ({"lr": float("inf")}, "lr must be a finite number, got inf"),
    ({"head_lr": float("inf")}, "head_lr must be a finite number, got inf"),
    ({"weight_decay": float("inf")}, "weight_decay must be a finite number, got inf"),
    ({"epochs": float("inf")}, "epochs must be a finite number, got inf"),
    ({"adversarial": "awp", "adversarial_eps": float("inf")}, "adversarial_eps must be a finite number, got inf"),
    ({"adversarial": "awp", "adversarial_eps": float("nan")}, "adversarial_eps must be a finite number, got nan"),
    ({"group_context": "target"}, "--group-context target needs --group-context-by COL [COL ...]"),
])
def test_seeds_out_of_range_and_infinite_numbers_are_refused_by_validate(options, message):
    """A negative seed failed after the config and train.log were written; lr=inf passed `>= 0`."""
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        TrainConfig(train_file="x.csv", text_cols=["a"], **options).validate()
    TrainConfig(train_file="x.csv", text_cols=["a"], seed=0, split_seed=2**32 - 1).validate()
    TrainConfig(preset="pppm", data_dir="d", group_context="target").validate()  # the preset's keys: anchor context


def test_a_config_files_none_is_the_flags_none_and_a_yaml_switch_for_text_is_explained(tmp_path):
    """--help lists none for --recurrent, --loss...; YAML's `recurrent: none` was refused, `template: none` taken
    literally."""
    (tmp_path / "c.yaml").write_text("recurrent: none\nloss: None\nema_decay: none\ntemplate: none\ngroup_col: none\n"
                                     "freeze_word_embeddings: none\nonly_folds: none\nid_col: NONE\n")
    cfg = make_config(tmp_path / "c.yaml")
    assert all(getattr(cfg, name) is None for name in ("recurrent", "loss", "ema_decay", "template", "group_col",
                                                      "freeze_word_embeddings", "only_folds", "id_col"))
    assert make_config({"label": "none"}).label == "none"  # not optional: the text itself
    (tmp_path / "b.yaml").write_text("label: no\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: label must be text, got False; YAML reads an unquoted yes, no, "
                                          r"on, off, true or false as a switch: quote the text \('no'\)$"):
        make_config(tmp_path / "b.yaml")


def test_a_template_given_over_a_config_replaces_its_text_columns_and_the_reverse(tmp_path):
    """The file's text_cols with --template was refused when the data was read, and could not be cleared."""
    (tmp_path / "cols.yaml").write_text("train_file: a.csv\ntext_cols: [q, a]\n")
    (tmp_path / "template.yaml").write_text("train_file: a.csv\ntemplate: '{q} [SEP] {a}'\n")
    cfg = make_config(tmp_path / "cols.yaml", template="{q}")
    assert (cfg.text_cols, cfg.template) == ([], "{q}")
    cfg = make_config(tmp_path / "template.yaml", text_cols=["q"])
    assert (cfg.text_cols, cfg.template) == (["q"], None)
    assert make_config(tmp_path / "cols.yaml", template=None).text_cols == ["q", "a"]  # no template given: kept


def test_none_over_a_config_file_s_adversarial_or_recurrent_drops_the_options_that_depended_on_it(tmp_path):
    """--adversarial none over a file's awp with eps/lr/start was refused: those need adversarial."""
    from attnpool.config import make_config

    (tmp_path / "adv.yaml").write_text("train_file: t.csv\ntext_cols: [a]\nadversarial: awp\nadversarial_eps: 0.01\n"
                                       "adversarial_lr: 0.5\nadversarial_start: 0.5\nrecurrent: lstm\n"
                                       "recurrent_layers: 2\n")
    cfg = make_config(tmp_path / "adv.yaml", adversarial=None, recurrent=None).validate()
    assert (cfg.adversarial, cfg.adversarial_eps, cfg.adversarial_lr, cfg.adversarial_start) == (None, None, 1.0, 1.0)
    assert (cfg.recurrent, cfg.recurrent_layers) == (None, 1)
    fgm = make_config(tmp_path / "adv.yaml", adversarial="fgm", freeze_word_embeddings=False).validate()
    assert fgm.resolved_adversarial_eps() == 1.0, "awp's eps (a relative size) is not fgm's (a norm)"
    kept = make_config(tmp_path / "adv.yaml", adversarial="awp", recurrent="gru")
    assert (kept.adversarial_eps, kept.adversarial_lr, kept.recurrent_layers) == (0.01, 0.5, 2)
    assert make_config(tmp_path / "adv.yaml", adversarial=None, adversarial_start=0.5).adversarial_start == 0.5


def test_a_config_file_s_adversarial_sizes_stay_when_the_flag_names_the_perturbation_the_file_leaves_out(tmp_path):
    """A file holding the sizes and --adversarial awp per run: the file named no perturbation, and its eps, lr and
    start were dropped as another perturbation's; the run trained with the defaults."""
    from attnpool.config import make_config

    (tmp_path / "sizes.yaml").write_text("train_file: t.csv\ntext_cols: [a]\nadversarial_eps: 0.002\n"
                                         "adversarial_lr: 0.5\nadversarial_start: 0.5\n")
    cfg = make_config(tmp_path / "sizes.yaml", adversarial="awp").validate()
    assert (cfg.adversarial, cfg.adversarial_eps, cfg.adversarial_lr, cfg.adversarial_start) == ("awp", 0.002, 0.5, 0.5)


def test_the_pearson_loss_refuses_batches_of_one_row():
    """A batch of one has no correlation: loss 1 and no gradient at every step, and the run reported complete."""
    from attnpool.config import make_config

    with pytest.raises(ValueError, match=re.escape("loss pearson correlates the rows of each batch, and batch_size 1 "
                                                   "has no correlation to learn from")):
        make_config(None, train_file="t.csv", text_cols=["a"], loss="pearson", batch_size=1, grad_accum=8).validate()
    make_config(None, train_file="t.csv", text_cols=["a"], loss="pearson", batch_size=2).validate()


@pytest.mark.parametrize(("text", "message"), [
    ("text_cols: [first, null]", r"adv\.yaml: text_cols must be a list of column names \(text\), got \['first', "
     r"None\]: None is not a column name; quote"),
    ("text_cols: [[first, second]]", r"text_cols must be a list .* \['first', 'second'\] is not a column name"),
    ("text_cols: {first: 1}", r"text_cols must be a list of column names"),
    ("group_context_by: [yes]", r"group_context_by must be a list .* True is not a column name"),
    ("text_cols: [a]\nonly_folds: [true]", r"only_folds must be a list of fold numbers \(whole numbers from 0\), "
     r"got \[True\]"),
    ("text_cols: [a]\nonly_folds: [0.5]", r"only_folds must be a list of fold numbers"),
])
def test_a_config_file_s_list_items_of_the_wrong_kind_are_refused_naming_the_option(tmp_path, text, message):
    """[first, null] and [[a, b]] failed in tracebacks, only_folds: [true] trained fold 1."""
    from attnpool.config import make_config

    (tmp_path / "adv.yaml").write_text(f"train_file: t.csv\n{text}\n")
    with pytest.raises(ConfigError, match=message):
        make_config(tmp_path / "adv.yaml")


def test_a_config_file_s_number_column_name_is_text_and_empty_pooling_layers_are_refused(tmp_path):
    from attnpool.config import make_config

    (tmp_path / "c.yaml").write_text("train_file: t.csv\ntext_cols: [2021, second]\ngroup_context_by: [7]\n")
    cfg = make_config(tmp_path / "c.yaml")
    assert (cfg.text_cols, cfg.group_context_by) == (["2021", "second"], ["7"])
    with pytest.raises(ValueError, match=r"^pooling_layers is empty: give last, all or layer indices"):
        TrainConfig(train_file="t.csv", text_cols=["a"], pooling_layers=[]).validate()
