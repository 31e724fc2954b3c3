"""The encoder + pooler + head model on tiny random encoders of every supported family."""

from __future__ import annotations

import pytest
import torch
import transformers

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.model.encoders import ENCODER_DROPOUT_FIELDS, set_encoder_dropout
from attnpool.pooling import AttentionPooling, Pooler, register_pooler, registry
from model_helpers import DECODER_FAMILIES, ENCODER_FAMILIES, batch, tiny_config, tiny_tokenizer


def build(family="bert", **kwargs):
    torch.manual_seed(0)
    if "pooling" not in kwargs:
        kwargs.setdefault("pooling_options", {"attn_size": 16})
    return AttnPoolForSequenceClassification.from_encoder(tiny_config(family), **kwargs)


@pytest.mark.parametrize("family", ENCODER_FAMILIES + DECODER_FAMILIES)
def test_forward_backward_for_each_family(family):
    # xavier: the default start zeroes the scoring layer, so the first layer's gradient would be exactly zero
    model = build(family, pooling_options={"attn_size": 16, "init": "xavier"}).train()
    ids, mask = batch([5, 3, 7])
    out = model(input_ids=ids, attention_mask=mask, labels=torch.rand(3), return_pooling_weights=True)
    assert out.logits.shape == (3, 1)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    pooler = model.attnpool.pooler
    for grad in (pooler.proj.weight.grad, pooler.score.weight.grad):  # both layers of the scorer learn
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    grads = [p.grad for p in model.attnpool.encoder.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    weights = out.pooling_weights
    assert (weights[mask == 0] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_left_padding_equals_right_padding_for_decoder_only(family):
    model = build(family, pooling="last_token").eval()
    right_ids, right_mask = batch([5, 2, 7], seq_len=8, side="right")
    left_ids, left_mask = batch([5, 2, 7], seq_len=8, side="left")
    right = model(input_ids=right_ids, attention_mask=right_mask).logits
    left = model(input_ids=left_ids, attention_mask=left_mask).logits
    torch.testing.assert_close(left, right, atol=1e-5, rtol=1e-4)


def test_attention_pooling_under_left_padding_for_decoder_only():
    model = build("llama").eval()
    right = model(*batch([4, 6], seq_len=7, side="right"), return_pooling_weights=True)
    left = model(*batch([4, 6], seq_len=7, side="left"), return_pooling_weights=True)
    torch.testing.assert_close(left.logits, right.logits, atol=1e-5, rtol=1e-4)


def test_token_type_ids_are_passed_only_to_encoders_that_take_them():
    ids, mask = batch([4, 4])
    types = torch.zeros_like(ids)
    types[:, 2:] = 1
    bert = build("bert").eval()
    assert not torch.allclose(bert(ids, mask, token_type_ids=types).logits, bert(ids, mask).logits)
    modern = build("modernbert").eval()  # ModernBERT has no token types: they are dropped, not an error
    torch.testing.assert_close(modern(ids, mask, token_type_ids=types).logits, modern(ids, mask).logits)


def test_save_load_gives_identical_logits_and_weights(tmp_path):
    model = build("bert", pooling="multihead_attention", pooling_options={"num_heads": 2, "attn_size": 8}).eval()
    ids, mask = batch([6, 2, 4])
    before = model(ids, mask, return_pooling_weights=True)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert not loaded.training
    after = loaded(ids, mask, return_pooling_weights=True)
    # bit for bit: the loaded weights are copied out of the memory-mapped file into 64-byte-aligned memory, so the
    # kernels take the saved model's code paths (on unaligned weights an AMD EPYC differed in the last bit)
    assert all(t.data_ptr() % 64 == 0 for t in [*loaded.parameters(), *loaded.buffers()])
    torch.testing.assert_close(after.logits, before.logits, atol=0, rtol=0)
    torch.testing.assert_close(after.pooling_weights, before.pooling_weights, atol=0, rtol=0)
    assert loaded.config.pooling == model.config.pooling
    for (name, p), (_, q) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    again = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert torch.equal(again(ids, mask).logits, after.logits)  # loading is deterministic, bit for bit


def test_weights_a_checkpoint_does_not_give_are_initialised_on_load(tmp_path):
    """transformers 5 left our head, pooler and recurrent layer uninitialised when the checkpoint lacked them: a new
    head (num_labels=3, ignore_mismatched_sizes=True) predicted logits of 1e26, recurrent="lstm" NaN."""
    build("bert").save_pretrained(tmp_path)
    ids, mask = batch([5, 3])
    swapped, info = AttnPoolForSequenceClassification.from_pretrained(tmp_path, num_labels=3,
                                                                      ignore_mismatched_sizes=True,
                                                                      output_loading_info=True)
    assert {key for key, *_ in info["mismatched_keys"]} >= {"head.out.weight"}  # the info, when asked for
    fresh = build("bert", num_labels=3).head.out.weight
    assert swapped.head.out.weight.abs().max() <= fresh.abs().max() * 2  # an initialisation, not memory left over
    assert torch.isfinite(swapped.eval()(ids, mask).logits).all()
    for override in ({"recurrent": "lstm"}, {"pooling": "gem"}, {"pooling": "latent_attention"}):
        loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path, **override).eval()
        assert all(torch.isfinite(p).all() and p.abs().max() < 10 for p in loaded.parameters()), override
        assert torch.isfinite(loaded(ids, mask).logits).all()


def test_return_dict_false_gives_the_tuple_of_set_fields():
    """The output was always a ModelOutput, a dict: `loss, logits = model(..., return_dict=False)` unpacked its keys."""
    model = build("bert").eval()
    ids, mask = batch([5, 3])
    labels = torch.tensor([0.2, 0.7])
    full = model(ids, mask, labels=labels)
    loss, logits = model(ids, mask, labels=labels, return_dict=False)
    assert torch.equal(loss, full.loss) and torch.equal(logits, full.logits)
    model.config.return_dict = False
    assert isinstance(model(ids, mask), tuple) and isinstance(model.attnpool(ids, mask), tuple)
    assert torch.equal(model(ids, mask, return_dict=True).logits, full.logits)


def test_a_model_with_resized_token_embeddings_saves_and_loads(tmp_path):
    """Added tokens (resize_token_embeddings): the new vocab_size went to the outer config, the load failed."""
    model = build("bert").eval()
    vocab = model.config.encoder.vocab_size
    model.resize_token_embeddings(vocab + 21)
    assert model.config.encoder.vocab_size == vocab + 21
    ids, mask = batch([6, 3])
    ids[0, 1] = vocab + 20  # one of the new tokens
    model.save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded(ids, mask).logits, model(ids, mask).logits, atol=0, rtol=0)


