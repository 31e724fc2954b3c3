"""``AttnPoolPreTrainedModel``: what both attnpool models share.

Loading (safetensors only), saving with the tokenizer, building from an encoder, freezing and re-initialising layers.
"""

from __future__ import annotations

import copy
import inspect
import os
import tempfile
from pathlib import Path
from typing import Any

from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import hub as transformers_hub

from attnpool.model.card import may_rewrite_card, stamp_card, write_model_card
from attnpool.model.card import model_card as config_card
from attnpool.model.configuration import (
    AttnPoolConfig,
    check_not_attnpool,
    check_option_names,
    encoder_hidden_size,
    encoder_load_options,
)
from attnpool.model.encoders import (
    check_encoder_only,
    check_encoder_reachable,
    check_gradient_checkpointing,
    check_reloadable,
    encoder_layers,
    encoder_pooling_defaults,
    freeze_bottom,
    looks_like_local_path,
    match_encoder,
    reinit_top,
    set_encoder_dropout,
)
from attnpool.model.heads import PredictionHead
from attnpool.model.labels import label_options
from attnpool.model.loading import align_cpu_tensors, check_safetensors_only, init_unloaded
from attnpool.model.sources import adapter_advice, check_hub_source, check_no_adapter, hub_error, missing_subfolder
from attnpool.pooling import Pooler, build_pooler
from attnpool.pooling.registry import check_rebuildable

# ``from_pretrained`` options that say where the encoder's files come from: its config is read with them too.
HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "subfolder")
CONFIG_KWARGS = (*HUB_KWARGS, "trust_remote_code", "code_revision", "gguf_file")  # what AutoConfig reads as AutoModel
# ``save_pretrained(push_to_hub=True)`` options that say where and how to upload (transformers' names).
HUB_PUSH_KWARGS = ("repo_id", "commit_message", "commit_description", "create_pr", "private", "revision", "token",
                   "tags")


