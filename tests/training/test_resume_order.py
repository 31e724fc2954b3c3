"""Resume: an epoch goes on in its own order (also under DDP's wrappers), and early stopping counts on."""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers
from accelerate.data_loader import BatchSamplerShard, DataLoaderShard
from torch.utils.data import BatchSampler
from trainer_helpers import StopAt2, tiny_model, tiny_trainer, weights

from attnpool.training import arguments
from attnpool.training.checkpoints import last_complete_checkpoint


def test_a_resumed_epoch_under_ddp_wrappers_keeps_its_epoch_order(tmp_path):
    """torchrun wraps the sampler as SkipBatchSampler(BatchSamplerShard(BatchSampler(sampler))) on resume.

    Neither accelerate's DataLoaderShard.set_epoch nor the Trainer's reaches that deep, so the sampler (created
    afresh on resume) replayed epoch 0's order: the skipped batches were not the ones trained.
    """
    trainer = tiny_trainer(tmp_path, n=48)
    sampler = trainer._get_train_sampler()
    shard = BatchSamplerShard(BatchSampler(sampler, batch_size=4, drop_last=False), num_processes=2, process_index=0)
    loader = DataLoaderShard(trainer.train_dataset, batch_sampler=shard, collate_fn=trainer.data_collator)
    trainer.state.epoch = 1.5  # the checkpoint was saved half way through the second epoch
    resumed = trainer.get_resumed_dataloader(loader, 1)
    resumed.set_epoch(1)  # what the Trainer's epoch loop does next (it reaches the data set, not the sampler)
    assert sampler.epoch == 1
    second_epoch = list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) != second_epoch  # the epochs' orders differ: replaying epoch 0 would skip other rows


def test_a_resumed_fold_keeps_counting_evaluations_without_improvement(tmp_path):
    """The Trainer restarted EarlyStoppingCallback's count at 0 on resume: a fold killed one evaluation short of
    stopping trained on for `patience` more evaluations, and could pick another best checkpoint."""
    tiny_trainer(tmp_path, epochs=1.0, eval_steps=2, early_stopping_patience=3, callbacks=[StopAt2()]).train()
    state_file = tmp_path / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"] = 2
    state_file.write_text(json.dumps(state))  # as if the last two evaluations had not improved

    counts = []

    class Count(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            stopper = [c for c in resumed.callback_handler.callbacks
                       if isinstance(c, transformers.EarlyStoppingCallback)]
            counts.append([c.early_stopping_patience_counter for c in stopper])

    resumed = tiny_trainer(tmp_path, epochs=1.0, eval_steps=2, early_stopping_patience=3, callbacks=[Count()])
    resumed.train(resume_from_checkpoint=True)
    assert counts == [[2]]


def test_a_finished_fold_resumed_from_its_last_checkpoint_trains_no_further(tmp_path):
    """With fractional epochs the last step falls inside an epoch: resumed from its final checkpoint (a fold that
    failed after training), the Trainer ran one more epoch past max_steps, evaluated and saved it as a candidate."""
    options = {"epochs": 1.5, "eval_steps": 2, "ema_decay": 0.5}
    first = tiny_trainer(tmp_path, **options)
    first.train()
    resumed = tiny_trainer(tmp_path, model=tiny_model(seed=4), **options)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == resumed.state.max_steps == first.state.global_step
    after, before = weights(resumed.model), weights(first.model)
    assert all(torch.equal(after[name], before[name]) for name in before)


def test_a_fold_stopped_early_and_resumed_from_that_checkpoint_stays_stopped(tmp_path):
    """Early stopping's count is saved with the checkpoint; the Trainer cleared the stop flag on resume and trained
    on for `patience` more evaluations."""
    options = {"epochs": 3.0, "eval_steps": 2, "early_stopping_patience": 1, "lr": 0.0, "head_lr": 0.0}  # no gain
    first = tiny_trainer(tmp_path / "straight", **options)
    first.train()
    assert first.state.global_step < first.state.max_steps  # it stopped early

    class KillAtStop(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if control.should_training_stop:
                raise KeyboardInterrupt  # killed once the stopping checkpoint is written

    with pytest.raises(KeyboardInterrupt):
        tiny_trainer(tmp_path / "killed", callbacks=[KillAtStop()], **options).train()
    resumed = tiny_trainer(tmp_path / "killed", **options)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == first.state.global_step


def test_a_cut_short_state_is_passed_over_and_a_moved_best_checkpoint_is_found(tmp_path, caplog):
    """A power loss left trainer_state.json cut short (resume crashed on it); a run moved, or resumed from another
    working directory, named its best checkpoint by a path that no longer exists, so the last weights were kept."""
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    state = {"global_step": 4, "best_model_checkpoint": "elsewhere/fold_0/checkpoints/checkpoint-2"}
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text(json.dumps(state))
    (tmp_path / "checkpoint-6" / "trainer_state.json").write_text('{"global_step": 6, "best_mod')
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    assert "checkpoint-6 was not written to the end (its trainer_state.json is cut short" in caplog.text
    saved = json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text())
    assert saved == {**state, "best_model_checkpoint": str(tmp_path / "checkpoint-2")}
    state["best_model_checkpoint"] = str(tmp_path / "checkpoint-4")  # where it is: left alone
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text(json.dumps(state))
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    assert json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text()) == state