def test_auto_classes_load_a_saved_folder(tmp_path):
    model = build("bert").eval()
    model.save_pretrained(tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, AttnPoolConfig) and config.pooling["type"] == "attention"
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert isinstance(classifier, AttnPoolForSequenceClassification)
    base = transformers.AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, AttnPoolModel)
    ids, mask = batch([3, 5])
    torch.testing.assert_close(base(ids, mask).pooler_output, model.attnpool(ids, mask).pooler_output,
                               atol=1e-6, rtol=1e-6)


def test_named_labels_give_the_number_of_outputs():
    """id2label without num_labels built a one-output regression head and dropped the names (transformers infers 3)."""
    model = build("bert", id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2})
    assert model.config.num_labels == 3 and model.config.problem_type is None
    assert model.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
    ids, mask = batch([4, 3])
    assert model(ids, mask).logits.shape == (2, 3)


def test_pipeline_runs_on_a_saved_folder(tmp_path):
    model = build("bert", num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"},
                  label2id={"neg": 0, "neu": 1, "pos": 2})
    model.save_pretrained(tmp_path, tokenizer=tiny_tokenizer())
    classify = transformers.pipeline("text-classification", model=str(tmp_path))
    results = classify(["the cat sat", "a big red dog ran fast"])
    assert [r["label"] in {"neg", "neu", "pos"} for r in results] == [True, True]
    assert all(0 <= r["score"] <= 1 for r in results)
    # The pipeline's scores are the model's own softmax.
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    enc = tokenizer(["the cat sat"], return_tensors="pt")
    model.eval()
    probs = model(**enc).logits.softmax(-1)[0]
    assert abs(results[0]["score"] - probs.max().item()) < 1e-5


def test_sigmoid_regression_uses_bce_and_outputs_in_unit_interval():
    model = build("bert", output_activation="sigmoid").eval()
    ids, mask = batch([4, 6])
    labels = torch.tensor([0.25, 1.0])
    out = model(ids, mask, labels=labels)
    assert ((out.logits > 0) & (out.logits < 1)).all()
    raw = torch.logit(out.logits.squeeze(-1).double()).float()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(raw, labels)
    torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=1e-4)


