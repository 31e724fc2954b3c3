"""An attnpool pooler as a sentence-transformers module: ``Transformer -> AttnPooling`` in a SentenceTransformer.

Needs the optional extra: ``pip install 'attnpool[sentence-transformers]'``.

Example:
    >>> from sentence_transformers import SentenceTransformer
    >>> from sentence_transformers.sentence_transformer.modules import Transformer
    >>> from attnpool.integrations.sentence_transformers import AttnPooling
    >>> transformer = Transformer("sentence-transformers/all-MiniLM-L6-v2")
    >>> pooling = AttnPooling("attention", transformer.get_embedding_dimension(), attn_size=128)
    >>> model = SentenceTransformer(modules=[transformer, pooling])
    >>> model.save("my-model")   # the pooler's config and safetensors weights are saved with it
    >>> SentenceTransformer("my-model", trust_remote_code=True)  # and restored

sentence-transformers >= 6 imports a module class from outside its own package (here the installed attnpool)
only with ``trust_remote_code=True``. With that flag it also runs Python files shipped *inside* a model folder
or hub repository, so pass it only for models you trust, such as those you saved yourself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

try:
    from sentence_transformers.base.modules.module import Module  # sentence-transformers >= 6
except ImportError:  # pragma: no cover - depends on the installed version
    try:
        from sentence_transformers.models import Module  # sentence-transformers 5.x
    except ImportError as err:
        raise ImportError(
            "attnpool.integrations.sentence_transformers needs sentence-transformers >= 5: "
            "pip install 'attnpool[sentence-transformers]'"
        ) from err
from safetensors.torch import load_model, save_model
from torch import Tensor

try:  # where sentence-transformers packs a batch into one row (flash attention), it also ships the way back
    from sentence_transformers.util import repad_flattened_features
except ImportError:  # pragma: no cover - earlier versions never pack, so never call it
    repad_flattened_features = None

from attnpool.options import parse_options
from attnpool.pooling import Pooler, build_pooler, get_pooler_class
from attnpool.pooling.registry import UnknownPoolerError, check_rebuildable


class AttnPooling(Module):
    """Any attnpool pooler as the pooling step of a ``SentenceTransformer``.

    Reads ``features["token_embeddings"]`` and ``features["attention_mask"]``, writes
    ``features["sentence_embedding"]`` and, for poolers with token weights, ``features["token_weights"]``.

    Args:
        pooling: A registered pooler name, a pooler config dict (``get_config()``) or a pooler instance (of the
            class registered under its ``name``: the module saves the pooler by name and rebuilds it from that).
        embedding_dimension: The transformer's hidden size (``transformer.get_embedding_dimension()``);
            optional when ``pooling`` is a config dict or instance that carries it.
        **options: Pooler options, e.g. ``attn_size=128``.
    """

    config_keys = ["pooling"]
    config_file_name = "attnpool_config.json"

    def __init__(self, pooling: str | dict[str, Any] | Pooler = "attention", embedding_dimension: int | None = None,
                 **options: Any) -> None:
        super().__init__()
        _check_arguments(pooling, embedding_dimension, options)
        if isinstance(pooling, Pooler):  # saved by name: a subclass keeping its parent's name reloaded as the parent
            check_rebuildable(pooling, "AttnPooling: pooling")
        elif embedding_dimension is None and not (isinstance(pooling, Mapping) and pooling.get("hidden_size")):
            raise ValueError(f"AttnPooling(pooling={pooling!r}) needs embedding_dimension, the transformer's hidden "
                             f"size: AttnPooling({pooling!r}, transformer.get_embedding_dimension()), or a pooler "
                             "config dict that holds hidden_size")
        try:
            self.pooler = build_pooler(pooling, embedding_dimension, **options)
        except UnknownPoolerError as err:  # "attention:attn_size=8": options are keyword arguments here
            if not (isinstance(pooling, str) and ":" in pooling):
                raise
            name, _, given = pooling.partition(":")
            get_pooler_class(name)  # a misspelt name: its own error, with the closest names
            try:  # the options as Python: AttnPooling('attention', 32, init='uniform'), not init=uniform
                shown = ", ".join(f"{k}={v!r}" for k, v in parse_options(
                    given.split(","), repr(pooling), once=True).items())
            except ValueError:  # JSON with commas, or not key=value: as given
                shown = given
            raise UnknownPoolerError(
                f"{err}. AttnPooling takes the pooler's name alone and its options as keyword arguments: "
                f"AttnPooling({name!r}, embedding_dimension{', ' + shown if shown else ''})") from None
        if self.pooler.needs_all_layers or self.pooler.needs_attentions:  # forward gets the last layer's tokens only
            raise ValueError(f"AttnPooling: pooler {self.pooler.name!r} reads several layers or the encoder's "
                             "attention maps, which a sentence-transformers pipeline does not hand to its pooling "
                             "module; use it in attnpool's own model (AttnPoolForSequenceClassification), or a "
                             "pooler of the last layer's tokens here")
        if self.pooler.has_auxiliary_loss:  # a sentence-transformers loss would train without it, silently
            raise ValueError(f"AttnPooling: pooler {self.pooler.name!r} has a training regulariser (e.g. "
                             "multihead_attention's penalty) that sentence-transformers losses do not add; set it to "
                             "0 here, or train the pooler in attnpool's own model, which adds it to the loss")

    @property
    def pooling(self) -> dict[str, Any]:
        """The pooler's config, saved in ``attnpool_config.json``."""
        return self.pooler.get_config()

    def forward(self, features: dict[str, Tensor | Any], **kwargs: Any) -> dict[str, Tensor | Any]:
        """Pool the token embeddings into ``features["sentence_embedding"]``.

        A batch that sentence-transformers packed into one row (a flash-attention encoder: every text's tokens side
        by side, ``cu_seq_lens_q`` marking where each starts, no attention mask) is padded back to one row per text
        first, as sentence-transformers' own ``Pooling`` does: pooled as it came, it gave one embedding per batch.
        """
        if "cu_seq_lens_q" in features:
            features = repad_flattened_features(features)
        pooled, weights = self.pooler(features["token_embeddings"], features.get("attention_mask"), return_weights=True)
        features["sentence_embedding"] = pooled
        if weights is not None:
            features["token_weights"] = weights
        return features

    def get_embedding_dimension(self) -> int:
        """Size of the sentence embedding (the pooler's ``output_dim``)."""
        return self.pooler.output_dim

    get_sentence_embedding_dimension = get_embedding_dimension  # the name before sentence-transformers 6

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        """Write the pooler config and its weights (``model.safetensors``) into ``output_path``."""
        self.save_config(output_path)
        save_model(self, os.path.join(output_path, "model.safetensors"))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> AttnPooling:
        """Rebuild from ``attnpool_config.json`` and load ``model.safetensors`` (never a pickle)."""
        hub = {k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs}
        where = os.path.join(model_name_or_path, subfolder)
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        if "pooling" not in config:
            raise FileNotFoundError(f"no {cls.config_file_name} with a 'pooling' entry in {where}")
        module = cls(config["pooling"])
        weights = cls.load_file_path(model_name_or_path, "model.safetensors", subfolder=subfolder, **hub)
        if weights is None:
            raise FileNotFoundError(f"no model.safetensors for the attnpool pooler in {where}")
        load_model(module, weights)
        return module