def test_a_fold_resumed_with_another_process_count_is_refused(tmp_path):
    """A fold started on 2 processes and resumed on 1 has twice the steps per epoch: the Trainer only warned in
    train.log, then skipped the wrong batches and stretched the learning-rate schedule."""
    tiny_trainer(tmp_path, n=24, epochs=1.0, eval_steps=2, callbacks=[StopAt2()]).train()
    more_steps = tiny_trainer(tmp_path, n=48, epochs=1.0, eval_steps=2)  # as many more batches per process
    with pytest.raises(ValueError, match=re.escape(f"cannot resume from {tmp_path / 'checkpoint-2'}: it was trained "
                                                   "for 4 steps in all and this run would train 8")):
        more_steps.train(resume_from_checkpoint=True)
    assert tiny_trainer(tmp_path, n=24, epochs=1.0, eval_steps=2).train(resume_from_checkpoint=True).global_step == 4


def test_a_resumed_folds_training_time_counts_the_calls_before_it(tmp_path):
    """train_seconds measured only the resumed call: an interrupted pooler looked cheaper in compare's time ratio."""
    first = tiny_trainer(tmp_path, epochs=1.0, eval_steps=2, callbacks=[StopAt2()])
    first.train()
    state_file = tmp_path / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    saved = state["stateful_callbacks"]["TrainingClock"]["attributes"]["seconds_before"]
    assert 0 < saved <= first.train_seconds()
    state["stateful_callbacks"]["TrainingClock"]["attributes"]["seconds_before"] = 1000.0  # a long first call
    state_file.write_text(json.dumps(state))
    resumed = tiny_trainer(tmp_path, epochs=1.0, eval_steps=2)
    resumed.train(resume_from_checkpoint=True)
    assert 1000 < resumed.train_seconds() < 1000 + first.train_seconds() + 60