def test_pooling_layers_list_and_all():
    model = build("bert", pooling_layers=[-1, -2]).eval()
    ids, mask = batch([4, 6])
    out = model.attnpool(ids, mask, output_hidden_states=True)
    expected_hidden = (out.hidden_states[-1] + out.hidden_states[-2]) / 2
    torch.testing.assert_close(out.pooler_output, model.attnpool.pooler(expected_hidden, mask))
    everything = build("bert", pooling="mean", pooling_layers="all").eval()
    out = everything.attnpool(ids, mask, output_hidden_states=True)
    mean_of_layers = torch.stack(out.hidden_states[1:]).mean(0)
    torch.testing.assert_close(out.pooler_output, everything.attnpool.pooler(mean_of_layers, mask))


def test_pooler_is_xavier_initialised_inside_the_model():
    model = build("bert", pooling_options={"attn_size": 512})
    proj = model.attnpool.pooler.proj
    bound = (6.0 / (32 + 512)) ** 0.5
    assert proj.weight.abs().max() <= bound and proj.weight.abs().max() > 0.9 * bound
    assert torch.equal(proj.bias, torch.zeros_like(proj.bias))


def test_pooler_instance_keeps_its_weights():
    pooler = AttentionPooling(32, attn_size=8)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooler)
    assert torch.equal(model.attnpool.pooler.proj.weight, pooler.proj.weight)


def test_trainer_reduces_the_loss_on_a_toy_task(tmp_path):
    torch.manual_seed(0)
    model = build("bert", head_dropout=0.0)
    ids, mask = batch([6] * 32, seed=1)
    labels = (ids == 10).any(dim=1).float() + 0.5 * (ids == 20).any(dim=1).float()  # a few key tokens decide

    class Toy(torch.utils.data.Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, i):
            return {"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]}

    def loss_on_data():
        model.eval()
        with torch.no_grad():
            return model(ids, mask, labels=labels).loss.item()

    before = loss_on_data()
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=8,
                                          learning_rate=3e-3, report_to=[], save_strategy="no", logging_steps=50,
                                          use_cpu=True, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Toy())
    # A per-batch mean loss: the Trainer must not rescale it by processes / accumulation steps.
    assert trainer.model_accepts_loss_kwargs is False
    trainer.train()
    assert loss_on_data() < 0.5 * before


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = batch([5, 7])
    grads = []
    for checkpointing in (False, True):
        model = build("bert", head_dropout=0.0)
        model.config.encoder.hidden_dropout_prob = 0.0
        model.train()
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        if checkpointing:  # transformers >= 5.x renamed it; the Trainer calls whichever exists
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable()
            else:
                model.gradient_checkpointing_enable()
            layer = model.attnpool.encoder.encoder.layer[0]
            assert layer.gradient_checkpointing
        model(ids, mask, labels=torch.rand(2, generator=torch.Generator().manual_seed(0))).loss.backward()
        grads.append(model.attnpool.encoder.embeddings.word_embeddings.weight.grad.clone())
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-5)


def test_freeze_embeddings_and_layers():
    model = build("bert")
    model.freeze_layers(1)
    encoder = model.attnpool.encoder
    assert not any(p.requires_grad for p in encoder.embeddings.parameters())
    assert not any(p.requires_grad for p in encoder.encoder.layer[0].parameters())
    assert all(p.requires_grad for p in encoder.encoder.layer[1].parameters())
    assert all(p.requires_grad for p in model.attnpool.pooler.parameters())
    with pytest.raises(ValueError, match=r"num_layers must be in \[0, 2\], got 5"):
        model.freeze_layers(5)


def test_freeze_word_embeddings_freezes_the_input_embedding_matrix_alone():
    model = build("bert")
    model.freeze_word_embeddings()
    embeddings = model.attnpool.encoder.embeddings
    assert not embeddings.word_embeddings.weight.requires_grad
    trained = [n for n, p in embeddings.named_parameters() if p.requires_grad]
    assert trained and all(not n.startswith("word_embeddings") for n in trained)
    built = type(model).from_encoder(tiny_config("bert"), freeze_word_embeddings=True)
    assert [n for n, p in built.named_parameters() if not p.requires_grad] == [
        "attnpool.encoder.embeddings.word_embeddings.weight"]