def _check_arguments(pooling: str | Mapping[str, Any] | Pooler, embedding_dimension: int | None,
                     options: dict[str, Any]) -> None:
    """Refuse what ``build_pooler`` would, in :class:`AttnPooling`'s terms (``embedding_dimension``, keyword options).

    Raises:
        ValueError: Keyword options with a built pooler, or an ``embedding_dimension`` other than the hidden size
            of the pooler config or instance given.
    """
    if isinstance(pooling, Pooler) and options:
        raise ValueError(f"AttnPooling got keyword options {sorted(options)} with a built {type(pooling).__name__}, "
                         "whose options are already set: build the pooler with them, or pass its name "
                         f"({pooling.name!r}) with the options instead")
    if isinstance(pooling, Pooler):
        given = pooling.hidden_size
    elif isinstance(pooling, Mapping):
        given = pooling.get("hidden_size")
    else:
        return
    if given is not None and embedding_dimension is not None and given != embedding_dimension:
        what = f"a pooler ({type(pooling).__name__}) built" if isinstance(pooling, Pooler) else "a pooler config"
        raise ValueError(f"AttnPooling got {what} for hidden_size={given} and embedding_dimension="
                         f"{embedding_dimension}: they must agree (the transformer's hidden size, "
                         "transformer.get_embedding_dimension()); leave embedding_dimension out to use the pooler's")
