"""A misspelled model option is refused with the closest name, not kept as a stray attribute and saved."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from attnpool import AttnPoolConfig, AttnPoolForSequenceClassification
from model_helpers import save_tiny_encoder, tiny_config


@pytest.mark.parametrize(("given", "meant"), [
    ("num_label", "num_labels"), ("head_droput", "head_dropout"), ("pooling_option", "pooling_options"),
    ("poolng_layers", "pooling_layers"),
])
def test_from_encoder_refuses_a_misspelled_option_with_the_name_meant(given, meant, tmp_path):
    with pytest.raises(TypeError, match=f"from_encoder got an unknown option '{given}'; did you mean '{meant}'\\?"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), **{given: 3})
    assert not any(tmp_path.iterdir())


def test_attnpool_config_refuses_a_misspelled_option_and_takes_pretrained_config_s():
    with pytest.raises(TypeError, match="AttnPoolConfig got an unknown option 'poolng'; did you mean 'pooling'\\?"):
        AttnPoolConfig(poolng={"type": "mean"})
    with pytest.raises(TypeError, match="unknown option 'zzz_qqq'"):
        AttnPoolConfig(zzz_qqq=1)
    config = AttnPoolConfig(tiny_config("bert"), num_labels=3, id2label={0: "a", 1: "b", 2: "c"}, torch_dtype="float32",
                            problem_type="single_label_classification", pad_token_id=0, tie_word_embeddings=False,
                            output_attentions=False, attn_implementation="eager", name_or_path="x")
    assert config.num_labels == 3 and config.problem_type == "single_label_classification"
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2,
                                                           label2id={"a": 0, "b": 1}, id2label={0: "a", 1: "b"})
    assert model.config.num_labels == 2


def test_a_saved_config_with_keys_this_version_does_not_know_still_loads(tmp_path):
    """A config.json of an older or newer attnpool, or one transformers wrote, keeps loading: only new configs
    are checked."""
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), head_dropout=0.2).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "transformers_version" in saved
    saved.update({"pooling_option": {"attn_size": 8}, "an_old_attnpool_key": 1, "auto_map": {},
                  "architectures": ["AttnPoolForSequenceClassification"]})
    (tmp_path / "config.json").write_text(json.dumps(saved))
    model = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert model.config.head_dropout == 0.2 and model.config.an_old_attnpool_key == 1
    assert AutoConfig.from_pretrained(tmp_path).an_old_attnpool_key == 1
    assert type(AutoModelForSequenceClassification.from_pretrained(tmp_path)).__name__ == type(model).__name__
    again = AttnPoolConfig.from_dict(model.config.to_dict())
    assert again.head_dropout == 0.2


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
@pytest.mark.parametrize("source", ["config", "folder"])
def test_from_encoder_loads_the_encoder_in_the_dtype_given(key, source, tmp_path):
    """``dtype=torch.bfloat16`` was kept in the config, never used: the model was float32."""
    encoder = tiny_config("bert") if source == "config" else save_tiny_encoder(tmp_path / "encoder")
    model = AttnPoolForSequenceClassification.from_encoder(encoder, **{key: torch.bfloat16})
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model.save_pretrained(tmp_path / "m")
    reloaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "m")
    assert {p.dtype for p in reloaded.parameters()} == {torch.bfloat16}


def test_from_encoder_refuses_a_dtype_it_cannot_give():
    built = AutoModel.from_config(tiny_config("bert"))
    with pytest.raises(ValueError, match="dtype=torch.bfloat16 cannot change the dtype of the built BertModel given "
                                         "\\(it is torch.float32\\): cast it first"):
        AttnPoolForSequenceClassification.from_encoder(built, dtype=torch.bfloat16)
    assert AttnPoolForSequenceClassification.from_encoder(built, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(TypeError, match="from_encoder got two dtypes: encoder_kwargs\\['dtype'\\]=torch.float16, "
                                        "dtype=torch.bfloat16; give one"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), dtype=torch.bfloat16,
                                                       encoder_kwargs={"dtype": torch.float16})


def test_from_encoder_reads_dtype_names_and_auto():
    """dtype="auto" on a config raised "module 'torch' has no attribute 'auto'" (from_config takes no "auto")."""
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), dtype="auto")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), dtype="torch.bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    built = AutoModel.from_config(tiny_config("bert"))
    assert AttnPoolForSequenceClassification.from_encoder(built, dtype="torch.float32").dtype == torch.float32
    with pytest.raises(ValueError, match=r"dtype='bf16' is not a torch dtype; give e\.g\. torch\.bfloat16"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), dtype="bf16")