def test_reinit_top_layers_changes_only_the_top_layers(tmp_path):
    source = build("bert")
    source.attnpool.encoder.save_pretrained(tmp_path)  # a "pre-trained" encoder folder
    plain = AttnPoolForSequenceClassification.from_encoder(str(tmp_path))
    reinit = AttnPoolForSequenceClassification.from_encoder(str(tmp_path), reinit_layers=1)
    layers_plain, layers_reinit = plain.attnpool.encoder.encoder.layer, reinit.attnpool.encoder.encoder.layer
    assert torch.equal(layers_plain[0].attention.self.query.weight, layers_reinit[0].attention.self.query.weight)
    top_plain = layers_plain[1].attention.self.query.weight
    top_reinit = layers_reinit[1].attention.self.query.weight
    assert not torch.equal(top_plain, top_reinit)
    assert abs(top_reinit.std().item() - 0.02) < 0.005  # BERT's initializer_range
    assert torch.equal(layers_reinit[1].output.LayerNorm.weight, torch.ones(32))
    # the top layer re-initialised and the bottom 1 frozen fit in 2 layers; frozen 2 would keep a random layer fixed
    both = AttnPoolForSequenceClassification.from_encoder(str(tmp_path), reinit_layers=1, freeze_layers=1)
    assert all(p.requires_grad for p in both.attnpool.encoder.encoder.layer[1].parameters())
    with pytest.raises(ValueError, match="reinit_layers=1 and freeze_layers=2 overlap on this 2-layer encoder"):
        AttnPoolForSequenceClassification.from_encoder(str(tmp_path), reinit_layers=1, freeze_layers=2)


def test_from_encoder_loads_pretrained_weights_from_a_local_folder(tmp_path):
    source = build("bert")
    source.attnpool.encoder.save_pretrained(tmp_path)
    model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path))
    torch.testing.assert_close(model.attnpool.encoder.embeddings.word_embeddings.weight,
                               source.attnpool.encoder.embeddings.word_embeddings.weight)


def test_home_relative_folders_and_subfolders_load(tmp_path, monkeypatch):
    """"~/m" went to the hub as a repo id, and subfolder= was refused for a folder without config.json on top."""
    monkeypatch.setenv("HOME", str(tmp_path))
    source = build("bert").eval()
    source.attnpool.encoder.save_pretrained(tmp_path / "enc")
    model = AttnPoolForSequenceClassification.from_encoder("~/enc")
    torch.testing.assert_close(model.attnpool.encoder.embeddings.word_embeddings.weight,
                               source.attnpool.encoder.embeddings.word_embeddings.weight)
    source.save_pretrained(tmp_path / "run" / "fold_0")
    ids, mask = batch([5, 3])
    for loaded in (AttnPoolForSequenceClassification.from_pretrained("~/run/fold_0"),
                   AttnPoolForSequenceClassification.from_pretrained(tmp_path / "run", subfolder="fold_0")):
        torch.testing.assert_close(loaded(ids, mask).logits, source(ids, mask).logits, atol=0, rtol=0)


def _train_mode_outputs_agree(model, ids, mask) -> bool:
    model.train()
    torch.manual_seed(1)
    first = model(ids, mask).logits
    torch.manual_seed(2)
    return torch.equal(first, model(ids, mask).logits)


@pytest.mark.parametrize("family", ["bert", "deberta-v3", "modernbert", "gpt2"])
def test_encoder_dropout_zero_makes_training_mode_deterministic_and_is_saved(family, tmp_path):
    ids, mask = batch([6, 4, 7])
    config = tiny_config(family)
    if family == "modernbert":  # its defaults are 0 already: give it dropout to take away
        config.attention_dropout = config.mlp_dropout = config.embedding_dropout = 0.3
    before = config.to_dict()
    torch.manual_seed(0)
    plain = AttnPoolForSequenceClassification.from_encoder(config, head_dropout=0.0)
    assert not _train_mode_outputs_agree(plain, ids, mask)
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(config, head_dropout=0.0, encoder_dropout=0.0)
    assert _train_mode_outputs_agree(model, ids, mask)
    assert config.to_dict() == before, "the caller's config is left as it was"
    model.save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    fields = [name for name in ENCODER_DROPOUT_FIELDS if hasattr(config, name)]
    assert fields and all(getattr(loaded.config.encoder, name) == 0.0 for name in fields)
    assert _train_mode_outputs_agree(loaded, ids, mask)


def test_encoder_dropout_applies_to_an_encoder_loaded_from_a_folder(tmp_path):
    source = build("bert")
    source.attnpool.encoder.save_pretrained(tmp_path)
    model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path), encoder_dropout=0.25, head_dropout=0.0)
    torch.testing.assert_close(model.attnpool.encoder.embeddings.word_embeddings.weight,
                               source.attnpool.encoder.embeddings.word_embeddings.weight)
    encoder_config = model.attnpool.encoder.config
    assert (encoder_config.hidden_dropout_prob, encoder_config.attention_probs_dropout_prob) == (0.25, 0.25)
    assert model.attnpool.encoder.encoder.layer[0].output.dropout.p == 0.25


