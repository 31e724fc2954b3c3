"""A resumed epoch trains the batches it had not trained yet, in that epoch's order, also under DDP's wrappers."""

from __future__ import annotations

from torch.utils.data import BatchSampler
from trainer_helpers import tiny_trainer


def test_a_resumed_epoch_under_ddp_wrappers_keeps_its_epoch_order(tmp_path):
    """torchrun wraps the sampler as SkipBatchSampler(BatchSamplerShard(BatchSampler(sampler))) on resume.

    Neither accelerate's DataLoaderShard.set_epoch nor the Trainer's reaches that deep, so the sampler (created
    afresh on resume) replayed epoch 0's order: the skipped batches were not the ones trained.
    """
    from accelerate.data_loader import BatchSamplerShard, DataLoaderShard

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
