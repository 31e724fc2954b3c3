"""attnpool poolers inside a SentenceTransformer: encode, train with its trainer, save and load."""

from __future__ import annotations

import pytest
import torch

from model_helpers import save_tiny_encoder

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("datasets")

from attnpool.integrations.sentence_transformers import AttnPooling  # noqa: E402

SENTENCES = ["the cat sat on the mat", "a dog ran", "the big red house", "small blue tree"]


def make_model(tmp_path, pooling="attention", **options):
    from sentence_transformers.sentence_transformer.modules import Transformer

    transformer = Transformer(save_tiny_encoder(tmp_path / "encoder"))
    pooler = AttnPooling(pooling, transformer.get_embedding_dimension(), **options)
    return st.SentenceTransformer(modules=[transformer, pooler], device="cpu")


def test_encode_gives_pooled_embeddings_and_weights(tmp_path):
    model = make_model(tmp_path, attn_size=8)
    embeddings = model.encode(SENTENCES, convert_to_tensor=True)
    assert embeddings.shape == (4, 32)
    assert model.get_embedding_dimension() == 32
    features = model.tokenize(SENTENCES)
    out = model(features)
    weights, mask = out["token_weights"], features["attention_mask"]
    assert (weights[mask == 0] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))


def test_save_and_load_round_trip(tmp_path):
    model = make_model(tmp_path, pooling="multihead_attention", num_heads=2, attn_size=8)
    with torch.no_grad():
        model[1].pooler.score.weight.add_(0.5)  # differ from the initialisation
    before = model.encode(SENTENCES, convert_to_tensor=True)
    model.save(str(tmp_path / "st"))
    saved = sorted(p.name for p in (tmp_path / "st" / "1_AttnPooling").iterdir())
    assert saved == ["attnpool_config.json", "model.safetensors"]
    # sentence-transformers >= 6 imports any module class outside its own package only when trusted.
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    loaded = st.SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    assert type(loaded[1]) is AttnPooling and loaded.get_embedding_dimension() == 64
    torch.testing.assert_close(loaded.encode(SENTENCES, convert_to_tensor=True), before, atol=1e-6, rtol=1e-5)


def test_trains_with_the_sentence_transformers_trainer(tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    model = make_model(tmp_path, attn_size=8)
    before = {k: v.clone() for k, v in model[1].pooler.state_dict().items()}
    data = Dataset.from_dict({
        "sentence1": ["the cat sat", "a dog ran", "the big tree", "small house"] * 4,
        "sentence2": ["a cat sat", "the red house", "a big tree", "the dog ran"] * 4,
        "score": [1.0, 0.0, 1.0, 0.0] * 4,
    })
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=1,
                                                per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                                save_strategy="no", disable_tqdm=True, learning_rate=1e-2)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=CosineSimilarityLoss(model)).train()
    after = model[1].pooler.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the pooler was not trained"


@pytest.mark.parametrize("pooling", ["weighted_layer", "ditto"])
def test_poolers_a_pipeline_cannot_feed_are_refused_when_built(pooling):
    """They read several layers or the attention maps; a sentence-transformers pooling module gets the last layer."""
    with pytest.raises(ValueError, match=f"AttnPooling: pooler '{pooling}' reads several layers or the encoder's "
                                         "attention maps"):
        AttnPooling(pooling, 16)


def test_a_pooler_regulariser_a_pipeline_would_drop_is_refused():
    """multihead_attention's penalty was accepted and never reached the sentence-transformers loss."""
    with pytest.raises(ValueError, match="AttnPooling: pooler 'multihead_attention' has a training regulariser"):
        AttnPooling("multihead_attention", 16, num_heads=2, penalty=0.5)
    assert AttnPooling("multihead_attention", 16, num_heads=2).get_embedding_dimension() > 0


@pytest.mark.parametrize("pooling", ["attention", "mean"])
def test_a_batch_packed_into_one_row_is_pooled_text_by_text(pooling):
    """sentence-transformers packs a flash-attention encoder's batch into one row (cu_seq_lens_q marks each text's
    start, no attention mask): pooled as it came, the batch got one embedding."""
    torch.manual_seed(0)
    module = AttnPooling(pooling, 32).eval()
    tokens = torch.randn(1, 7, 32)
    features = {"token_embeddings": tokens.clone(), "input_ids": torch.arange(1, 8)[None],
                "cu_seq_lens_q": torch.tensor([0, 3, 7]), "cu_seq_lens_k": torch.tensor([0, 3, 7]),
                "max_length_q": 4, "max_length_k": 4}
    with torch.no_grad():
        packed = module(features)["sentence_embedding"]
        alone = [module({"token_embeddings": tokens[:, a:b], "attention_mask": torch.ones(1, b - a)})
                 ["sentence_embedding"] for a, b in ((0, 3), (3, 7))]
    assert packed.shape == (2, 32)
    torch.testing.assert_close(packed, torch.cat(alone))
