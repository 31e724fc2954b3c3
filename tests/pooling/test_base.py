"""The checks of ``Pooler.forward`` on what it is given: a mask that is not a tensor, a dtype the pooler cannot mix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnpool.pooling import build_pooler

MASK = [[1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("name", ["mean", "attention"])
@pytest.mark.parametrize("mask", [np.array(MASK), MASK, (1, 1, 0)], ids=["ndarray", "list", "tuple"])
def test_a_mask_that_is_not_a_tensor_is_refused_naming_the_fix(name, mask):
    """A NumPy or list mask failed deep inside (`view() takes from 0 to 2 positional arguments`, `'list' object has
    no attribute 'shape'`), naming neither the mask nor what to pass."""
    pooler = build_pooler(name, 4)
    with pytest.raises(ValueError, match=rf"^{type(pooler).__name__}: expected attention_mask to be a torch tensor of "
                       rf"shape \(2, 3\) or None, got a {type(mask).__name__}; convert it with torch\.as_tensor"
                       r"\(attention_mask\), or tokenize with tokenizer\(\.\.\., return_tensors='pt'\)"):
        pooler(torch.randn(2, 3, 4), mask)


def test_the_same_mask_as_a_tensor_pools():
    pooler = build_pooler("mean", 4)
    hidden = torch.randn(2, 3, 4)
    torch.testing.assert_close(pooler(hidden, torch.as_tensor(np.array(MASK))), pooler(hidden, torch.tensor(MASK)))


@pytest.mark.parametrize("name", ["attention", "pma", "multihead_attention", "latent_attention"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_hidden_states_in_another_dtype_than_the_pooler_name_both_and_the_fix(name, dtype):
    """A float32 pooler given bf16 states outside autocast raised PyTorch's `mat1 and mat2 must have the same
    dtype`, naming neither the pooler nor the cure."""
    pooler = build_pooler(name, 16)
    hidden = torch.randn(2, 3, 16, dtype=dtype)
    with torch.autocast("cpu", enabled=False):  # the test's context may hold one (the suite runs under bf16 too)
        # CPU autocast runs half precision only: float64 states get the cast alone
        autocast = rf" or run it under torch\.autocast\('cpu', dtype={dtype}\)" if dtype != torch.float64 else ""
        with pytest.raises(ValueError, match=rf"^{type(pooler).__name__}: hidden_states are {dtype} but the "
                           r"pooler's parameters are torch\.float32; cast the pooler to the hidden states' dtype "
                           rf"\(pooler\.to\(hidden_states\.dtype\)\){autocast} \(PyTorch: "):
            pooler(hidden, torch.tensor(MASK))
        pooled = pooler.to(dtype)(hidden, torch.tensor(MASK))  # the first cure named
    assert pooled.dtype == dtype and torch.isfinite(pooled).all()


def test_under_autocast_a_float32_pooler_pools_half_precision_states():
    pooler = build_pooler("attention", 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pooled = pooler(torch.randn(2, 3, 16, dtype=torch.bfloat16), torch.tensor(MASK))
    assert torch.isfinite(pooled).all()


@pytest.mark.parametrize(("name", "options"), [("gem", {}), ("ggem", {"num_groups": 4}), ("adaptive", {}),
                                               ("maxpoolbert", {"mode": "attention", "num_layers": 2})])
def test_poolers_that_mix_dtypes_themselves_still_pool_other_dtypes(name, options):
    """Their parameters stay float32 while they compute in the states' dtype (a cast p, a float32 query): the
    check of mixed dtypes must not refuse them."""
    pooler = build_pooler(name, 16, **options)
    lead = (pooler.num_layers,) if pooler.needs_all_layers else ()
    hidden = torch.randn(2, *lead, 3, 16, dtype=torch.bfloat16)
    with torch.autocast("cpu", enabled=False):
        pooled = pooler(hidden, torch.tensor(MASK))
    assert pooled.dtype == torch.bfloat16 and torch.isfinite(pooled).all()
