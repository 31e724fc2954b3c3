"""parameter_groups: layer-wise learning-rate decay, the pooler's and the head's rates, weight decay, frozen params."""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolForSequenceClassification
from attnpool.training.optim import build_optimizer, can_clip_in_step, clip_in_step, parameter_groups
from model_helpers import tiny_config


@pytest.fixture
def model():
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=1)


def rates(model, groups):
    """Parameter name -> (learning rate, weight decay) as the groups assign them."""
    by_id = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters() if id(p) in by_id}


def test_llrd_gives_each_layer_lr_times_llrd_to_its_depth(model):
    groups = parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, llrd=0.5, pooler_lr=5e-3)
    got = rates(model, groups)
    layers = model.config.encoder.num_hidden_layers
    for name, (rate, _) in got.items():
        if ".encoder.layer." in name:
            index = int(name.split(".encoder.layer.")[1].split(".")[0])
            assert rate == pytest.approx(1e-4 * 0.5 ** (layers - 1 - index)), name  # the top layer gets lr
        elif ".embeddings." in name:
            assert rate == pytest.approx(1e-4 * 0.5**layers), name  # below the first layer
        elif name.startswith("attnpool.pooler."):
            assert rate == 5e-3, name
        elif name.startswith("head."):
            assert rate == 1e-3, name
    assert any(name.startswith("attnpool.pooler.") for name in got) and any(name.startswith("head.") for name in got)


@pytest.mark.parametrize(("family", "top", "bottom"), [
    ("modernbert", ["final_norm.weight"], ["embeddings.tok_embeddings.weight"]),
    ("gpt2", ["ln_f.weight", "ln_f.bias"], ["wte.weight", "wpe.weight"]),
    ("llama", ["norm.weight"], ["embed_tokens.weight"]),
    ("deberta-v3", [], ["embeddings.word_embeddings.weight", "encoder.rel_embeddings.weight",
                        "encoder.LayerNorm.weight"]),
])
def test_llrd_gives_a_norm_after_the_last_layer_the_top_rate(family, top, bottom):
    """A final norm reads the top layer's output: it got the embeddings' rate (lr * llrd**layers)."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config(family), pooling="attention", num_labels=1)
    got = rates(model, parameter_groups(model, lr=1.0, head_lr=9.0, weight_decay=0.01, llrd=0.5))
    layers = model.config.encoder.num_hidden_layers
    assert {name: got["attnpool.encoder." + name][0] for name in top + bottom} == {
        **dict.fromkeys(top, 1.0), **dict.fromkeys(bottom, 0.5**layers)}  # relative embeddings feed every layer


class FsdpLike(torch.nn.Module):
    """Names its parameters as FSDP with ``use_orig_params`` does: ``_fsdp_wrapped_module.`` before each unit's."""

    def __init__(self, model):
        super().__init__()
        self._fsdp_wrapped_module = model

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._fsdp_wrapped_module, name)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # dynamo's import
@pytest.mark.parametrize("wrap", [FsdpLike, torch.compile], ids=["fsdp", "compile"])
def test_a_wrapped_model_gets_the_groups_of_the_model_inside(model, wrap):
    """The Trainer builds the optimizer of an FSDP model after wrapping it: the encoder's names then start with
    `_fsdp_wrapped_module.`, and every encoder parameter got the head's rate (1e-3 for a 2e-5 encoder)."""
    kwargs = {"lr": 2e-5, "head_lr": 1e-3, "weight_decay": 0.01, "llrd": 0.8, "pooler_lr": 5e-3}
    expected = rates(model, parameter_groups(model, **kwargs))
    wrapped = wrap(model)
    assert any(name.startswith(("_fsdp_wrapped_module.", "_orig_mod.")) for name, _ in wrapped.named_parameters())
    assert rates(model, parameter_groups(wrapped, **kwargs)) == expected
    assert {r for n, (r, _) in expected.items() if n.startswith("attnpool.encoder.layer.")} != {1e-3}


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft's call
@pytest.mark.parametrize("wrap", [None, FsdpLike], ids=["peft", "fsdp+peft"])
def test_a_peft_model_gets_its_layers_rates_and_the_pooler_its_own(model, wrap):
    """Under peft every name starts with `base_model.model.`: LoRA's matrices and the pooler all got the head's rate
    (under FSDP too, whose prefix comes first)."""
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(model, peft.LoraConfig(task_type=None, target_modules=["query", "key", "value"],
                                                      modules_to_save=["head", "attnpool.pooler"], r=4, lora_alpha=8))
    wrapped = lora if wrap is None else wrap(lora)
    got = rates(lora, parameter_groups(wrapped, lr=2e-5, head_lr=1e-3, weight_decay=0.01, llrd=0.5, pooler_lr=1e-4))
    layers = len(model.attnpool.encoder.encoder.layer)
    for name, (rate, _) in got.items():
        depth = layers - 1 - int(name.split(".layer.")[1].split(".")[0]) if ".layer." in name else None
        where = "encoder" if ".lora_" in name else "pooler" if ".pooler." in name else "head"
        assert rate == {"encoder": 2e-5 * 0.5 ** (depth or 0), "pooler": 1e-4, "head": 1e-3}[where], name
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in got if ".lora_" in n} == {"query", "key", "value"}


