"""ema_decay: the shadow's update rule, the swap for evaluation, the saved model, the checkpoint file and resume."""

from __future__ import annotations

import pytest
import torch
import transformers
from safetensors.torch import load_file
from trainer_helpers import StopAt2, tiny_model, tiny_trainer, weights

from attnpool import train
from attnpool.config import TrainConfig
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.training.ema import EMA_FILE, WeightEMA
from model_helpers import save_tiny_encoder, write_toy_csv


def test_the_shadow_follows_the_weights_by_the_decay():
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)  # only trained parameters are averaged
    ema = WeightEMA(0.75)
    ema.start(model)
    assert set(ema.shadow) == {"weight"}
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)
    torch.testing.assert_close(ema.shadow["weight"], 0.75 * start + 0.25 * (start + 1.0))
    assert ema.shadow["weight"].dtype == torch.float32


def test_applied_swaps_the_shadow_in_and_the_raw_weights_back_bit_for_bit():
    model = tiny_model()
    ema = WeightEMA(0.5)
    ema.start(model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5).add_(0.01)
    raw = weights(model)
    with ema.applied(model):  # outside training: nothing swapped
        assert all(torch.equal(p, raw[n]) for n, p in model.named_parameters())
    ema.training = True
    with ema.applied(model):
        assert all(torch.equal(p, ema.shadow[n]) for n, p in model.named_parameters())
    assert all(torch.equal(p, raw[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5])
def test_a_decay_outside_0_1_is_refused(decay):
    with pytest.raises(ValueError, match="ema_decay must be in"):
        WeightEMA(decay)
    with pytest.raises(ValueError, match="ema_decay must be in"):
        TrainConfig(train_file="x.csv", text_cols=["a"], ema_decay=decay).validate()


class Spy(transformers.TrainerCallback):
    """What the model and the EMA hold at the Trainer's events (it runs after the recipe's callbacks)."""

    def __init__(self, ema: WeightEMA) -> None:
        self.ema = ema
        self.begin: dict | None = None
        self.raw: dict | None = None
        self.evaluations: list[tuple[dict, dict, dict]] = []  # (what evaluate saw, the shadow, the raw weights)
        self.end: dict | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.begin = {n: t.cpu().clone() for n, t in self.ema.shadow.items()}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.raw = weights(model)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        shadow = {n: t.cpu().clone() for n, t in self.ema.shadow.items()}
        self.evaluations.append((weights(model), shadow, self.raw))

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.end = weights(model)


def test_training_evaluates_and_ends_with_the_shadow_of_the_best_checkpoint(tmp_path):
    trainer = tiny_trainer(tmp_path / "checkpoints", epochs=1.0, eval_steps=2, ema_decay=0.9)
    spy = Spy(trainer.ema)
    trainer.add_callback(spy)
    trainer.train()
    assert len(spy.evaluations) == 2
    for seen, shadow, raw in spy.evaluations:
        assert all(torch.equal(seen[n], shadow[n]) for n in seen), "evaluate sees the shadow"
        assert any(not torch.equal(seen[n], raw[n]) for n in seen)
    best = trainer.state.best_model_checkpoint
    shadow = load_file(f"{best}/{EMA_FILE}")
    raw = load_file(f"{best}/model.safetensors")
    assert all(torch.equal(spy.end[n], shadow[n]) for n in spy.end), "the model ends with the best shadow"
    assert any(not torch.equal(spy.end[n], raw[n]) for n in spy.end), "checkpoints hold the raw weights"
    assert not trainer.ema.training


def test_the_average_is_in_each_checkpoint_before_the_file_that_marks_it_complete(tmp_path, monkeypatch):
    """trainer_state.json is written last and marks a checkpoint complete; older ones are rotated away after it."""
    from pathlib import Path

    seen = []
    original = transformers.TrainerState.save_to_json

    def spy(self, path):
        folder = Path(path).parent
        if folder.name.startswith("checkpoint-"):
            seen.append((folder.name, (folder / EMA_FILE).is_file()))
        return original(self, path)

    monkeypatch.setattr(transformers.TrainerState, "save_to_json", spy)
    tiny_trainer(tmp_path / "checkpoints", epochs=1.0, eval_steps=2, ema_decay=0.9).train()
    assert len(seen) == 2 and all(written for _, written in seen), seen


def test_resume_reads_the_shadow_back_from_the_checkpoint(tmp_path):
    first = tiny_trainer(tmp_path / "checkpoints", epochs=1.0, eval_steps=2, ema_decay=0.9, callbacks=[StopAt2()])
    first.train()
    checkpoint = tmp_path / "checkpoints" / "checkpoint-2"
    saved = load_file(str(checkpoint / EMA_FILE))
    raw = load_file(str(checkpoint / "model.safetensors"))
    assert any(not torch.equal(saved[n], raw[n]) for n in saved)

    second = tiny_trainer(tmp_path / "checkpoints", model=tiny_model(seed=1), epochs=1.0, eval_steps=2,
                          ema_decay=0.9)
    spy = Spy(second.ema)
    second.add_callback(spy)
    second.train(resume_from_checkpoint=True)  # the last checkpoint: checkpoint-2
    assert second.ema.resume_from == str(checkpoint)
    assert all(torch.equal(spy.begin[n], saved[n]) for n in saved), "the shadow is the checkpoint's"
    assert second.state.global_step == 4


def test_a_checkpoint_without_the_file_restarts_the_average_with_a_warning(tmp_path, caplog):
    ema = WeightEMA(0.9)
    ema.resume_from = str(tmp_path)
    model = tiny_model()
    state = transformers.TrainerState(max_steps=10_000)
    with caplog.at_level("WARNING", logger="attnpool.train"):
        ema.on_train_begin(None, state, None, model=model)
    assert f"has no {EMA_FILE}" in caplog.text
    assert all(torch.equal(ema.shadow[n], p) for n, p in model.named_parameters())


def test_a_fold_too_short_for_its_decay_is_warned_about(caplog):
    ema = WeightEMA(0.999)
    with caplog.at_level("WARNING", logger="attnpool.train"):
        ema.on_train_begin(None, transformers.TrainerState(max_steps=100), None, model=tiny_model())
    share = 100 * 0.999 ** 100
    assert f"still holds {share:.0f}% of the starting weights" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="attnpool.train"):
        ema.on_train_begin(None, transformers.TrainerState(max_steps=5000), None, model=tiny_model())
    assert "still holds" not in caplog.text


