"""adversarial: FGM and AWP perturb along the gradient and restore bit for bit; the trainer adds their gradient."""

from __future__ import annotations

import pytest
import torch
import transformers
from trainer_helpers import tiny_model, tiny_trainer, weights

from attnpool.config import TrainConfig
from attnpool.training.adversarial import AWP, FGM, awp_parameters, make_adversary, perturbed
from model_helpers import batch


def backward(model, seed=0):
    ids, mask = batch([6, 4, 5, 3], seed=seed)
    labels = torch.tensor([0.1, 0.5, 0.9, 0.3])
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()


def test_fgm_moves_the_embeddings_by_eps_along_the_gradient_and_restores_them():
    model = tiny_model(dropout=0.0)
    backward(model)
    fgm = FGM(model, eps=0.5)
    before = weights(model)
    grad = fgm.weight.grad.clone()
    with perturbed(fgm):
        delta = fgm.weight.detach() - before["attnpool.encoder.embeddings.word_embeddings.weight"]
        torch.testing.assert_close(delta, 0.5 * grad / grad.norm())
        assert torch.linalg.vector_norm(delta).item() == pytest.approx(0.5, rel=1e-5)
        others = [n for n in before if "word_embeddings" not in n]
        assert all(torch.equal(dict(model.named_parameters())[n], before[n]) for n in others)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters()), "restored bit for bit"


def test_awp_perturbs_encoder_matrices_within_the_relative_box_and_restores_them():
    model = tiny_model(dropout=0.0)
    backward(model)
    params = awp_parameters(model)
    assert params and all(p.dim() == 2 for p in params.values())
    assert not any("embeddings" in n or "LayerNorm" in n or n.endswith("bias") for n in params)
    encoder = {id(p) for p in model.attnpool.encoder.parameters()}
    assert all(id(p) in encoder for p in params.values()), "the encoder's weights only (not the pooler, the head)"
    before = weights(model)
    awp = AWP(model, eps=1e-2, lr=1.0)
    with perturbed(awp):
        moved = 0
        for name, p in model.named_parameters():
            w = before[name]
            if name.removeprefix("attnpool.encoder.") in params and p.grad is not None:
                assert ((p - w).abs() <= (1e-2 + 1e-6) * w.abs()).all(), name  # (1e-6: rounding)
                moved += int(not torch.equal(p, w))
            else:
                assert torch.equal(p, w), name
        assert moved > 0
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters()), "restored bit for bit"


def test_no_gradient_or_a_non_finite_one_leaves_the_weights_alone():
    model = tiny_model(dropout=0.0)
    before = weights(model)
    with perturbed(FGM(model, eps=1.0)), perturbed(AWP(model)):  # no backward yet: no gradient
        assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    backward(model)
    embedding = model.get_input_embeddings().weight
    embedding.grad[0, 0] = float("inf")  # an fp16 overflow
    with perturbed(FGM(model, eps=1.0)):
        assert torch.equal(embedding, before["attnpool.encoder.embeddings.word_embeddings.weight"])


def test_fgm_refuses_frozen_embeddings():
    model = tiny_model()
    model.freeze_embeddings()
    with pytest.raises(ValueError, match="adversarial=fgm perturbs the word embeddings, which are frozen"):
        make_adversary("fgm", model, 1.0)
    model.attnpool.encoder.requires_grad_(False)
    with pytest.raises(ValueError, match="adversarial=awp: no encoder weight matrix is trained"):
        make_adversary("awp", model, 1e-3)
    # every layer frozen: what still trains outside the layers (the embeddings' norm...) is not a weight matrix
    model = tiny_model()
    model.freeze_layers(len(model.attnpool.encoder.encoder.layer))
    with pytest.raises(ValueError, match="adversarial=awp: no encoder weight matrix is trained"):
        make_adversary("awp", model, 1e-3)


