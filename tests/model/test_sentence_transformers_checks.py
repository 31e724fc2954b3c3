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


def test_a_size_mismatch_is_told_in_attnpoolings_terms():
    """The message was build_pooler's: "pooler config has hidden_size=16 but hidden_size=32 was requested"."""
    with pytest.raises(ValueError, match="AttnPooling got a pooler config for hidden_size=16 and "
                                         "embedding_dimension=32: they must agree"):
        AttnPooling({"type": "attention", "hidden_size": 16}, 32)
    with pytest.raises(ValueError, match="AttnPooling got a pooler \\(AttentionPooling\\) built for hidden_size=16 "
                                         "and embedding_dimension=32: they must agree"):
        AttnPooling(AttentionPooling(hidden_size=16), 32)
    assert AttnPooling({"type": "attention", "hidden_size": 16}, 16).get_embedding_dimension() == 16


def test_keyword_options_with_a_built_pooler_are_told_in_attnpoolings_terms():
    """The message was "build_pooler got options ['attn_size'] together with a built pooler instance"."""
    with pytest.raises(ValueError, match="AttnPooling got keyword options \\['attn_size'\\] with a built "
                                         "AttentionPooling.*pass its name \\('attention'\\) with the options"):
        AttnPooling(AttentionPooling(hidden_size=16), attn_size=4)


def test_options_written_into_the_name_point_to_keyword_options():
    """``"attention:attn_size=8"`` said only "Unknown pooler"."""
    with pytest.raises(ValueError, match="Unknown pooler 'attention:attn_size=8'.*AttnPooling takes the pooler's "
                                         "name alone and its options as keyword arguments: AttnPooling\\('attention', "
                                         "embedding_dimension, attn_size=8\\)"):
        AttnPooling("attention:attn_size=8", 32)
    assert AttnPooling("attention", 32, attn_size=8).pooler.get_config()["attn_size"] == 8
    with pytest.raises(ValueError, match="AttnPooling\\('attention', embedding_dimension, attn_size=8, "
                                         "init='uniform'\\)$"):  # text quoted: the call it shows runs
        AttnPooling("attention:attn_size=8,init=uniform", 32)
    with pytest.raises(ValueError, match="AttnPooling\\('attention', embedding_dimension\\)$"):  # no dangling comma
        AttnPooling("attention:", 32)
    with pytest.raises(ValueError, match="embedding_dimension, attn_size=8,attn_size=9\\)$"):  # twice: as given
        AttnPooling("attention:attn_size=8,attn_size=9", 32)
    with pytest.raises(ValueError, match="Did you mean 'attention'"):  # a misspelt name: not suggested as it is
        AttnPooling("atention:attn_size=8", 32)
