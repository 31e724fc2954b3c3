"""What ``pool`` returns: a pair ``(pooled (B, output_dim), weights None or (B, [heads,] T))``, checked by forward.

A pooler whose ``pool`` returned the pooled tensor alone was unpacked along its batch axis: at B = 2, row 0 came back
as the pooled "batch" (shape ``(H,)``) and row 1 as the weights, silently; at B = 3 ``check_pooler`` failed with
"too many values to unpack (expected 2)", naming no property.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import attnpool
from attnpool.pooling import Pooler, check_pooler, registry
from attnpool.pooling.base import PoolOutputError

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


class PooledOnly(Pooler):
    """Returns the pooled tensor without the weights."""

    name = "test_pooled_only"

    def pool(self, hidden_states, mask):
        m = mask.unsqueeze(-1).to(hidden_states.dtype)
        return (hidden_states * m).sum(1) / m.sum(1).clamp(min=1)


class WideOutput(Pooler):
    """Returns a pooled vector wider than its output_dim."""

    name = "test_wide_output"

    def pool(self, hidden_states, mask):
        return torch.cat([hidden_states.sum(1), hidden_states.sum(1)], -1), None


class WeightsPerChannel(Pooler):
    """Returns weights ``(B, T, H)`` instead of ``(B, T)``."""

    name = "test_weights_per_channel"

    def pool(self, hidden_states, mask):
        weights = mask[..., None].expand_as(hidden_states).to(hidden_states.dtype)
        return hidden_states.sum(1), weights


def test_pooled_alone_is_refused_naming_the_class_what_it_returned_and_what_is_expected():
    with pytest.raises(PoolOutputError) as err:
        PooledOnly(8)(torch.randn(2, 5, 8), torch.ones(2, 5))
    assert str(err.value) == (
        "PooledOnly.pool returned a tensor of shape (2, 8); expected a pair (pooled, weights): pooled of shape (2, 8) "
        "(batch, output_dim), weights None or of shape (2, 5) (batch, seq_len) or (2, heads, 5), e.g. "
        "`return pooled, None`")
    assert isinstance(err.value, TypeError)


@pytest.mark.parametrize(("cls", "returned"), [
    (WideOutput, "a tuple of 2 (a tensor of shape (3, 16), None)"),
    (WeightsPerChannel, "a tuple of 2 (a tensor of shape (3, 8), a tensor of shape (3, 4, 8))"),
])
def test_wrong_shapes_are_refused(cls, returned):
    with pytest.raises(PoolOutputError, match=rf"^{cls.__name__}\.pool returned {re.escape(returned)}; expected a "
                       r"pair \(pooled, weights\): pooled of shape \(3, 8\)"):
        cls(8)(torch.randn(3, 4, 8), torch.ones(3, 4), return_weights=True)


def test_a_batch_without_tokens_is_checked_too():
    with pytest.raises(PoolOutputError, match=r"^PooledOnly\.pool returned a tensor of shape \(2, 8\)"):
        PooledOnly(8)(torch.randn(2, 0, 8), torch.ones(2, 0))


def test_check_pooler_names_the_return_value_first(scratch_registry):
    attnpool.register_pooler(PooledOnly)
    with pytest.raises(AssertionError, match=r"^pool return value: PooledOnly\.pool returned a tensor of shape "
                       r"\(3, 16\); expected a pair \(pooled, weights\)"):
        check_pooler(PooledOnly)


def test_the_readme_example_returns_the_pair_and_passes_check_pooler(scratch_registry):
    text = README.read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "@attnpool.register_pooler" in b]
    assert len(blocks) == 1, "the README's custom-pooler section has one example of a registered pooler"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # runs check_pooler itself
    pooler = attnpool.build_pooler("scaled_mean", 8, scale=2.0)
    assert pooler.has_weights, "the example returns weights, so it declares has_weights = True"
    hidden, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    pooled, weights = pooler(hidden, mask, return_weights=True)
    torch.testing.assert_close(pooled[0], 2 * hidden[0, :3].mean(0))
    assert weights.shape == (2, 5) and weights[0, 3:].eq(0).all()