@pytest.mark.parametrize("kind", ["fgm", "awp"])
def test_the_trainer_step_adds_the_gradient_of_the_perturbed_model(tmp_path, kind):
    """With no dropout the adversarial step's gradient is the plain one plus that of the perturbed model."""
    eps = 1.0 if kind == "fgm" else 1e-2
    plain = tiny_trainer(tmp_path / "plain", model=tiny_model(dropout=0.0))
    trainer = tiny_trainer(tmp_path / "adv", model=tiny_model(dropout=0.0), adversarial=kind, adversarial_start=0.0,
                           adversarial_eps=eps)
    inputs = next(iter(trainer.get_train_dataloader()))
    grads = {}
    for name, t in (("plain", plain), ("adversarial", trainer)):
        t.current_gradient_accumulation_steps = 1  # what the training loop sets
        loss = t.training_step(t.model, inputs)
        grads[name] = {n: p.grad.cpu().clone() for n, p in t.model.named_parameters() if p.grad is not None}
        grads[name + " loss"] = loss.cpu()
    assert torch.equal(grads["plain loss"], grads["adversarial loss"]), "the logged loss is the plain step's"
    # the gradient of the perturbed model alone, by hand (on the CPU)
    inputs = {k: v.cpu() for k, v in inputs.items()}
    model = tiny_model(dropout=0.0)
    model(**inputs).loss.backward()
    adversary = make_adversary(kind, model, eps)
    adversary.perturb()
    model.zero_grad()
    model(**inputs).loss.backward()
    adversary.restore()
    by_hand = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    for n, g in grads["plain"].items():
        torch.testing.assert_close(grads["adversarial"][n], g + by_hand[n], rtol=1e-4, atol=1e-6)
    assert any(not torch.allclose(grads["adversarial"][n], g) for n, g in grads["plain"].items())


class Recorder(transformers.TrainerCallback):
    """Whether each optimizer step has an adversarial pass, and whether the weights after it are ``start``."""

    def __init__(self, trainer, start):
        self.trainer = trainer
        self.start = start
        self.adversarial: list[tuple[float, bool]] = []
        self.unchanged: list[bool] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.adversarial.append((state.epoch or 0.0, self.trainer.adversarial_now()))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.unchanged.append(all(torch.equal(p.cpu(), self.start[n]) for n, p in model.named_parameters()))


@pytest.mark.parametrize("kind", ["fgm", "awp"])
def test_with_a_zero_learning_rate_the_weights_end_unchanged_and_the_pass_starts_on_time(tmp_path, kind):
    model = tiny_model()
    start = weights(model)
    trainer = tiny_trainer(tmp_path / "checkpoints", model=model, lr=0.0, head_lr=0.0, adversarial=kind,
                           adversarial_start=1.0, grad_accum=2, monitor=True)
    calls = []
    perturb = trainer.adversary.perturb
    trainer.adversary.perturb = lambda: (calls.append(trainer.state.epoch), perturb())
    recorder = Recorder(trainer, start)
    trainer.add_callback(recorder)
    trainer.train()
    assert recorder.unchanged == [True] * 4, "every step's perturbation was restored"
    assert [on for _, on in recorder.adversarial] == [epoch >= 1.0 for epoch, _ in recorder.adversarial]
    assert calls and all(epoch >= 1.0 for epoch in calls)
    assert len(calls) == 2 * sum(on for _, on in recorder.adversarial)  # every micro-batch of those steps
    assert any("pool_entropy" in logs for logs in trainer.state.log_history), "the pooling statistics still log"


@pytest.mark.parametrize(("grad_accum", "last_start"), [(1, 1.75), (2, 1.5)])
def test_a_start_that_no_step_reaches_is_refused_and_the_last_step_s_start_trains_adversarially(
        tmp_path, grad_accum, last_start):
    """2 epochs of 4 batches: the last step starts at epoch 1.75 (1.5 with 2 batches a step). A start of 1.9 passed
    the config's check (< epochs) and trained without one adversarial pass."""
    too_late = tiny_trainer(tmp_path / "late", adversarial="fgm", adversarial_start=last_start + 0.1,
                            grad_accum=grad_accum)
    with pytest.raises(ValueError, match=rf"adversarial_start {last_start + 0.1:g} is never reached: the last of "
                                         rf"the {4 // grad_accum * 2} training steps starts at epoch {last_start:g}.*"
                                         rf"--adversarial-start {last_start:g} or less \(the run folder is made "
                                         r"by now: rerun with --overwrite, as --resume keeps the saved value\)"):
        too_late.train()
    trainer = tiny_trainer(tmp_path / "last", adversarial="fgm", adversarial_start=last_start, grad_accum=grad_accum)
    calls = []
    perturb = trainer.adversary.perturb
    trainer.adversary.perturb = lambda: (calls.append(trainer.state.epoch), perturb())
    trainer.train()
    assert calls == [last_start] * grad_accum  # the last step's micro-batches, and no other