def test_a_mismatched_file_is_refused_naming_the_parameters(tmp_path):
    model = tiny_model()
    ema = WeightEMA(0.9)
    ema.start(model)
    ema.shadow.pop(next(iter(ema.shadow)))
    ema.save(tmp_path, step=3)
    with pytest.raises(ValueError, match="does not match the model's trainable parameters .*missing"):
        WeightEMA(0.9).load(tmp_path, model)


def test_the_saved_fold_model_is_the_averaged_weights_and_keeps_the_recipe_loss(tmp_path):
    class Capture(transformers.TrainerCallback):
        def on_train_end(self, args, state, control, model=None, **kwargs):
            self.ema = weights(model)  # after the recipe's WeightEMA.on_train_end
            self.raw = load_file(f"{state.best_model_checkpoint}/model.safetensors")

    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24)
    capture = Capture()
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["first", "second"], folds=2,
                      only_folds=[0], model=encoder, output_dir=str(tmp_path / "run"), epochs=1, batch_size=4,
                      max_length=16, lr=1e-3, pooling_options={"attn_size": 8}, ema_decay=0.8, loss="pearson")
    train(cfg, callbacks=[capture])
    model = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "run" / "fold_0" / "model")
    assert model.config.loss == "pearson"  # the recipe's loss reaches the model (and its saved config)
    saved = weights(model)  # every weight of a loaded model; the average covers the trained ones (not the words)
    assert "attnpool.encoder.embeddings.word_embeddings.weight" in saved.keys() - capture.ema.keys()
    assert all(torch.equal(saved[n], capture.ema[n]) for n in capture.ema)
    assert any(not torch.equal(saved[n], capture.raw[n]) for n in capture.ema)


def test_resume_passes_over_a_checkpoint_saved_without_its_average(tmp_path, caplog):
    """The average is written after the Trainer's files: a checkpoint without it would resume a different run."""
    from attnpool.training.checkpoints import last_complete_checkpoint

    for step, files in ((2, ["trainer_state.json", EMA_FILE]), (4, ["trainer_state.json"]), (6, ["model.safetensors"])):
        (tmp_path / f"checkpoint-{step}").mkdir()
        for name in files:
            (tmp_path / f"checkpoint-{step}" / name).write_text("{}")
    (tmp_path / "checkpoint-10.tmp").mkdir()  # not a checkpoint's name
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    assert last_complete_checkpoint(tmp_path, ema=True) == str(tmp_path / "checkpoint-2")
    assert f"checkpoint-4 was not written to the end (no {EMA_FILE}: the run stopped while saving it)" in caplog.text
    assert last_complete_checkpoint(tmp_path / "none") is None
