"""``python -m attnpool ...``: the ``attnpool`` command (so ``torchrun -m attnpool train ...`` works too)."""

from attnpool.cli import run

if __name__ == "__main__":
    run()
