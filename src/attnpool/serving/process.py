"""What loading a model for serving changes in the process, given back when the call is refused.

:meth:`Service.load <attnpool.serving.service.Service.load>` sizes PyTorch's intra-op pool and sets
``TOKENIZERS_PARALLELISM`` (:func:`~attnpool.threads.set_threads`): a served process keeps them while it serves,
but a call that fails (a bad option, a missing run, a port in use) leaves a notebook as it was, and
:func:`attnpool.serve` gives them back once the server has stopped, as ``predict`` does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

PARALLELISM = "TOKENIZERS_PARALLELISM"


@contextlib.contextmanager
def thread_settings_kept(*, on_success: bool = False) -> Iterator[None]:
    """Give back PyTorch's thread count and ``TOKENIZERS_PARALLELISM`` if the block raises.

    With ``on_success``, also once it returns. Usable as a decorator (each call keeps its own settings).
    """
    threads, parallelism, failed = torch.get_num_threads(), os.environ.get(PARALLELISM), True
    try:
        yield
        failed = False
    finally:
        if failed or on_success:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            if parallelism is None:
                os.environ.pop(PARALLELISM, None)
            else:
                os.environ[PARALLELISM] = parallelism