def test_encoder_dropout_that_cannot_apply_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"encoder_dropout must be in \[0, 1\), got 1.0"):
        build("bert", encoder_dropout=1.0)
    encoder = build("bert").attnpool.encoder
    with pytest.raises(ValueError, match="encoder_dropout needs the encoder as a name, path or config"):
        AttnPoolForSequenceClassification.from_encoder(encoder, encoder_dropout=0.0)
    with pytest.raises(ValueError, match="the PreTrainedConfig config has none of the dropout fields attnpool knows"):
        set_encoder_dropout(transformers.PretrainedConfig(), 0.0)
    flagged = transformers.PretrainedConfig(dropout=True, attention_dropout=0.1)  # a switch is not a probability
    assert set_encoder_dropout(flagged, 0.0) == ["attention_dropout"] and flagged.dropout is True


def test_a_pooler_subclass_keeping_its_parents_name_is_refused():
    class ScaledAttention(AttentionPooling):
        def pool(self, hidden_states, mask, **kwargs):
            pooled, weights = super().pool(hidden_states, mask, **kwargs)
            return 3.0 * pooled, weights

    with pytest.raises(ValueError, match=r"^pooling=ScaledAttention\(\.\.\.\) is not the pooler registered as "
                       r"'attention': a model saves its pooler by name, and it would reload as AttentionPooling, "
                       r"registered under that name, without ScaledAttention's changes\. Give ScaledAttention its own "
                       r"`name` and decorate it with @attnpool.register_pooler, so that it saves and reloads$"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=ScaledAttention(32))

    class Unnamed(Pooler):
        def pool(self, hidden_states, mask):
            return hidden_states.mean(1), None

    with pytest.raises(ValueError, match=r"^pooling=Unnamed\(\.\.\.\) is not the pooler registered as '': .*a class "
                       r"not in the registry cannot be rebuilt when the model is loaded\. Give Unnamed its own `name`"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=Unnamed(32))


def test_a_pooler_subclass_keeping_its_parents_name_is_refused_inside_a_combination():
    """Alone it was refused; as a part of combined or weighted_layer it reloaded silently as AttentionPooling."""
    class ScaledAttention(AttentionPooling):
        def pool(self, hidden_states, mask, **kwargs):
            pooled, weights = super().pool(hidden_states, mask, **kwargs)
            return 3.0 * pooled, weights

    combined = registry.build_pooler({"type": "combined", "poolers": [ScaledAttention(32), "mean"]}, 32)
    with pytest.raises(ValueError, match=r"^pooling=CombinedPooling\(\.\.\.\) holds parts\.0=ScaledAttention"
                       r"\(\.\.\.\), which is not the pooler registered as 'attention': a model saves its pooler "
                       r"by name, and it would reload as AttentionPooling"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=combined)

    class Unnamed(Pooler):
        name = "test_model_unregistered_part"

        def pool(self, hidden_states, mask):
            return hidden_states.mean(1), None

    layered = registry.build_pooler({"type": "weighted_layer", "num_layers": 2, "pooler": Unnamed(32)}, 32)
    with pytest.raises(ValueError, match=r"^pooling=WeightedLayerPooling\(\.\.\.\) holds token_pooler="
                       r"Unnamed\(\.\.\.\), which is not the pooler registered as 'test_model_unregistered_part': "
                       r".*a class not in the registry cannot be rebuilt .* decorate it with "
                       r"@attnpool.register_pooler"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=layered)


def test_a_registered_pooler_subclass_is_kept(tmp_path):
    class ScaledAttention(AttentionPooling):
        name = "test_model_scaled_attention"

        def pool(self, hidden_states, mask, **kwargs):
            pooled, weights = super().pool(hidden_states, mask, **kwargs)
            return 3.0 * pooled, weights

    register_pooler(ScaledAttention)
    try:
        torch.manual_seed(0)
        pooler = ScaledAttention(32, attn_size=8)
        model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooler).eval()
        assert type(model.attnpool.pooler) is type(pooler)
        hidden, mask = torch.randn(2, 5, 32), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
        torch.testing.assert_close(model.attnpool.pooler(hidden, mask), pooler(hidden, mask), rtol=0, atol=0)
        model.save_pretrained(tmp_path)
        assert type(AttnPoolForSequenceClassification.from_pretrained(tmp_path).attnpool.pooler) is ScaledAttention
    finally:
        registry._REGISTRY.pop(registry._normalize(ScaledAttention.name))
