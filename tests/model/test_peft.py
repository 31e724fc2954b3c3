"""LoRA with peft, as the README's "Fine-tuning with LoRA (peft)" section does it.

``task_type="SEQ_CLS"`` would train and save modules named ``classifier``/``score``: attnpool's head is ``head``, and
the attention pooler's ``score`` layer alone would train. The recipe names them in ``modules_to_save`` instead.
"""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolForSequenceClassification
from model_helpers import batch, tiny_config

peft = pytest.importorskip("peft")


def base_model(folder=None):
    torch.manual_seed(0)
    if folder is not None:
        return AttnPoolForSequenceClassification.from_pretrained(folder)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3,
                                                          pooling_options={"attn_size": 8, "init": "xavier"})


def lora(model):
    config = peft.LoraConfig(task_type=None, r=4, lora_alpha=8, target_modules=["query", "key", "value"],
                             modules_to_save=["head", "attnpool.pooler"])
    return peft.get_peft_model(model, config)


# transformers' own deprecation, of the method peft calls
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_lora_trains_the_head_and_pooler_and_reloads_exactly(tmp_path):
    base = base_model()
    base.save_pretrained(tmp_path / "base")
    model = lora(base)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    head = {n for n in trainable if ".head.modules_to_save.default." in n}
    pooler = {n for n in trainable if ".attnpool.pooler.modules_to_save.default." in n}
    assert {n.rsplit(".", 2)[-2] for n in head} == {"out"} and len(head) == 2  # the head's weight and bias
    assert {n.rsplit(".", 2)[-2] for n in pooler} == {"proj", "score"}
    assert trainable == head | pooler | {n for n in trainable if "lora_" in n}
    encoder = {n for n, _ in model.named_parameters() if ".attnpool.encoder." in n and "lora_" not in n}
    assert encoder and not encoder & trainable  # the encoder's own weights stay frozen
    assert any("lora_" in n and ".attnpool.encoder." in n for n in trainable)

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, mask = batch([5, 3, 7, 4], seed=1)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2, 1])).loss.backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert head | pooler <= changed and changed <= trainable
    assert any("lora_B" in n for n in changed)  # lora_B starts at zero: it moved, so LoRA trains

    model.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(base_model(tmp_path / "base"), tmp_path / "adapter").eval()
    with torch.no_grad():  # both in one grad mode: the encoder's attention kernel may differ between them
        expected = model.eval()(input_ids=ids, attention_mask=mask).logits
        assert torch.equal(reloaded(input_ids=ids, attention_mask=mask).logits, expected)
        assert not torch.equal(base_model(tmp_path / "base").eval()(ids, mask).logits, expected)
    reloaded.merge_and_unload().save_pretrained(tmp_path / "merged")  # one plain attnpool folder
    merged = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "merged").eval()
    with torch.no_grad():  # W + BA merged into one matrix: equal up to rounding
        torch.testing.assert_close(merged(input_ids=ids, attention_mask=mask).logits, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("safe", [True, False])
def test_a_merged_model_saved_into_its_adapters_folder_is_refused_not_given_the_adapter_twice(tmp_path, safe):
    """transformers put the adapter beside config.json on the merged weights again: wrong predictions, no warning.

    With ``adapter_model.bin`` alone transformers failed on a missing adapter_model.safetensors instead.
    """
    model = lora(base_model())
    model.save_pretrained(tmp_path / "lora", safe_serialization=safe)
    assert "library_name: peft" in (tmp_path / "lora" / "README.md").read_text()
    model.merge_and_unload().save_pretrained(tmp_path / "lora")  # the merged model written into the adapter's folder
    card = (tmp_path / "lora" / "README.md").read_text()
    assert "library_name: attnpool" in card and "Model Card for Model ID" not in card  # peft's card is not the user's
    adapter = "adapter_model.safetensors" if safe else "adapter_model.bin"
    with pytest.raises(ValueError, match=f"holds a whole model \\(config.json\\) and a LoRA \\(peft\\) adapter "
                                         f"\\(adapter_config.json, {adapter}\\): .*Move the adapter files out"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path / "lora")
    for name in ("adapter_config.json", adapter):
        (tmp_path / "lora" / name).unlink()
    AttnPoolForSequenceClassification.from_pretrained(tmp_path / "lora")  # the merged model alone loads


def test_without_peft_a_model_folder_beside_an_adapter_is_not_refused(tmp_path, monkeypatch):
    """transformers applies adapter_config.json only with peft installed: without it the folder loads as saved."""
    from attnpool.model import sources

    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds a whole model"):
        sources.check_no_adapter(tmp_path)
    monkeypatch.setattr(sources, "is_peft_available", lambda: False)
    sources.check_no_adapter(tmp_path)