def test_config_checks():
    base = {"train_file": "x.csv", "text_cols": ["a"]}
    assert TrainConfig(**base, adversarial="fgm").resolved_adversarial_eps() == 1.0
    assert TrainConfig(**base, adversarial="awp").resolved_adversarial_eps() == 1e-3
    assert TrainConfig(**base, adversarial="awp", adversarial_eps=0.01).resolved_adversarial_eps() == 0.01
    for options, message in (
        ({"adversarial": "pgd"}, "adversarial must be one of fgm, awp"),
        ({"adversarial": "fgm", "epochs": 1.0}, r"adversarial_start must be in \[0, epochs=1.0\)"),
        ({"adversarial": "awp", "adversarial_eps": 0.0}, "adversarial_eps and adversarial_lr must be positive"),
        ({"adversarial": "fgm", "adversarial_lr": 0.5}, "adversarial_lr applies to adversarial awp only"),
        ({"adversarial_eps": 0.1}, "adversarial_eps, adversarial_lr and adversarial_start need adversarial"),
        ({"adversarial_start": 0.5}, "adversarial_eps, adversarial_lr and adversarial_start need adversarial"),
        ({"adversarial": "fgm", "adversarial_eps": -1.0}, "must be positive, got -1.0 and 1.0"),
        ({"loss": "pearson", "task": "binary"}, "loss pearson needs task regression"),
        # a loss the task's training ignores (classification always trains cross-entropy) or cannot train
        ({"loss": "bce", "task": "multiclass"}, "loss bce does not train task multiclass: use cross_entropy"),
        ({"loss": "mse", "task": "binary"}, "loss mse does not train task binary: use cross_entropy"),
        ({"loss": "cross_entropy"}, "loss cross_entropy does not train task regression: use mse or bce or pearson"),
        ({"loss": "cross_entropy", "task": "multilabel"}, "does not train task multilabel: use bce or mse"),
    ):
        with pytest.raises(ValueError, match=message):
            TrainConfig(**base, **options).validate()


@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="needs torch.distributed with the gloo backend")
def test_under_torchrun_awp_and_the_weight_average_match_one_process(tmp_path):
    """2 CPU processes (gloo) against 1 with the same global batch and no dropout (see test_distributed.py).

    The perturbation follows the gradient after DDP's all-reduce, so both runs perturb the same weights the same
    way, and every process's average follows the same synchronised weights; only the main process writes. (With
    gradient accumulation: test_adversarial_ddp.py.)
    """
    import json
    import os
    import subprocess
    import sys

    import numpy as np
    import pandas as pd
    from transformers import AutoModel

    from attnpool.cli import main
    from model_helpers import tiny_config, tiny_tokenizer, write_toy_csv

    encoder = tmp_path / "encoder"
    config = tiny_config("bert")
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(encoder)
    tiny_tokenizer().save_pretrained(encoder)
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    common = ["train", "--train-file", str(tmp_path / "train.csv"), "--model", str(encoder), "--text-cols", "first",
              "second", "--folds", "2", "--epochs", "2", "--eval-batch-size", "8", "--lr",
              "1e-3", "--head-lr", "3e-3", "--max-length", "16", "--head-dropout", "0", "--pooling-opt",
              "attn_size=8", "--precision", "fp32", "--ema-decay", "0.8", "--adversarial", "awp",
              "--adversarial-start", "0.5", "--adversarial-eps", "0.01"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "attnpool.cli", *common, "--batch-size", "2", "--output-dir", str(tmp_path / "two")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}\n{proc.stderr[-4000:]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACCELERATE_USE_CPU", "true")
        assert main([*common, "--batch-size", "4", "--output-dir", str(tmp_path / "one")]) == 0
    one, two = (pd.read_csv(tmp_path / run / "oof.csv") for run in ("one", "two"))
    np.testing.assert_allclose(two["prediction"], one["prediction"], atol=1e-4)
    for fold in (0, 1):
        metrics = [json.loads((tmp_path / run / f"fold_{fold}" / "metrics.json").read_text()) for run in ("one", "two")]
        assert metrics[0]["best_checkpoint"] == metrics[1]["best_checkpoint"] and metrics[1]["processes"] == 2
    assert (tmp_path / "two" / "train.log").read_text().count("ema_decay=0.8 over") == 2, "one warning per fold"


def test_the_pooling_statistics_leave_out_the_perturbed_pass(tmp_path):
    trainer = tiny_trainer(tmp_path, model=tiny_model(dropout=0.0), monitor=True, adversarial="awp",
                           adversarial_start=0.0)
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.current_gradient_accumulation_steps = 1
    trainer.training_step(trainer.model, inputs)
    rows = int((inputs["attention_mask"].sum(dim=1) >= 2).sum())
    assert trainer.monitor._sums[True][1].item() == rows  # one forward recorded, not two
    with trainer.monitor.paused():
        trainer.model(**inputs)
    assert trainer.monitor._sums[True][1].item() == rows
    trainer.model(**inputs)
    assert trainer.monitor._sums[True][1].item() == 2 * rows  # recording resumes after the block
