"""Adversarial training under torchrun with gradient accumulation: every process perturbs along the same gradient.

The Trainer runs each micro-batch but a step's last under DDP's ``no_sync``, where a process's gradient is its own
rows' alone: each process then perturbed its weights in a direction of its own, and 2 processes trained otherwise than
1 with the same global batch. This file is also the script that ``torchrun`` starts (:func:`record`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

KINDS = {"awp": 1e-2, "fgm": 1.0}  # adversarial_eps
BATCH, GRAD_ACCUM, ROWS = 4, 2, 24  # 1 process x 4 or 2 x 2; 24 rows: 16 training rows = 2 global batches of 8


def record(out: Path, kind: str, batch_size: int) -> dict:
    """Train 2 steps; the norm of the gradient each perturbation follows, at every micro-batch, and the weights."""
    from trainer_helpers import tiny_model, tiny_trainer, weights

    trainer = tiny_trainer(out / kind, model=tiny_model(dropout=0.0), n=ROWS, batch_size=batch_size,
                           grad_accum=GRAD_ACCUM, adversarial=kind, adversarial_start=0.0, adversarial_eps=KINDS[kind])
    adversary = trainer.adversary
    grads = list(adversary.params.values()) if kind == "awp" else [adversary.weight]
    norms, perturb = [], adversary.perturb

    def spy():
        norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in grads]))))
        perturb()

    adversary.perturb = spy
    trainer.args.max_steps = 2
    trainer.train()
    return {"norms": norms, "weights": weights(trainer.model)}


def test_each_micro_batch_synchronises_only_with_adversarial_training_and_accumulation(tmp_path):
    from attnpool.config import TrainConfig
    from attnpool.training.arguments import training_arguments

    def sync_each_batch(**options):
        cfg = TrainConfig(train_file="x.csv", text_cols=["a"], precision="fp32", **options).validate()
        kwargs = training_arguments(cfg, tmp_path, 10).accelerator_config.gradient_accumulation_kwargs
        return (kwargs or {}).get("sync_each_batch", False)

    assert sync_each_batch(adversarial="awp", grad_accum=2) and sync_each_batch(adversarial="fgm", grad_accum=4)
    assert not sync_each_batch(adversarial="awp") and not sync_each_batch(grad_accum=2)


@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="needs torch.distributed with the gloo backend")
def test_with_gradient_accumulation_every_process_perturbs_along_the_averaged_gradient(tmp_path):
    """2 CPU processes (gloo) with batch 2 against 1 with batch 4, both accumulating 2 micro-batches, no dropout."""
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests / "training"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
               str(tmp_path / "two")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}\n{proc.stderr[-4000:]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACCELERATE_USE_CPU", "true")
        one = {kind: record(tmp_path / "one", kind, BATCH) for kind in KINDS}
    for kind in KINDS:
        ranks = [json.loads((tmp_path / "two" / f"{kind}_{rank}.json").read_text()) for rank in (0, 1)]
        assert len(one[kind]["norms"]) == 2 * GRAD_ACCUM  # every micro-batch of 2 steps
        for rank in ranks:  # each micro-batch's gradient is the global batch's on both processes
            assert rank["norms"] == pytest.approx(one[kind]["norms"], rel=1e-4), kind
        two = torch.load(tmp_path / "two" / f"{kind}_weights.pt")
        for name, w in one[kind]["weights"].items():
            torch.testing.assert_close(two[name], w, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, n=f"{kind} {name}": f"{n}: {m}")


if __name__ == "__main__":  # under torchrun: python -m torch.distributed.run ... test_adversarial_ddp.py OUT
    import torch.distributed as dist

    folder, rank = Path(sys.argv[1]), int(os.environ["RANK"])
    for name in KINDS:
        result = record(folder, name, BATCH // 2)
        (folder / f"{name}_{rank}.json").write_text(json.dumps({"norms": result["norms"]}))
        if rank == 0:
            torch.save(result["weights"], folder / f"{name}_weights.pt")
    dist.destroy_process_group()
