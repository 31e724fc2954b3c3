"""``python -m attnpool ...``: the ``attnpool`` command (so ``torchrun -m attnpool train ...`` works too)."""

import sys

from attnpool.cli import main

if __name__ == "__main__":
    sys.exit(main())