class AttnPoolPreTrainedModel(PreTrainedModel):
    """Base class: config class, weight initialisation, safetensors-only loading, gradient checkpointing."""

    config_class = AttnPoolConfig
    base_model_prefix = "attnpool"
    supports_gradient_checkpointing = True
    # The loss is a per-batch mean that ignores ``num_items_in_batch``. Without this the Trainer, seeing the forward's
    # ``**kwargs``, would scale the loss by the number of processes and skip the division by the gradient
    # accumulation steps: gradients 2x too large on 2 GPUs.
    accepts_loss_kwargs = False
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # The encoder's own pooler is dropped (modeling._drop_encoder_pooler): checkpoints saved with it load quietly.
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)encoder\.pooler\."]

    def _set_gradient_checkpointing(self, enable: bool = True, *args: Any, **kwargs: Any) -> None:
        # what gradient_checkpointing_enable and activation_checkpointing_enable call: the encoder must support it
        if enable:
            check_gradient_checkpointing(self._base().encoder)
        super()._set_gradient_checkpointing(enable, *args, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        # The encoder initialises itself (it is a PreTrainedModel of its own); ours are pooler and head.
        if isinstance(module, Pooler | PredictionHead) and hasattr(module, "reset_parameters"):
            module.reset_parameters()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any):
        """Load a saved attnpool model; safetensors weights only, never a pickle.

        CPU weights are copied out of the memory-mapped file into memory of their own (see
        :func:`_align_cpu_tensors`), so that the loaded model predicts exactly what the saved one did.

        Raises:
            FileNotFoundError: The folder does not exist, is a file, has no such ``subfolder``, is a peft adapter, or
                holds no ``*.safetensors`` weights.
            ValueError: A peft adapter beside the model (``adapter_config.json``); an option given that a new config
                refuses, or a ``loss`` that does not train the ``problem_type`` (:meth:`AttnPoolConfig.from_dict`).
        """
        if kwargs.get("use_safetensors") is False:
            raise ValueError("attnpool loads weights from safetensors only; use_safetensors=False is not supported")
        path = Path(os.fspath(pretrained_model_name_or_path)).expanduser()
        if path.is_dir():  # a local folder: given on (~ expanded: transformers takes "~/m" for a hub name)
            pretrained_model_name_or_path = path
            if kwargs.get("subfolder") and not (path / kwargs["subfolder"]).is_dir():
                raise missing_subfolder(path, kwargs["subfolder"])
            path = path / (kwargs.get("subfolder") or "")  # where config.json and the weights are
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise FileNotFoundError(f"{path} has no config.json: it is not a saved attnpool model folder"
                                        f"{where_the_model_is(path)}{adapter_advice(path)}")
            check_no_adapter(path)
            if not any(path.glob("*.safetensors")):
                present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
                raise FileNotFoundError(
                    f"{path} holds no model weights (*.safetensors); it contains: {present}. Save the model with "
                    "model.save_pretrained(folder) (safetensors), or point to the folder that has them"
                )
        elif not os.path.exists(path) and looks_like_local_path(str(pretrained_model_name_or_path)):
            raise FileNotFoundError(f"model folder {str(pretrained_model_name_or_path)!r} does not exist (resolved "
                                    f"to {path.absolute()})")
        else:  # a hub name: one quick lookup, so that one that cannot be reached fails once, clearly
            check_hub_source(os.fspath(pretrained_model_name_or_path), kwargs, what="model", default_hint=False)
        kwargs["use_safetensors"] = True
        check_safetensors_only(pretrained_model_name_or_path, kwargs)  # use_safetensors alone still unpickles
        wants_info = kwargs.pop("output_loading_info", False)
        try:
            model, info = super().from_pretrained(pretrained_model_name_or_path, *args, output_loading_info=True,
                                                  **kwargs)
        except OSError as err:
            error = hub_error(os.fspath(pretrained_model_name_or_path), err, what="model", default_hint=False)
            if error is None:
                raise
            raise error from err
        init_unloaded(model, set(info["missing_keys"]) | {key for key, *_ in info["mismatched_keys"]})
        align_cpu_tensors(model)
        return (model, info) if wants_info else model

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, tokenizer: Any = None,
                        model_card: str | None = None, push_to_hub: bool = False, **kwargs: Any):
        """Save config, weights (``model.safetensors``), a model card and, when given, the tokenizer into one folder.

        Args:
            save_directory: The folder (created when missing).
            tokenizer: Saved beside the model, so that the folder alone loads with the Auto classes and pipelines.
            model_card: The ``README.md`` to write. By default a card built from the config (encoder, pooler,
                head, task, how to load it; see :mod:`attnpool.model.card`) is written, unless the folder already
                has a ``README.md`` of its own, which is kept: only the card an earlier save generated, unedited,
                and peft's generic card are rewritten (:func:`~attnpool.model.card.may_rewrite_card`).
            push_to_hub: Upload the files this save wrote (weights, tokenizer, card) to the Hub once all are written,
                to ``repo_id`` (default: the folder's name), with transformers' options ``commit_message``,
                ``commit_description``, ``create_pr``, ``private``, ``revision`` and ``token``; ``tags`` are added to
                the card's (with :attr:`model_tags`).
            *args: Of ``PreTrainedModel.save_pretrained``.
            **kwargs: Of ``PreTrainedModel.save_pretrained`` (``is_main_process=False``, or a process other than the
                one that saves under torch.distributed: no tokenizer, no card, no upload either).

        Returns:
            The Hub's commit info when pushed, else ``None``.
        """
        folder = Path(os.fspath(save_directory))
        main = kwargs.get("is_main_process", True)
        hub = {key: kwargs.pop(key) for key in HUB_PUSH_KWARGS if key in kwargs} if push_to_hub else {}
        extra_tags = hub.pop("tags", None)
        extra_tags = [extra_tags] if isinstance(extra_tags, str) else list(extra_tags or [])
        save_here = self.should_save_on_this_rank(main)  # one process writes tokenizer and card (as the weights)
        upload = push_to_hub and save_here
        if upload:
            # Pushed here, not by transformers: it uploads before the tokenizer and the card are written, and
            # replaces the card with its generic one. The repository first: one that cannot be made fails early.
            repo_id = transformers_hub.hf_api().create_repo(hub.pop("repo_id", folder.name), exist_ok=True,
                                                            private=hub.pop("private", None),
                                                            token=hub.get("token")).repo_id
            folder.mkdir(parents=True, exist_ok=True)
            before = self._get_files_timestamps(folder)  # what this save leaves unchanged is not uploaded
        super().save_pretrained(save_directory, *args, **kwargs)
        if not save_here:
            return None
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)
        # the card a save generated describes the model saved before: rewritten; a README of the user's is kept
        if model_card is None and may_rewrite_card(folder):
            model_card = stamp_card(config_card(self.config, architecture=type(self).__name__,
                                                num_parameters=self.num_parameters(),
                                                tags=[*(self.model_tags or []), *extra_tags],
                                                has_weights=self._base().pooler.has_weights))
        if model_card is not None:
            write_model_card(save_directory, model_card)
        return self._upload_modified_files(folder, repo_id, before, **hub) if upload else None

    def push_to_hub(self, repo_id: str, *, commit_message: str | None = None, commit_description: str | None = None,
                    private: bool | None = None, token: bool | str | None = None, revision: str | None = None,
                    create_pr: bool = False, max_shard_size: int | str | None = "50GB",
                    tags: list[str] | None = None, tokenizer: Any = None, model_card: str | None = None):
        """Upload the model to the Hub as :meth:`save_pretrained` writes it: config, weights and attnpool's card.

        transformers' own ``push_to_hub`` uploads its generic "Model Card for Model ID" instead of the card; here
        the ``README.md`` uploaded, which replaces the repository's, is attnpool's card (or ``model_card``), with
        ``tags`` and :attr:`model_tags` added to its tags.

        Args:
            repo_id: The repository (``"user/name"``), created when missing.
            commit_message: The commit's message (default: transformers', ``"Upload <class name>"``).
            commit_description: The commit's description.
            private: Whether a repository created now is private (``None``: the account's default).
            token: The Hub token (default: the one ``hf auth login`` stored).
            revision: The branch to upload to (created when missing).
            create_pr: Open a pull request with the upload instead of committing to the branch.
            max_shard_size: The largest weights file before the weights are split.
            tags: Hub tags added to the card's.
            tokenizer: Uploaded with the model, so that the repository alone loads with the Auto classes.
            model_card: The ``README.md`` to upload instead of attnpool's card.

        Returns:
            The Hub's commit info.
        """
        with tempfile.TemporaryDirectory() as tmp_dir:
            return self.save_pretrained(tmp_dir, tokenizer=tokenizer, model_card=model_card, push_to_hub=True,
                                        repo_id=repo_id, commit_message=commit_message,
                                        commit_description=commit_description, private=private, token=token,
                                        revision=revision, create_pr=create_pr, max_shard_size=max_shard_size,
                                        tags=tags)

    def _base(self) -> AttnPoolPreTrainedModel:
        """The :class:`~attnpool.AttnPoolModel` inside (``self`` for the bare model)."""
        return getattr(self, self.base_model_prefix, self)

    def freeze_embeddings(self) -> None:
        """Stop training the encoder's embeddings: every parameter that feeds the first layer and no layer.

        Those outside the layer list that come before it (GPT-2's position embeddings, ELECTRA's projection too)
        and DeBERTa's relative position embeddings with their norm (:func:`~attnpool.model.encoders.parameter_depths`).
        A common trick to regularise small data sets.
        """
        freeze_bottom(self._base().encoder, None)

    def freeze_word_embeddings(self) -> None:
        """Stop training the encoder's input word embeddings (its largest matrix on a small model).

        The position and token-type embeddings and the embedding norm keep training: freezing those too cost PPPM
        0.001 Pearson, the word embeddings alone nothing (docs/quality.md).
        """
        self._base().encoder.get_input_embeddings().requires_grad_(False)

    def freeze_layers(self, num_layers: int) -> None:
        """Freeze the embeddings (:meth:`freeze_embeddings`) and the first ``num_layers`` encoder layers."""
        freeze_bottom(self._base().encoder, num_layers)

    def reinit_top_layers(self, num_layers: int) -> None:
        """Re-initialise the top ``num_layers`` encoder layers with the encoder's own initialisation.

        A trick from the PPPM and CommonLit winning solutions: the top layers of a pre-trained encoder are
        specialised to its pre-training task, and starting them afresh can help fine-tuning.
        """
        reinit_top(self._base().encoder, num_layers)

    @classmethod
    def from_encoder(
        cls,
        encoder: str | os.PathLike | PretrainedConfig | PreTrainedModel,
        pooling: str | dict[str, Any] | Pooler = "attention",
        pooling_options: dict[str, Any] | None = None,
        *,
        paired: bool = False,
        encoder_kwargs: dict[str, Any] | None = None,
        encoder_dropout: float | None = None,
        reinit_layers: int = 0,
        freeze_layers: int | None = None,
        freeze_word_embeddings: bool = False,
        **config_kwargs: Any,
    ):
        """Build the model around an encoder: pre-trained weights from a name or path, random from a config.

        Args:
            encoder: A hub name (``"microsoft/deberta-v3-large"``) or local folder: pre-trained weights (safetensors)
                are loaded. A ``PretrainedConfig``: a randomly initialised encoder (tests, benchmarks), built from a
                copy (the caller's config is never changed). A ``PreTrainedModel``: used as it is (its own pooler,
                which attnpool's replaces, is dropped: :class:`~attnpool.AttnPoolModel`).
            pooling: A registered pooler name, a pooler config dict, or a :class:`~attnpool.Pooler` instance
                (whose weights are kept).
            pooling_options: Options of the pooler, e.g. ``{"attn_size": 128}``.
            paired: Whether the inputs join two or more texts (sentence pairs, a template). Then ``attention`` on a
                bidirectional encoder gets ``cls_share=0.9`` unless ``pooling_options`` set it (see
                :func:`~attnpool.model.encoders.encoder_pooling_defaults`).
            encoder_kwargs: Passed to ``AutoModel.from_pretrained`` (e.g. ``attn_implementation``, ``revision``).
            encoder_dropout: Set every dropout probability of the encoder's body (hidden states and attention, in
                its config, saved with the model) to this value; ``None`` keeps the encoder's own. Not with a
                ``PreTrainedModel``, whose modules are already built.
            reinit_layers: Re-initialise this many top encoder layers.
            freeze_layers: Freeze the embeddings and this many bottom layers (``0``: the embeddings only).
            freeze_word_embeddings: Freeze the input word embeddings (:meth:`freeze_word_embeddings`); the
                recipe's default (:meth:`attnpool.TrainConfig.resolved_freeze_word_embeddings`) does, this
                method's does not.
            **config_kwargs: :class:`AttnPoolConfig` options: ``num_labels`` (default: as many as ``id2label`` or
                ``label2id`` name, else 1), ``problem_type`` (regression for 1 label, with a head), ``head_dropout``...
                ``dtype`` / ``torch_dtype``: the encoder's, loaded so (:func:`.configuration.encoder_load_options`).

        Returns:
            The model, with the pooler and head initialised by their ``reset_parameters`` (the pooler's ``init``
            option: ``attention`` starts from uniform weights, or its ``cls_share`` on ``[CLS]`` when ``paired``).

        Raises:
            FileNotFoundError: A local encoder path that does not exist, a file (give its folder), or a
                ``subfolder`` it lacks.
            OSError: An encoder that cannot be loaded (e.g. a hub name without network access).
            ValueError: An attnpool model given as the encoder (load it with ``from_pretrained`` instead), an
                encoder-decoder (T5, BART: :func:`~attnpool.model.encoders.check_encoder_only`), a pooler
                instance whose hidden size does not match the encoder or whose class is not the one
                registered under its ``name`` (it would not reload), or an ``encoder_dropout`` that
                cannot be applied (out of [0, 1), a built encoder, a config without dropout fields), labels that
                disagree (``num_labels``, ``id2label``, ``label2id``), a ``dtype`` other than a built encoder's.
            TypeError: A ``config_kwargs`` name that is neither :class:`AttnPoolConfig`'s nor ``PretrainedConfig``'s
                (``num_label``), with the name meant.
        """
        check_option_names(config_kwargs, "from_encoder", also=list(inspect.signature(cls.from_encoder).parameters))
        encoder_kwargs = encoder_load_options(config_kwargs, encoder_kwargs, encoder)  # with dtype= moved in
        pooler_instance = pooling if isinstance(pooling, Pooler) else None
        if isinstance(encoder, PreTrainedModel):
            check_not_attnpool(encoder.config, f"the {type(encoder).__name__} given")
            check_encoder_only(encoder.config, f"from_encoder: the {type(encoder).__name__} given")
            if encoder_dropout is not None:
                raise ValueError("encoder_dropout needs the encoder as a name, path or config: a built encoder's "
                                 "dropout modules already hold their probabilities; set them in its config instead")
            check_reloadable(encoder)
            encoder_model, encoder_config = encoder, encoder.config
        elif isinstance(encoder, PretrainedConfig):
            check_not_attnpool(encoder, f"the {type(encoder).__name__} given")
            check_encoder_only(encoder, f"from_encoder: the {type(encoder).__name__} given")
            # A copy: the model changes its encoder's config (attention implementation, vocab_size on a resize,
            # dropout), which must not reach the caller's, nor other models built from it.
            encoder_config = copy.deepcopy(encoder)
            if encoder_dropout is not None:
                set_encoder_dropout(encoder_config, encoder_dropout)
            encoder_model = AutoModel.from_config(encoder_config, **(encoder_kwargs or {}))
        else:
            name = os.fspath(encoder)
            # A local folder by its absolute path ("~/enc" would be taken for a hub name): the encoder keeps it as
            # its name, saved with the model, and "models/enc" read from another directory looks like a hub name.
            if os.path.exists(os.path.expanduser(name)):
                name = os.path.abspath(os.path.expanduser(name))
            kwargs = {"use_safetensors": True, **(encoder_kwargs or {})}
            check_encoder_reachable(name, kwargs)  # a missing folder, a hub name that cannot be reached: once, clearly
            if kwargs["use_safetensors"] is not False:  # use_safetensors=True alone still unpickles (False: asked for)
                check_safetensors_only(name, kwargs)
            try:  # the config first: an attnpool model or an encoder-decoder is refused before any weight loads
                given = kwargs.get("config")
                hub = {key: kwargs[key] for key in CONFIG_KWARGS if key in kwargs}
                config = given if isinstance(given, PretrainedConfig) else AutoConfig.from_pretrained(name, **hub)
                check_not_attnpool(config, repr(name))
                check_encoder_only(config, f"from_encoder: {name!r}")
                if encoder_dropout is not None:
                    kwargs["config"] = copy.deepcopy(config)
                    set_encoder_dropout(kwargs["config"], encoder_dropout)
                encoder_model = AutoModel.from_pretrained(name, **kwargs)
            except OSError as err:
                error = hub_error(name, err)
                if error is not None:
                    raise error from err
                raise OSError(
                    f"could not load the encoder {name!r}: {err}\nGive a local folder with config.json and "
                    "model.safetensors, or a hub name reachable from this machine (set HF_HUB_OFFLINE=0)."
                ) from err
            encoder_config = encoder_model.config
        if pooler_instance is not None:
            build_pooler(pooler_instance, encoder_hidden_size(encoder_config))  # raises on a hidden size mismatch
            check_rebuildable(pooler_instance)  # rebuilt from its config below, as it will be when the model is loaded
            pooling_spec: dict[str, Any] = pooler_instance.get_config()
        elif isinstance(pooling, str):
            pooling_spec = {"type": pooling, **(pooling_options or {})}
        else:
            pooling_spec = {**dict(pooling), **(pooling_options or {})}
        if pooler_instance is None:
            pooling_spec = encoder_pooling_defaults(pooling_spec, encoder_config, paired=paired)
        label_options(config_kwargs, has_head=hasattr(cls, "_build_head"))  # AttnPoolModel has no head
        config = AttnPoolConfig(encoder=encoder_config, pooling=pooling_spec, **config_kwargs)
        model = cls(config, encoder=encoder_model)
        if pooler_instance is not None:
            model._base().pooler.load_state_dict(pooler_instance.state_dict())
        match_encoder(model, encoder_model)
        if reinit_layers and freeze_layers is not None:
            count = len(encoder_layers(model._base().encoder))
            if reinit_layers + freeze_layers > count:
                raise ValueError(f"reinit_layers={reinit_layers} and freeze_layers={freeze_layers} overlap on this "
                                 f"{count}-layer encoder: a re-initialised layer would stay random, frozen; keep "
                                 f"reinit_layers + freeze_layers <= {count}")
        if reinit_layers:
            model.reinit_top_layers(reinit_layers)
        if freeze_layers is not None:
            model.freeze_layers(freeze_layers)
        elif freeze_word_embeddings:
            model.freeze_word_embeddings()
        return model


def where_the_model_is(path: Path) -> str:
    """Where the model is in a train run or one of its fold folders (told by their files: this layer knows no runs)."""
    if (path / "model" / "config.json").is_file():
        return f"; it is a fold of a train run: the model is in {path / 'model'}"
    folds = sorted(int(n) for p in path.glob("fold_*/model/config.json") if (n := p.parent.parent.name[5:]).isdigit())
    return (f"; it is a train run: load one fold's model, e.g. {path / f'fold_{folds[0]}' / 'model'} (trained folds: "
            f"{', '.join(map(str, folds))})") if folds else ""

