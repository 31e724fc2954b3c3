"""``AttnPoolConfig``: a Hugging Face config holding the encoder's config, the pooler spec and the task head."""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import os
from collections.abc import Iterable
from typing import Any

import torch
from transformers import AutoConfig, GenerationConfig, PretrainedConfig, PreTrainedModel

from attnpool.model.labels import normalise_labels
from attnpool.model.recurrent import RECURRENT_CELLS
from attnpool.tasks import LOSSES

OUTPUT_ACTIVATIONS = (None, "sigmoid")
logger = logging.getLogger("attnpool.model")
# What ``PretrainedConfig`` takes as keyword options besides its fields (its ``__post_init__`` and older versions).
HF_CONFIG_OPTIONS = (
    "num_labels", "torch_dtype", "name_or_path", "output_attentions", "attn_implementation", "experts_implementation",
    "per_layer_config", "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
    "decoder_start_token_id", "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "torchscript",
    "is_decoder", "add_cross_attention", "tie_encoder_decoder", "cross_attention_hidden_size", "pruned_heads",
    "auto_map", "custom_pipelines", "use_cache", "vocab_size",
)


@functools.cache
def config_option_names() -> frozenset[str]:
    """The keyword options a new :class:`AttnPoolConfig` takes: its own and ``PretrainedConfig``'s."""
    names = set(inspect.signature(AttnPoolConfig.__init__).parameters) - {"self", "kwargs"}
    names |= set(inspect.signature(PretrainedConfig.__init__).parameters) - {"self", "args", "kwargs"}
    base = PretrainedConfig()
    names |= {name for name in {*base.to_dict(), *vars(base)} if not name.startswith("_")}
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)  # accepted (and dropped) in a config
    names |= set(defaults() if defaults else GenerationConfig().to_dict())
    return frozenset(names | set(HF_CONFIG_OPTIONS))


def check_option_names(given: Iterable[str], where: str, also: Iterable[str] = ()) -> None:
    """Refuse an option name that is neither :class:`AttnPoolConfig`'s nor ``PretrainedConfig``'s (or in ``also``).

    ``PretrainedConfig`` keeps any unknown keyword as an attribute: ``num_label=3`` or ``head_droput=0.5`` was
    ignored and saved in ``config.json``, and the model trained with the defaults.

    Raises:
        TypeError: An unknown name, with the closest known one.
    """
    known = config_option_names() | set(also)
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{where} got an unknown option {name!r}{hint} (the options are AttnPoolConfig's and "
                            "PretrainedConfig's)")


def encoder_load_options(config_kwargs: dict[str, Any], encoder_kwargs: dict[str, Any] | None,
                         encoder: object) -> dict[str, Any]:
    """``from_encoder``'s ``encoder_kwargs`` with its ``dtype=`` (or ``torch_dtype=``), taken out of ``config_kwargs``.

    The encoder is loaded (or built from its config) in that dtype, and the pooler and head follow it
    (:func:`~attnpool.model.encoders.match_encoder`); given to the config instead, it was saved there and never used:
    the model was float32.

    Raises:
        TypeError: Two different dtypes given (``dtype``, ``torch_dtype``, ``encoder_kwargs["dtype"]``).
        ValueError: A dtype other than a built encoder's own (cast that encoder first).
    """
    encoder_kwargs = dict(encoder_kwargs or {})
    given = {f"encoder_kwargs[{key!r}]": encoder_kwargs.pop(key) for key in ("dtype", "torch_dtype")
             if key in encoder_kwargs}
    given |= {key: config_kwargs.pop(key) for key in ("dtype", "torch_dtype") if key in config_kwargs}
    given = {key: value for key, value in given.items() if value is not None}
    if len({str(value).removeprefix("torch.") for value in given.values()}) > 1:
        raise TypeError(f"from_encoder got two dtypes: {', '.join(f'{k}={v}' for k, v in given.items())}; give one, "
                        "as dtype=")
    if not given:
        return encoder_kwargs
    dtype = written = next(iter(given.values()))
    if isinstance(dtype, str):  # "bfloat16", "torch.bfloat16" or "auto" (the checkpoint's own)
        name = dtype.removeprefix("torch.")
        dtype = name if name == "auto" else getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype | str):
            raise ValueError(f"from_encoder: dtype={written!r} is not a torch dtype; give e.g. torch.bfloat16, "
                             "'bfloat16' or 'auto'")
    if isinstance(encoder, PreTrainedModel):
        if dtype != "auto" and dtype != encoder.dtype:
            raise ValueError(f"from_encoder: dtype={written} cannot change the dtype of the built "
                             f"{type(encoder).__name__} given (it is {encoder.dtype}): cast it first "
                             f"(encoder.to({dtype})), or give the encoder's name, folder or config")
        return encoder_kwargs
    if dtype == "auto" and isinstance(encoder, PretrainedConfig):  # a random encoder has no checkpoint dtype
        return encoder_kwargs
    return {**encoder_kwargs, "dtype": dtype}