def test_no_weight_decay_for_biases_and_norms(model):
    got = rates(model, parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01))
    for name, (_, decay) in got.items():
        expected = 0.0 if name.endswith("bias") or "LayerNorm" in name or name.endswith("norm.weight") else 0.01
        assert decay == expected, name


def test_without_llrd_every_encoder_parameter_gets_lr_and_the_pooler_the_head_rate(model):
    got = rates(model, parameter_groups(model, lr=2e-5, head_lr=1e-3, weight_decay=0.0))
    assert {r for n, (r, _) in got.items() if n.startswith("attnpool.encoder.")} == {2e-5}
    assert {r for n, (r, _) in got.items() if not n.startswith("attnpool.encoder.")} == {1e-3}


def test_frozen_parameters_are_left_out_and_every_trainable_one_is_in_exactly_one_group(model):
    model.freeze_embeddings()
    groups = parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, llrd=0.8)
    ids = [id(p) for g in groups for p in g["params"]]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    assert sorted(ids) == sorted(trainable) and len(ids) == len(set(ids))
    assert not any(id(p) in ids for p in model.attnpool.encoder.embeddings.parameters())
    optimizer = build_optimizer(groups)
    assert isinstance(optimizer, torch.optim.AdamW) and len(optimizer.param_groups) == len(groups)


@pytest.mark.parametrize("max_norm", [0.05, 1e6])  # clipping every step, and never
def test_clip_in_step_makes_the_update_of_clip_grad_norm_then_a_fused_step(max_norm):
    torch.manual_seed(0)
    shapes = [(30, 8), (8,), (5, 8)]
    start = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) * 3 for s in shapes] for _ in range(3)]
    ours = [torch.nn.Parameter(p.clone()) for p in start]
    theirs = [torch.nn.Parameter(p.clone()) for p in start]
    unclipped = [torch.nn.Parameter(p.clone()) for p in start]
    opts = [torch.optim.AdamW(ps, lr=0.1, weight_decay=0.01, fused=True) for ps in (ours, theirs, unclipped)]
    assert can_clip_in_step(opts[0])
    for step in grads:
        for ps in (ours, theirs, unclipped):
            for p, g in zip(ps, step, strict=True):
                p.grad = g.clone()
        norm = clip_in_step(opts[0], ours, max_norm)
        expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        torch.testing.assert_close(norm, expected)
        for p, g in zip(ours, step, strict=True):
            assert torch.equal(p.grad, g), "the gradients themselves are left as they are"
        for opt in opts:
            opt.step()
    for a, b, c in zip(ours, theirs, unclipped, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        assert torch.equal(b, c) == (max_norm > 1e3), "clipping changed the update exactly when it was active"


def test_clip_in_step_needs_a_fused_adam():
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert not can_clip_in_step(torch.optim.AdamW(params, foreach=True))
    assert not can_clip_in_step(torch.optim.SGD(params, lr=0.1))
    assert can_clip_in_step(torch.optim.Adam(params, fused=True))


def test_llrd_gives_deberta_v2s_convolution_the_first_layers_rate():
    """encoder.conv runs on layer 0's output but comes after the layers in the module: it got the top rate."""
    torch.manual_seed(0)
    encoder = tiny_config("deberta-v3")
    encoder.conv_kernel_size = 3
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention", num_labels=1)
    got = rates(model, parameter_groups(model, lr=1.0, head_lr=9.0, weight_decay=0.01, llrd=0.5))
    layers = model.config.encoder.num_hidden_layers
    conv = {name: rate for name, (rate, _) in got.items() if ".encoder.conv." in name}
    assert conv and set(conv.values()) == {0.5 ** (layers - 1)}
    assert got["attnpool.encoder.encoder.layer.0.output.dense.weight"][0] == 0.5 ** (layers - 1)


def test_the_logged_learning_rate_is_lr_not_the_embeddings_rate_under_llrd(tmp_path):
    from trainer_helpers import tiny_trainer

    trainer = tiny_trainer(tmp_path, lr=1e-3, head_lr=1e-2, llrd=0.5, scheduler="constant")
    trainer.args.logging_steps = 1
    trainer.train()
    logged = [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h]
    assert logged and logged == pytest.approx([1e-3] * len(logged))
    assert min(g["lr"] for g in trainer.optimizer.param_groups) < 1e-3  # the embeddings' group, first, is lower


def test_the_recipe_trainer_clips_inside_the_fused_step_as_the_trainer_would(tmp_path, monkeypatch):
    from trainer_helpers import tiny_model, tiny_trainer, weights

    import attnpool.training.trainer as trainer_module

    trained = {}
    for inside in (True, False):
        if not inside:  # the Trainer's own clip_grad_norm_, then the step
            monkeypatch.setattr(trainer_module, "can_clip_in_step", lambda optimizer: False)
        trainer = tiny_trainer(tmp_path / str(inside), model=tiny_model(dropout=0.0))
        trainer.args.max_grad_norm = 0.05  # below every step's norm: each step is clipped
        trainer.train()
        optimizer = trainer.optimizer.optimizer
        assert hasattr(optimizer, "grad_scale") == inside
        norms = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
        assert norms and min(norms) > 0.05
        trained[inside] = (weights(trainer.model), norms)
    torch.testing.assert_close(trained[True][1], trained[False][1], rtol=1e-4, atol=0)
    for name, value in trained[True][0].items():
        torch.testing.assert_close(value, trained[False][0][name], rtol=0, atol=1e-5, msg=name)
