"""The task loss: problem_type resolution, the default loss per problem type, and labels that do not fit."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from attnpool.model import AttnPoolConfig
from attnpool.model.losses import compute_loss, resolve_problem_type
from model_helpers import tiny_config


def config(**kwargs) -> AttnPoolConfig:
    kwargs.setdefault("num_labels", 1)  # what from_encoder defaults to (PretrainedConfig's own default is 2)
    return AttnPoolConfig(encoder=tiny_config("bert"), **kwargs)


def loss_of(raw, labels, **kwargs):
    cfg = config(**kwargs)
    return compute_loss(raw, labels, cfg, resolve_problem_type(cfg, labels))


@pytest.mark.parametrize(
    ("num_labels", "labels", "expected"),
    [
        (1, torch.tensor([0.5, 1.0]), "regression"),
        (1, torch.tensor([0, 1]), "regression"),  # one output: regression whatever the labels' dtype
        (3, torch.tensor([0, 2]), "single_label_classification"),
        (3, torch.tensor([0, 2], dtype=torch.uint8), "single_label_classification"),
        (3, torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]), "multi_label_classification"),
    ],
)
def test_unset_problem_type_follows_transformers(num_labels, labels, expected):
    cfg = config(num_labels=num_labels)
    assert cfg.problem_type is None
    assert resolve_problem_type(cfg, labels) == expected
    assert cfg.problem_type is None  # stored by the model once a loss was computed with it (below)


def test_the_model_keeps_an_inferred_problem_type_only_once_its_loss_was_computed():
    """A first batch of int multi-hot labels fixed single-label classification for good, in the saved config too."""
    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import batch, tiny_config

    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3)
    ids, mask = batch([4, 3])
    with pytest.raises(ValueError):
        model(ids, mask, labels=torch.tensor([[0, 1, 1], [1, 0, 0]]))  # int multi-hot: refused
    assert model.config.problem_type is None
    model(ids, mask, labels=torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]))
    assert model.config.problem_type == "multi_label_classification"


def test_a_set_problem_type_wins_over_the_labels():
    cfg = config(num_labels=3, problem_type="multi_label_classification")
    assert resolve_problem_type(cfg, torch.tensor([0, 2])) == "multi_label_classification"


def test_unknown_problem_type():
    cfg = config()
    cfg.problem_type = "ranking"
    expected = r"\('regression', 'single_label_classification', 'multi_label_classification'\)"
    with pytest.raises(ValueError, match=rf"problem_type must be one of {expected}, got 'ranking'"):
        resolve_problem_type(cfg, torch.rand(2))


def test_default_losses_are_the_closed_forms():
    raw = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    classes = torch.tensor([0, 2, 1, 2])
    torch.testing.assert_close(loss_of(raw, classes, num_labels=3), F.cross_entropy(raw, classes))
    multi_hot = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    torch.testing.assert_close(loss_of(raw, multi_hot, num_labels=3),
                               F.binary_cross_entropy_with_logits(raw, multi_hot))
    target = torch.tensor([0.1, 0.9, 0.5, 0.0])
    torch.testing.assert_close(loss_of(raw[:, :1], target), F.mse_loss(raw[:, 0], target))
    # A sigmoid regression output defaults to BCE on the raw output (the PPPM recipe) ...
    torch.testing.assert_close(loss_of(raw[:, :1], target, output_activation="sigmoid"),
                               F.binary_cross_entropy_with_logits(raw[:, 0], target))
    # ... and with loss="mse" it is the MSE of the sigmoid, what the model outputs.
    torch.testing.assert_close(loss_of(raw[:, :1], target, output_activation="sigmoid", loss="mse"),
                               F.mse_loss(torch.sigmoid(raw[:, 0]), target))


def test_multilabel_mse_compares_the_probabilities_the_model_reports():
    """MSE on the raw logits: logits equal to the 0/1 targets had loss 0, and every negative scored 0.5."""
    multi_hot = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    loss = loss_of(multi_hot.clone(), multi_hot, num_labels=3, loss="mse")
    torch.testing.assert_close(loss, F.mse_loss(torch.sigmoid(multi_hot), multi_hot))
    assert loss > 0.05


def test_bce_on_a_regression_head_needs_the_sigmoid_output():
    """Without it the raw outputs were fitted to logit(label) and reported as the predictions."""
    with pytest.raises(ValueError, match="loss='bce' on a regression head needs output_activation='sigmoid'"):
        loss_of(torch.randn(2, 1), torch.tensor([0.25, 0.75]), loss="bce")


def test_class_indices_of_any_integer_dtype_train():
    raw = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    expected = loss_of(raw, torch.tensor([0, 2]), num_labels=3)
    for dtype in (torch.int32, torch.int16, torch.int8):
        torch.testing.assert_close(loss_of(raw, torch.tensor([0, 2], dtype=dtype), num_labels=3), expected)


def test_regression_targets_of_shape_b_1_and_b_agree():
    raw = torch.randn(3, 1, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([0.2, -1.0, 3.0])
    torch.testing.assert_close(loss_of(raw, target.view(3, 1)), loss_of(raw, target))


@pytest.mark.parametrize("loss", ["mse", "bce"])
def test_single_label_classification_trains_cross_entropy_only(loss):
    """Another loss was ignored (cross_entropy trained) while the card said "Loss: mse"."""
    with pytest.raises(ValueError, match=f"loss '{loss}' does not train problem_type 'single_label_classification', "
                                         "which takes cross_entropy: leave loss None .*multi_label_classification"):
        config(num_labels=3, problem_type="single_label_classification", loss=loss)
    # a problem type that only the labels tell (integer class indices) is checked at the loss
    with pytest.raises(ValueError, match=f"loss='{loss}' does not train single-label classification"):
        loss_of(torch.randn(2, 3), torch.tensor([0, 2]), num_labels=3, loss=loss)
    assert config(num_labels=3, problem_type="single_label_classification", loss="cross_entropy").loss


def test_a_saved_classifier_whose_config_has_another_loss_loads_as_it_trained(tmp_path, caplog):
    """Earlier versions saved such configs, and trained them with cross_entropy: they load, with a warning."""
    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import batch

    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3,
                                                   problem_type="single_label_classification").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "loss": "mse"}))
    with caplog.at_level("WARNING", logger="attnpool.model"):
        model = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert "loss 'mse' was ignored by this single-label classification model (it trained cross_entropy)" in caplog.text
    assert model.config.loss is None
    labels = torch.tensor([0, 2])
    out = model(*batch([4, 3]), labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))


def test_cross_entropy_needs_single_label_classification():
    with pytest.raises(ValueError, match="loss='cross_entropy' needs problem_type='single_label_classification', "
                                         "not 'regression'"):
        loss_of(torch.randn(2, 1), torch.rand(2), loss="cross_entropy")


@pytest.mark.parametrize(
    ("kwargs", "labels", "message"),
    [
        ({}, torch.rand(3, 2), r"labels of shape \(3, 2\) .* problem_type='regression', num_labels=1: expected "
                               r"shape \(3,\) or \(3, 1\)"),
        ({"num_labels": 3}, torch.tensor([0.5, 1.0, 2.0]), "problem_type='multi_label_classification', "
                                                          r"num_labels=3: expected shape \(3, 3\); class indices"),
        ({"num_labels": 3, "problem_type": "single_label_classification"}, torch.tensor([0, 3, 1]),
         r"class indices \[3\] are outside \[0, 2\]"),
        ({"num_labels": 3, "problem_type": "single_label_classification"}, torch.rand(3, 3),
         "expected integer class indices of shape"),
        ({}, torch.tensor([0.5, float("nan"), 1.0]), r"non-finite labels in batch rows \[1\]"),
        ({"output_activation": "sigmoid"}, torch.tensor([0.5, 2.0, 1.0]), r"BCE needs targets in \[0, 1\]"),
    ],
)
def test_labels_that_do_not_fit_the_problem_type(kwargs, labels, message):
    raw = torch.zeros(3, kwargs.get("num_labels", 1))
    with pytest.raises(ValueError, match=message):
        loss_of(raw, labels, **kwargs)


# --- pearson: 1 - the batch's correlation ---------------------------------------------------------------------------


def test_pearson_loss_is_one_minus_the_correlation_per_column_averaged():
    gen = torch.Generator().manual_seed(2)
    raw, target = torch.randn(16, 2, generator=gen), torch.rand(16, 2, generator=gen)
    r = [torch.corrcoef(torch.stack([raw[:, k], target[:, k]]))[0, 1] for k in range(2)]
    expected = 1 - (r[0] + r[1]) / 2
    torch.testing.assert_close(loss_of(raw, target, num_labels=2, problem_type="regression", loss="pearson"), expected)
    # with a sigmoid output it is the correlation of what the model outputs, the sigmoid
    r_sigmoid = torch.corrcoef(torch.stack([torch.sigmoid(raw[:, 0]), target[:, 0]]))[0, 1]
    torch.testing.assert_close(loss_of(raw[:, :1], target[:, 0], loss="pearson", output_activation="sigmoid"),
                               1 - r_sigmoid)


def test_pearson_loss_ignores_scale_and_offset_and_reaches_zero_on_a_perfect_fit():
    target = torch.rand(8, generator=torch.Generator().manual_seed(3))
    assert loss_of((3 * target - 1).view(8, 1), target, loss="pearson").item() == pytest.approx(0, abs=1e-6)
    assert loss_of((1 - target).view(8, 1), target, loss="pearson").item() == pytest.approx(2, abs=1e-6)
    # targets of a small scale: an absolute eps on the variances gave 0.11 at 1e-3 and 0.93 at 1e-4
    for scale in (1e-3, 1e-4, 1e-5):
        small = scale * target
        assert loss_of((3 * small - scale).view(8, 1), small, loss="pearson").item() == pytest.approx(0, abs=1e-5)
        assert loss_of((3 * target - 1).view(8, 1), small, loss="pearson").item() == pytest.approx(0, abs=1e-5)
        assert loss_of(-small.view(8, 1), small, loss="pearson").item() == pytest.approx(2, abs=1e-5)


@pytest.mark.parametrize(
    ("raw", "target"),
    [
        (torch.tensor([[0.3]]), torch.tensor([0.7])),  # a batch of one row
        (torch.tensor([[0.1], [0.5], [0.9]]), torch.full((3,), 0.25)),  # constant targets
        (torch.full((3, 1), 0.4), torch.tensor([0.0, 0.5, 1.0])),  # constant predictions
        # equal predictions whose float32 centring leaves a rounding residue (0.3 gave gradients of 8e6)
        (torch.full((16, 1), 0.3), torch.linspace(0, 1, 16)),
        (torch.full((16, 1), 0.123), torch.linspace(0, 1, 16)),
    ],
)
def test_pearson_loss_of_a_constant_column_is_one_with_a_zero_gradient(raw, target):
    raw = raw.clone().requires_grad_(True)
    loss = loss_of(raw, target, loss="pearson")
    loss.backward()
    assert loss.item() == pytest.approx(1.0)
    assert torch.equal(raw.grad, torch.zeros_like(raw))  # finite; constant predictions gave 1e4-sized ones


def test_pearson_loss_in_bf16_is_computed_in_float32():
    gen = torch.Generator().manual_seed(4)
    raw, target = torch.randn(32, 1, generator=gen), torch.rand(32, generator=gen)
    loss = loss_of(raw.bfloat16(), target, loss="pearson")
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, loss_of(raw.bfloat16().float(), target, loss="pearson"))


def test_pearson_loss_needs_regression():
    with pytest.raises(ValueError, match="loss='pearson' needs problem_type='regression'.*, not "
                                         "'single_label_classification'"):
        loss_of(torch.randn(2, 3), torch.tensor([0, 2]), num_labels=3, loss="pearson")
    with pytest.raises(ValueError, match="not 'multi_label_classification'"):
        loss_of(torch.randn(2, 3), torch.ones(2, 3), num_labels=3, loss="pearson")


def test_pearson_loss_trains_a_model_and_is_saved_in_its_config(tmp_path):
    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import batch

    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification(config(loss="pearson", output_activation="sigmoid"))
    ids, mask = batch([5, 3, 7, 4])
    labels = torch.tensor([0.0, 0.25, 0.75, 1.0])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    r = torch.corrcoef(torch.stack([out.logits[:, 0], labels]))[0, 1]  # logits: the sigmoid already
    torch.testing.assert_close(out.loss, 1 - r, rtol=1e-4, atol=1e-5)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.head.parameters())
    model.save_pretrained(tmp_path)
    assert AttnPoolForSequenceClassification.from_pretrained(tmp_path).config.loss == "pearson"
