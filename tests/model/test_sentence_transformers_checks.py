"""AttnPooling refuses a pooler instance it would not reload as itself, and names its own size parameter."""

from __future__ import annotations

import pytest

pytest.importorskip("sentence_transformers")

from attnpool.integrations.sentence_transformers import AttnPooling  # noqa: E402
from attnpool.pooling import AttentionPooling  # noqa: E402


class ScaledAttention(AttentionPooling):  # keeps the parent's registered name "attention"
    def forward(self, hidden, mask=None, return_weights=False, **kwargs):
        pooled, weights = super().forward(hidden, mask, return_weights=True, **kwargs)
        return (pooled * 10, weights) if return_weights else pooled * 10


def test_a_pooler_instance_that_would_reload_as_another_class_is_refused():
    """It was saved by its parent's name and reloaded as the parent: the embeddings changed silently."""
    with pytest.raises(ValueError, match="AttnPooling: pooling=ScaledAttention\\(...\\) is not the pooler registered "
                                         "as 'attention': .* it would reload as AttentionPooling"):
        AttnPooling(ScaledAttention(hidden_size=16))
    assert AttnPooling(AttentionPooling(hidden_size=16)).get_embedding_dimension() == 16


@pytest.mark.parametrize("pooling", ["attention", {"type": "attention"}])
def test_a_pooler_without_a_size_names_embedding_dimension(pooling):
    """The message named build_pooler's hidden_size and the encoder's config, not AttnPooling's own parameter."""
    with pytest.raises(ValueError, match="needs embedding_dimension, the transformer's hidden size: AttnPooling\\(.*, "
                                         "transformer.get_embedding_dimension\\(\\)\\)"):
        AttnPooling(pooling)
    assert AttnPooling({"type": "attention", "hidden_size": 16}).get_embedding_dimension() == 16
