"""Options given to from_pretrained are checked like new ones; re-heading a folder for another task; the loss checks."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.model.losses import compute_loss, resolve_problem_type
from model_helpers import batch, tiny_config

CLASSES = {0: "a", 1: "b", 2: "c"}


@pytest.fixture
def sigmoid_folder(tmp_path):
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), output_activation="sigmoid").save_pretrained(
        tmp_path / "sigmoid")
    return tmp_path / "sigmoid"


@pytest.mark.parametrize("new_head", [{"id2label": CLASSES}, {"num_labels": 3}, {"num_labels": 3,
                                                                                 "output_activation": None}])
def test_a_sigmoid_regression_re_headed_for_classes_drops_its_sigmoid(sigmoid_folder, tmp_path, new_head):
    """id2label= kept the sigmoid (CE on sigmoids, a saved folder that did not load); num_labels=3 was refused."""
    model = AttnPoolForSequenceClassification.from_pretrained(sigmoid_folder, **new_head, ignore_mismatched_sizes=True)
    assert (model.config.num_labels, model.config.problem_type, model.config.output_activation) == (3, None, None)
    assert model.config.label2id == {name: i for i, name in model.config.id2label.items()}
    labels = torch.tensor([0, 2, 1])
    out = model(*batch([5, 3, 4]), labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))  # on the raw logits, not sigmoids
    assert model.config.problem_type == "single_label_classification"
    model.save_pretrained(tmp_path / "classes")
    again = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "classes")
    assert (again.config.num_labels, again.config.output_activation) == (3, None)


def test_a_re_headed_sigmoid_kept_for_classes_is_refused(sigmoid_folder):
    with pytest.raises(ValueError, match="output_activation 'sigmoid' is for regression targets in \\[0, 1\\], got "
                                         "problem_type None with num_labels=3"):
        AttnPoolForSequenceClassification.from_pretrained(sigmoid_folder, num_labels=3, output_activation="sigmoid",
                                                          ignore_mismatched_sizes=True)
    # several [0, 1] targets asked for keep it
    kept = AttnPoolForSequenceClassification.from_pretrained(sigmoid_folder, num_labels=3, problem_type="regression",
                                                             ignore_mismatched_sizes=True)
    assert (kept.config.problem_type, kept.config.output_activation) == ("regression", "sigmoid")


@pytest.mark.parametrize(("option", "message"), [
    ({"loss": "mae"}, "loss must be one of ('mse', 'bce', 'cross_entropy', 'pearson') or None, got 'mae'"),
    ({"multi_sample_dropout": 0}, "multi_sample_dropout must be >= 1, got 0"),
    ({"output_activation": "softmax"}, "output_activation must be one of (None, 'sigmoid'), got 'softmax'"),
    ({"pooling_layers": "first"}, "pooling_layers must be 'last', 'all' or a list of layer indices, got 'first'"),
    ({"loss": "cross_entropy"}, "from_pretrained: loss='cross_entropy' needs problem_type='single_label_classification'"
                                ", not 'regression'"),
])
def test_options_given_at_load_are_checked(tmp_path, option, message):
    """transformers set them on the built config unchecked: loss="mae" trained MSE, msd=0 raised in torch.stack."""
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as err:
        AttnPoolForSequenceClassification.from_pretrained(tmp_path, **option)
    assert message in str(err.value)


def test_options_given_at_load_apply(tmp_path):
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    model = AttnPoolForSequenceClassification.from_pretrained(tmp_path, loss="pearson", multi_sample_dropout=2,
                                                              pooling="mean")
    assert (model.config.loss, model.config.multi_sample_dropout, model.attnpool.pooler.name) == ("pearson", 2, "mean")
    assert AttnPoolConfig.from_pretrained(tmp_path, head_dropout=0.3).head_dropout == 0.3


@pytest.mark.parametrize("problem_type", ["single_label_classification", "multi_label_classification"])
def test_a_classifier_re_headed_to_one_output_is_a_regression(tmp_path, problem_type):
    """It kept single_label_classification: float labels were refused, int labels gave CE over one class (loss 0)."""
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3, problem_type=problem_type,
                                                   loss="bce" if problem_type.startswith("multi") else None,
                                                   ).save_pretrained(tmp_path)
    model = AttnPoolForSequenceClassification.from_pretrained(tmp_path, num_labels=1, ignore_mismatched_sizes=True)
    assert (model.config.num_labels, model.config.problem_type, model.config.loss) == (1, "regression", None)
    labels = torch.tensor([0.1, 0.9, 0.4])
    out = model(*batch([5, 3, 4]), labels=labels)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.view(-1), labels))
    out.loss.backward()
    assert model.head.out.weight.grad.norm() > 0
    with pytest.raises(ValueError, match='`problem_type="single_label_classification"` requires `num_labels > 1`'):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path, num_labels=1, ignore_mismatched_sizes=True,
                                                          problem_type="single_label_classification")


@pytest.mark.parametrize(("options", "message"), [
    ({"num_labels": 1, "problem_type": "regression", "loss": "cross_entropy"},
     "loss='cross_entropy' needs problem_type='single_label_classification', not 'regression': leave loss None"),
    ({"num_labels": 1, "problem_type": "regression", "loss": "bce"},
     "loss='bce' on a regression head needs output_activation='sigmoid'"),
    ({"num_labels": 3, "problem_type": "multi_label_classification", "loss": "pearson"},
     "loss='pearson' needs problem_type='regression' (task regression), not 'multi_label_classification'"),
    ({"num_labels": 3, "problem_type": "multi_label_classification", "loss": "cross_entropy"},
     "loss='cross_entropy' needs problem_type='single_label_classification', not 'multi_label_classification'"),
])
def test_a_problem_type_given_checks_its_loss_at_construction(options, message):
    """Only single-label classification was checked: the others failed at the first labelled batch."""
    with pytest.raises(ValueError) as err:
        AttnPoolConfig(encoder=tiny_config("bert"), **options)
    assert str(err.value).startswith(f"AttnPoolConfig: {message}")
    with pytest.raises(ValueError, match="loss='cross_entropy' needs problem_type='single_label_classification'"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), loss="cross_entropy")  # regression


def test_a_saved_config_with_a_mismatched_loss_still_loads(tmp_path):
    """Configs saved before the check (never trained: the loss refused them) load; the loss refuses them still."""
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "loss": "cross_entropy"}))
    model = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="loss='cross_entropy' needs problem_type='single_label_classification'"):
        model(*batch([4, 3]), labels=torch.tensor([0.2, 0.4]))


def test_the_class_index_hint_is_only_for_an_inferred_problem_type():
    """With problem_type='regression' asked for, the hint to use single-label classification was misleading."""
    labels = torch.tensor([0.5, 1.0])
    asked = AttnPoolConfig(encoder=tiny_config("bert"), num_labels=3, problem_type="regression")
    with pytest.raises(ValueError) as err:
        compute_loss(torch.randn(2, 3), labels, asked, resolve_problem_type(asked, labels))
    assert str(err.value).endswith("expected shape (2, 3)")
    inferred = AttnPoolConfig(encoder=tiny_config("bert"), num_labels=3)
    with pytest.raises(ValueError, match="expected shape \\(2, 3\\); class indices need "
                                         "problem_type='single_label_classification'"):
        compute_loss(torch.randn(2, 3), labels, inferred, resolve_problem_type(inferred, labels))


def test_a_problem_type_given_for_a_head_of_the_same_size_drops_the_old_loss_and_sigmoid(sigmoid_folder, tmp_path):
    """The drop came only with a new head size: the same call with num_labels=4 loaded, this one was refused with
    advice about options never given ("leave loss None")."""
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3, loss="bce",
                                                   problem_type="multi_label_classification").save_pretrained(
        tmp_path / "multi")
    single = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "multi",
                                                               problem_type="single_label_classification")
    assert (single.config.problem_type, single.config.loss, single.config.num_labels) == (
        "single_label_classification", None, 3)
    multi = AttnPoolForSequenceClassification.from_pretrained(sigmoid_folder, problem_type="multi_label_classification",
                                                              num_labels=1)
    assert (multi.config.problem_type, multi.config.output_activation) == ("multi_label_classification", None)


def test_names_given_for_a_head_of_the_same_size_bring_their_label2id(tmp_path):
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3, id2label=CLASSES).save_pretrained(
        tmp_path / "abc")
    renamed = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "abc", id2label={0: "x", 1: "y", 2: "z"})
    assert renamed.config.id2label == {0: "x", 1: "y", 2: "z"}
    assert renamed.config.label2id == {"x": 0, "y": 1, "z": 2}