def test_a_resumed_folds_logs_cover_the_same_steps_and_its_train_loss_all_of_them(tmp_path, monkeypatch):
    """Logging every 2 steps and saving every 3: the loss summed since the last log is in no checkpoint, so the first
    log after a resume averaged other steps; and train_loss averaged the resumed call's steps only (0.0 for a fold
    resumed where it had finished). The recipe now logs at a divisor of the save interval where one is near a quarter
    epoch (here every step); a prime interval keeps the quarter epoch, and logs that straddle a save, as here."""
    monkeypatch.setattr(arguments, "logging_steps", lambda steps_per_epoch, eval_steps=None: 2)
    options = {"epochs": 1.0, "eval_steps": 3}  # 36 training rows in batches of 4: 9 steps, a log every 2

    class KillAt3(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise KeyboardInterrupt

    def training_logs(trainer):
        return [{k: v for k, v in e.items() if k == "step" or k == "loss" or k.startswith("pool_")}
                for e in trainer.state.log_history if "loss" in e]

    def train_loss(trainer):
        return next(e["train_loss"] for e in trainer.state.log_history if "train_loss" in e)

    straight = tiny_trainer(tmp_path / "straight", n=54, monitor=True, **options)
    straight.train()
    with pytest.raises(KeyboardInterrupt):
        tiny_trainer(tmp_path / "killed", n=54, monitor=True, callbacks=[KillAt3()], **options).train()
    resumed = tiny_trainer(tmp_path / "killed", n=54, monitor=True, model=tiny_model(seed=4), **options)
    resumed.train(resume_from_checkpoint=True)
    for a, b in zip(training_logs(straight), training_logs(resumed), strict=True):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in a), (a, b)
    assert [e["step"] for e in training_logs(straight)] == [2, 3, 4, 6, 8, 9]  # and one at each checkpoint
    assert train_loss(resumed) == pytest.approx(train_loss(straight), rel=1e-5)
    again = tiny_trainer(tmp_path / "killed", n=54, monitor=True, model=tiny_model(seed=5), **options)
    again.train(resume_from_checkpoint=True)  # the fold had finished: no step left to train
    assert train_loss(again) == pytest.approx(train_loss(straight), rel=1e-5)


def test_resume_from_checkpoint_true_with_only_torn_checkpoints_trains_from_step_0(tmp_path, caplog):
    """RecipeTrainer.train(resume_from_checkpoint=True) with no complete checkpoint fell back to the Trainer's own
    choice, the newest folder by name: the torn one, a raw FileNotFoundError on its trainer_state.json."""
    tiny_trainer(tmp_path / "run", eval_steps=2, callbacks=[StopAt2()]).train()
    (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").unlink()  # killed while saving its only checkpoint
    whole = tiny_trainer(tmp_path / "whole", eval_steps=2)
    whole.train()
    resumed = tiny_trainer(tmp_path / "run", eval_steps=2)
    with caplog.at_level("WARNING", logger="attnpool"):
        resumed.train(resume_from_checkpoint=True)
    assert (resumed.state.global_step, weights(resumed.model).keys()) == (whole.state.global_step,
                                                                          weights(whole.model).keys())
    assert all(torch.equal(a, b) for a, b in zip(weights(resumed.model).values(), weights(whole.model).values(),
                                                 strict=True))
    assert (f"{tmp_path / 'run' / 'checkpoint-2'} was not written to the end (no trainer_state.json: the run stopped "
            "while saving it) and cannot be resumed from: removed; no complete checkpoint: training starts again"
            ) in caplog.text
    (tmp_path / "other" / "checkpoint-final").mkdir(parents=True)  # no checkpoint-N: none at all, as before
    (tmp_path / "other" / "checkpoint-notes.txt").write_text("")
    with pytest.raises(ValueError, match="No valid checkpoint found in output directory"):
        tiny_trainer(tmp_path / "other", eval_steps=2).train(resume_from_checkpoint=True)


def test_torn_checkpoints_are_removed_and_each_warning_says_what_resumes(tmp_path, caplog):
    """Left in place, a torn checkpoint of a larger step outlived the new ones in the Trainer's rotation (each new
    one deleted once saved); the warning of the newest of two torn ones promised an earlier checkpoint."""
    for step in (2, 4, 8):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    with caplog.at_level("WARNING", logger="attnpool"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]
    assert [r.getMessage().rsplit("; ", 1)[1] for r in caplog.records] == ["resuming from checkpoint-2"] * 2
    (tmp_path / "checkpoint-2" / "trainer_state.json").unlink()
    assert last_complete_checkpoint(tmp_path) is None and not any(tmp_path.iterdir())
    assert caplog.records[-1].getMessage().endswith("removed; no complete checkpoint: training starts again")
    (tmp_path / "checkpoint-4").mkdir()  # a whole state without the weight average: passed over, not removed
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    assert last_complete_checkpoint(tmp_path, ema=True) is None and (tmp_path / "checkpoint-4").is_dir()
    assert "(no ema.safetensors: the run stopped while saving it) and cannot be resumed from: passed over" in (
        caplog.records[-1].getMessage())