def encoder_hidden_size(config: PretrainedConfig) -> int:
    """The width of an encoder's token vectors, whatever its config calls it."""
    for key in ("hidden_size", "d_model", "n_embd", "dim"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ValueError(
        f"cannot find the hidden size of encoder config {type(config).__name__}: it has none of "
        "hidden_size, d_model, n_embd, dim"
    )


def loss_mismatch(problem_type: str, loss: str, output_activation: str | None) -> str | None:
    """Why ``loss`` does not train ``problem_type`` (with ``output_activation``), for the config and the loss."""
    if loss == "pearson" and problem_type != "regression":
        return (f"loss='pearson' needs problem_type='regression' (task regression), not {problem_type!r}: use "
                "cross_entropy or bce for classification")
    if problem_type == "single_label_classification" and loss != "cross_entropy":
        return (f"loss={loss!r} does not train single-label classification (integer class labels), which takes "
                "cross_entropy: leave loss None (or 'cross_entropy'); for one-hot or multi-hot targets with bce or "
                "mse use problem_type='multi_label_classification'")
    if loss == "cross_entropy" and problem_type != "single_label_classification":
        return (f"loss='cross_entropy' needs problem_type='single_label_classification', not {problem_type!r}: "
                "leave loss None (the problem type's default) or pick mse, pearson (regression) or bce")
    if loss == "bce" and problem_type == "regression" and output_activation != "sigmoid":
        return ("loss='bce' on a regression head needs output_activation='sigmoid': without it the logits are "
                "fitted to logit(label) and read as the prediction; or use mse or pearson")
    return None


def check_not_attnpool(config: PretrainedConfig, given: str) -> None:
    """Refuse an attnpool model (its folder, name, config or instance) given to ``from_encoder`` as the encoder.

    ``AutoModel`` builds an ``AttnPoolModel`` from such a folder: it became the encoder of a second attnpool model
    (its pooler nested, its head dropped), which trained and saved but did not load back.
    """
    if getattr(config, "model_type", None) != AttnPoolConfig.model_type:
        return
    folder = getattr(config, "_name_or_path", "") or "FOLDER"
    raise ValueError(
        f"from_encoder: {given} is a saved attnpool model (model_type 'attnpool'), not an encoder: it would become "
        "the encoder of a second attnpool model (its pooler nested, its head dropped) that does not load back. To "
        f"give it a new head (another num_labels), load it: AttnPoolForSequenceClassification.from_pretrained("
        f"{folder!r}, num_labels=N, ignore_mismatched_sizes=True) keeps its encoder and pooler; to put a new pooler "
        "and head on its encoder, pass that encoder: from_encoder(model.attnpool.encoder, ...) of the loaded model "
        "(model.encoder of an AttnPoolModel)"
    )


class AttnPoolConfig(PretrainedConfig):
    r"""Configuration of an attnpool model: encoder + pooler + task head, saved as one ``config.json``.

    Args:
        encoder: The encoder's config: a ``PretrainedConfig``, its ``to_dict()`` (with ``model_type``), or a hub
            name / local path whose config is loaded.
        pooling: The pooler spec, as :meth:`attnpool.Pooler.get_config` gives it or just ``{"type": name}``
            plus options. ``hidden_size`` is filled in from the encoder. Default: ``{"type": "attention"}``.
        pooling_layers: Which encoder layers feed the pooler: ``"last"`` (default), ``"all"`` or a list of
            indices into ``hidden_states`` (0 is the embedding output, -1 the last layer). A token pooler given
            several layers pools their average; a multi-layer pooler (``needs_all_layers``) receives them stacked,
            and for it ``"last"`` means the top ``num_layers`` layers (its own option).
        head_dropout: Dropout on the pooled vector before the head.
        multi_sample_dropout: Number of dropout samples averaged in training (1 = plain dropout).
        head_hidden_size: Width of an optional hidden layer (Linear -> GELU) in the head; ``None`` for a linear head.
        output_activation: ``"sigmoid"`` for a regression target known to lie in [0, 1] (logits are then the
            sigmoid of the head's output, and the loss defaults to BCE as in the public PPPM recipe); ``None``.
        loss: ``"mse"``, ``"bce"``, ``"cross_entropy"`` or ``"pearson"`` (``1 - r`` of the batch, regression only:
            :func:`~attnpool.model.losses.pearson_loss`); ``None`` picks it from ``problem_type``. One that does not
            train the ``problem_type`` given is refused (:func:`loss_mismatch`; a saved single-label classifier with
            another loss loads with ``None``: earlier versions trained it with cross_entropy).
        position_ids_from_mask: Give the encoder ``position_ids = cumsum(attention_mask) - 1``, which makes
            decoder-only encoders correct under left padding. ``None`` (default) turns it on exactly for
            decoder-only architectures.
        recurrent: ``"lstm"`` or ``"gru"``: a bidirectional recurrent layer between the encoder and the pooler,
            ``ceil(H / 2)`` units per direction (:class:`~attnpool.model.recurrent.RecurrentLayer`; the PPPM
            1st-place solution's "BiLSTM before an attention pooler"). It reads what a token pooler would
            (``pooling_layers`` averaged); a multi-layer pooler is refused. ``None`` (default): none.
        recurrent_layers: Stacked layers of ``recurrent`` (only with ``recurrent``).
        pool_segments: Pool only the tokens of each input's first ``pool_segments`` segments, a segment ending at
            (and holding) a ``segment_token_id`` token: the tokens after them are read by the encoder, so every
            token attends to them, but get no pooling weight. The recipe sets it with ``--group-context-pooling
            own``, so that the row's own text is pooled and the context appended after it is not. ``None``
            (default): every token.
        segment_token_id: The token that ends a segment (the tokenizer's separator); with ``pool_segments``.
        **kwargs: ``num_labels``, ``problem_type``, ``id2label``, ``label2id`` and the other
            ``PretrainedConfig`` options, in Hugging Face's own terms.
    """

    model_type = "attnpool"
    sub_configs = {"encoder": AutoConfig}

    def __init__(
        self,
        encoder: PretrainedConfig | dict[str, Any] | str | None = None,
        pooling: dict[str, Any] | str | None = None,
        pooling_layers: str | list[int] = "last",
        head_dropout: float = 0.1,
        multi_sample_dropout: int = 1,
        head_hidden_size: int | None = None,
        output_activation: str | None = None,
        loss: str | None = None,
        position_ids_from_mask: bool | None = None,
        recurrent: str | None = None,
        recurrent_layers: int = 1,
        pool_segments: int | None = None,
        segment_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        if "transformers_version" not in kwargs:  # a new config; a config.json read back keeps what it holds
            check_option_names(kwargs, "AttnPoolConfig")
        if isinstance(encoder, dict):
            encoder = dict(encoder)
            if "model_type" not in encoder:
                raise ValueError("AttnPoolConfig: an encoder config dict needs its 'model_type' (e.g. 'bert')")
            encoder = AutoConfig.for_model(encoder.pop("model_type"), **encoder)
        elif isinstance(encoder, str):
            encoder = AutoConfig.from_pretrained(encoder)
        self.encoder = encoder
        if isinstance(pooling, str):
            pooling = {"type": pooling}
        self.pooling = dict(pooling) if pooling is not None else {"type": "attention"}
        if isinstance(pooling_layers, str) and pooling_layers not in ("last", "all"):
            raise ValueError(f"pooling_layers must be 'last', 'all' or a list of layer indices, got {pooling_layers!r}")
        self.pooling_layers = pooling_layers if isinstance(pooling_layers, str) else [int(i) for i in pooling_layers]
        if not self.pooling_layers:
            raise ValueError("pooling_layers is empty: give 'last', 'all' or at least one index into hidden_states")
        if not 0.0 <= head_dropout < 1.0:
            raise ValueError(f"head_dropout must be in [0, 1), got {head_dropout}")
        self.head_dropout = float(head_dropout)
        if int(multi_sample_dropout) < 1:
            raise ValueError(f"multi_sample_dropout must be >= 1, got {multi_sample_dropout}")
        self.multi_sample_dropout = int(multi_sample_dropout)
        self.head_hidden_size = head_hidden_size
        if output_activation not in OUTPUT_ACTIVATIONS:
            raise ValueError(f"output_activation must be one of {OUTPUT_ACTIVATIONS}, got {output_activation!r}")
        self.output_activation = output_activation
        if loss is not None and loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES} or None, got {loss!r}")
        self.loss = loss
        self.position_ids_from_mask = position_ids_from_mask
        if recurrent is not None and recurrent not in RECURRENT_CELLS:
            raise ValueError(f"recurrent must be one of {', '.join(RECURRENT_CELLS)} or None, got {recurrent!r}")
        if isinstance(recurrent_layers, bool) or not isinstance(recurrent_layers, int) or recurrent_layers < 1:
            raise ValueError(f"recurrent_layers must be an integer >= 1, got {recurrent_layers!r}")
        if recurrent is None and recurrent_layers != 1:
            raise ValueError(f"recurrent_layers={recurrent_layers} needs a recurrent layer: set recurrent to "
                             f"{' or '.join(map(repr, RECURRENT_CELLS))}, or leave recurrent_layers at 1")
        self.recurrent = recurrent
        self.recurrent_layers = recurrent_layers
        if pool_segments is not None and (isinstance(pool_segments, bool) or not isinstance(pool_segments, int)
                                          or pool_segments < 1 or not isinstance(segment_token_id, int)):
            raise ValueError(f"pool_segments must be an integer >= 1 and comes with segment_token_id (the token id "
                             f"that ends a segment), got pool_segments={pool_segments!r}, "
                             f"segment_token_id={segment_token_id!r}")
        self.pool_segments = pool_segments
        self.segment_token_id = segment_token_id if pool_segments is not None else None
        # transformers sets the attention implementation recursively on sub-configs: keep the encoder's own
        # (the config object may be shared with a live encoder) unless one is asked for.
        if isinstance(encoder, PretrainedConfig) and getattr(encoder, "_attn_implementation", None) is not None:
            kwargs.setdefault("attn_implementation", encoder._attn_implementation)
        saved = "transformers_version" in kwargs  # a config.json read back (to_dict writes it), not a new config
        if encoder is None:  # else the encoder's, by the property: attnpool before 2026-12-06 saved a resize here
            kwargs.pop("vocab_size", None)
        super().__init__(**kwargs)
        if self.problem_type == "single_label_classification" and self.loss not in (None, "cross_entropy"):
            if not saved:
                raise ValueError(f"loss {self.loss!r} does not train problem_type 'single_label_classification', "
                                 "which takes cross_entropy: leave loss None (or 'cross_entropy'); for one-hot or "
                                 "multi-hot targets with bce or mse use problem_type='multi_label_classification'")
            # Earlier versions accepted this loss and trained cross_entropy: load the model as it was trained.
            logger.warning("AttnPoolConfig: loss %r was ignored by this single-label classification model (it "
                           "trained cross_entropy); loading it with loss None", self.loss)
            self.loss = None
        if not saved and self.problem_type is not None and self.loss is not None:  # else checked at the first labels
            why = loss_mismatch(self.problem_type, self.loss, output_activation)
            if why:
                raise ValueError(f"AttnPoolConfig: {why}")
        classes = self.problem_type is None and self.num_labels > 1  # becomes classification at the first labels
        if output_activation is not None and (self.problem_type not in (None, "regression") or classes):
            raise ValueError(f"output_activation {output_activation!r} is for regression targets in [0, 1], got "
                             f"problem_type {self.problem_type!r}"
                             + (f" with num_labels={self.num_labels} (classification at the first labels; pass "
                                "problem_type='regression' for several regression targets)" if classes else "")
                             + ", whose scores are already probabilities; leave output_activation None")

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: Any, **kwargs: Any) -> tuple[dict[str, Any], dict]:
        """The saved ``config.json``'s contents; a folder of another model (a plain encoder) is refused.

        Raises:
            ValueError: The ``config.json`` is not an attnpool model's (its ``model_type`` is another, e.g. ``bert``):
                ``from_pretrained`` builds no pooler and head around an encoder, ``from_encoder`` does.
        """
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        found = config_dict.get("model_type")
        if found != cls.model_type:
            where = os.fspath(pretrained_model_name_or_path)
            raise ValueError(
                f"{where!r} is not a saved attnpool model (its config.json has model_type {found!r}, not "
                f"{cls.model_type!r}), and from_pretrained loads only what an attnpool model's save_pretrained wrote. "
                f"To build a model around this encoder (its pre-trained weights, a new pooler and head), call "
                f"AttnPoolForSequenceClassification.from_encoder({where!r}, ...) or AttnPoolModel.from_encoder"
            )
        return config_dict, kwargs

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> AttnPoolConfig:
        """The config from its dict and the options given at load (``from_pretrained(folder, **options)``), checked.

        transformers set such options on the built config, unchecked (``loss="mae"`` trained MSE): this config's own
        and ``problem_type`` go through ``__init__``. A head of another size (``num_labels=N``, or ``id2label`` of N
        labels) drops the saved label names and takes the ``problem_type`` given, else a classifier re-headed to one
        output becomes a regression and a saved regression of one output gets ``None`` (the labels decide, as for a
        new model; one saved with several outputs stays a regression). When the problem type changes (a new head's, or
        one given), the old one's ``output_activation`` and ``loss`` go unless given; ``id2label`` brings its label2id.
        The label options are checked and normalised as ``from_encoder``'s (:func:`.labels.normalise_labels`): integer
        ids (``id2label`` read from JSON), ``label2id`` alone names the head.

        Raises:
            ValueError: Label options that disagree or ids that are not 0..N-1; a ``loss`` that does not train the
                ``problem_type``.
        """
        normalise_labels(kwargs, "from_pretrained")  # int ids, label2id alone naming the head, as from_encoder does
        own = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs", "encoder"} | {"problem_type"}
        config_dict, given = dict(config_dict), {key: kwargs.pop(key) for key in own if key in kwargs}
        id2label = kwargs.get("id2label")
        wanted = len(id2label) if id2label else kwargs.get("num_labels")
        saved = len(config_dict["id2label"]) if config_dict.get("id2label") else config_dict.get("num_labels")
        old = new = config_dict.get("problem_type")
        names = dict(id2label) if id2label else None
        if isinstance(wanted, int) and isinstance(saved, int) and wanted != saved:  # a new head
            config_dict["id2label"], config_dict["label2id"] = names, kwargs.get("label2id")
            new = "regression" if wanted == 1 else None if saved == 1 and old == "regression" else old
        if names and not kwargs.get("label2id"):  # the names given, of a new head or the same: their own label2id
            config_dict["label2id"] = kwargs["label2id"] = {value: key for key, value in names.items()}
        if (new := given.get("problem_type", new)) != old:
            config_dict["problem_type"] = new
            config_dict.update(dict.fromkeys({"output_activation", "loss"} - given.keys()))
        config_dict.update(given)
        loss, problem = config_dict.get("loss"), config_dict.get("problem_type")
        if given.keys() & {"loss", "problem_type", "output_activation"} and problem and loss in LOSSES:
            why = loss_mismatch(problem, loss, config_dict.get("output_activation"))  # a saved config is not checked
            if why:
                raise ValueError(f"from_pretrained: {why}")
        return super().from_dict(config_dict, **kwargs)

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> PretrainedConfig:
        """The encoder's text config: what transformers' helpers read and write for the text model.

        ``resize_token_embeddings`` sets its ``vocab_size`` there, the size ``from_pretrained`` rebuilds the encoder
        with (set on this outer config, a resized model saved and then failed to load).
        """
        if self.encoder is None:
            return super().get_text_config(decoder=decoder, encoder=encoder)
        return self.encoder.get_text_config(decoder=decoder, encoder=encoder)

    @property
    def hidden_size(self) -> int:
        """The encoder's hidden size (what the pooler receives)."""
        if self.encoder is None:
            raise ValueError("AttnPoolConfig has no encoder config; pass encoder=... (a config, dict or name)")
        return encoder_hidden_size(self.encoder)

    @property
    def vocab_size(self) -> int | None:
        """The encoder's vocabulary size (``None`` without an encoder): what peft compares to find a resized vocabulary.

        Read from and written to the encoder's text config (where ``resize_token_embeddings`` sets it), never
        stored on this config: ``config.json`` holds it once, in the encoder's part.
        """
        return None if self.encoder is None else getattr(self.encoder.get_text_config(), "vocab_size", None)

    @vocab_size.setter
    def vocab_size(self, value: int) -> None:
        if self.encoder is None:
            raise ValueError("AttnPoolConfig has no encoder config to set vocab_size on; pass encoder=... first")
        self.encoder.get_text_config().vocab_size = value
