"""Where an encoder or saved model comes from (a local folder or a hub name), and what to say when neither works.

A hub name that cannot be reached used to take ``huggingface_hub``'s retries once per file looked up (about 23 s
each with no route to the Hub: the safetensors check's two files, then ``from_pretrained``'s) and end with a message
that never said the name was not a local folder. :func:`check_hub_source` asks the Hub once (twice on a network error),
without huggingface_hub's retries, before anything else does, and :func:`hub_error` turns the hub's errors into one
that says what to give instead.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from transformers.utils import is_peft_available

# A lookup that fails on the connection itself is tried once more after a pause: huggingface_hub's own retries took
# 23 s per file with no route to the Hub, but none at all failed a load on a brief network blip.
LOOKUP_ATTEMPTS = 2
RETRY_DELAY_S = 1.0
# How many of a folder's entries an error lists (a folder of checkpoints can hold hundreds).
SHOWN_ENTRIES = 8

# A name ending so is a file given for its folder, not a hub name (which may hold dots: "Foo-BAR_foo.bar123").
_FILE_SUFFIXES = (".safetensors", ".json", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf",
                  ".txt", ".model", ".yaml", ".yml")

# What the hint to leave the encoder out says: the CLI's and ``attnpool.train``'s default (attnpool.config).
DEFAULT_HINT = "or leave the model out of attnpool train (--model / model=) for the bundled all-MiniLM-L6-v2"


def _offline_reason(options: dict[str, Any]) -> str | None:
    """Why the Hub is not asked at all: ``HF_HUB_OFFLINE=1`` or ``local_files_only=True`` (``None``: it is asked)."""
    if options.get("local_files_only"):
        return "local_files_only=True"
    if hub_constants.is_offline_mode():
        return "HF_HUB_OFFLINE=1 is set"
    return None


def _unreachable(name: str, what: str, reason: str, default_hint: bool) -> OSError:
    leave_out = f", {DEFAULT_HINT}" if default_hint else ""
    return OSError(
        f"the {what} {name!r} is not a local folder, and the Hugging Face Hub cannot be reached to download it "
        f"({reason}). Give a local folder holding its config.json and model.safetensors, or download it first on a "
        f"machine that reaches the Hub (`hf download {name}` fills the cache this machine reads, "
        f"`hf download {name} --local-dir FOLDER` makes a folder to give){leave_out}"
    )


def _not_found(name: str, what: str, default_hint: bool) -> OSError:
    leave_out = f", {DEFAULT_HINT}" if default_hint else ""
    return OSError(
        f"the {what} {name!r} is not a local folder (resolved to {os.path.abspath(name)}), and the Hugging Face Hub "
        "has no repository of that name (or it is private or gated: log in with `hf auth login`). Check the "
        f"spelling, give a local folder holding its config.json and model.safetensors{leave_out}"
    )


def _file_not_hub_name(name: str) -> bool:
    """Whether ``name`` is a file that cannot be a hub name, so it was given where its folder goes.

    A file whose path could also be a hub name (``prajjwal1/bert-tiny`` in the working directory) is not: transformers
    loads anything that is not a folder from the Hub, so it stays a hub name.
    """
    if not os.path.isfile(os.path.expanduser(name)):
        return False
    if os.path.isabs(name) or name.startswith(("./", "../", "~", f".{os.sep}", f"..{os.sep}")):
        return True
    if name.lower().endswith(_FILE_SUFFIXES):
        return True
    try:
        huggingface_hub.utils.validate_repo_id(name)
    except HFValidationError:
        return True
    return False


def file_given(name: str, what: str) -> FileNotFoundError:
    """The error for a file given where a model folder goes (``.../model.safetensors``, ``.../config.json``)."""
    path = os.path.abspath(os.path.expanduser(name))
    return FileNotFoundError(
        f"the {what} {name!r} is a file; give the folder that holds config.json and model.safetensors: "
        f"{os.path.dirname(path)}"
    )


def missing_subfolder(folder: Path, subfolder: str) -> FileNotFoundError:
    """The error for ``subfolder=`` naming no folder inside ``folder`` (which exists): what it holds instead."""
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    shown = ", ".join(entries[:SHOWN_ENTRIES]) + (f" and {len(entries) - SHOWN_ENTRIES} more"
                                                  if len(entries) > SHOWN_ENTRIES else "")
    return FileNotFoundError(f"subfolder {subfolder!r} is not in {folder} (it contains: {shown or 'nothing'}); give "
                             "the subfolder that holds config.json and model.safetensors, or leave subfolder out")


def adapter_advice(folder: Path) -> str:
    """What to do with a peft adapter folder (``adapter_config.json``, no ``config.json``); ``""`` for another."""
    if not (folder / "adapter_config.json").is_file():
        return ""
    try:
        base = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, not an object: the placeholder
        base = None
    base = base if isinstance(base, str) and base else "BASE"
    return (f"; it is a LoRA (peft) adapter, not a whole model: load its base model and put the adapter on it: "
            f"model = peft.PeftModel.from_pretrained(attnpool.AttnPoolForSequenceClassification.from_pretrained("
            f"{base!r}), {str(folder)!r}), then model.merge_and_unload().save_pretrained(\"my-model\", "
            "tokenizer=tokenizer) for one plain attnpool folder (README: Fine-tuning with LoRA)")


def check_no_adapter(folder: Path) -> None:
    """Refuse a model folder (``config.json``) that also holds a peft adapter (``adapter_config.json``).

    transformers loads such a folder's weights and puts the adapter on them again: a merged model saved into its
    adapter's folder (``merge_and_unload().save_pretrained("my-lora")``) predicted wrongly, without a warning.
    Without peft installed transformers leaves the adapter alone, and so does this check.

    Raises:
        ValueError: The folder holds both (and peft is installed), with the files to move out.
    """
    if not (folder / "adapter_config.json").is_file() or not is_peft_available():
        return
    adapter = sorted(p.name for p in folder.glob("adapter_*") if p.is_file())
    raise ValueError(
        f"{folder} holds a whole model (config.json) and a LoRA (peft) adapter ({', '.join(adapter)}): transformers "
        "would put the adapter on weights that may already hold it (a merged model saved into its adapter's folder) "
        "and predict wrongly. Move the adapter files out of the folder (to load the adapter on its base model, see "
        "README: Fine-tuning with LoRA), or save the merged model to a folder of its own: "
        'model.merge_and_unload().save_pretrained("my-model", tokenizer=tokenizer)'
    )


def _invalid(name: str, what: str, err: Exception, default_hint: bool) -> FileNotFoundError:
    if os.path.isfile(os.path.expanduser(name)):
        return file_given(name, what)
    leave_out = f", {DEFAULT_HINT}" if default_hint else ""
    return FileNotFoundError(
        f"the {what} {name!r} is neither a folder (resolved to {os.path.abspath(os.path.expanduser(name))}: it does "
        f"not exist) nor a valid Hugging Face hub name ({err}). Give a folder holding its config.json and "
        f"model.safetensors, a hub name such as 'microsoft/deberta-v3-large'{leave_out}"
    )


def hub_error(name: str, err: BaseException, *, what: str = "encoder", default_hint: bool = True) -> Exception | None:
    """The clear error for a hub lookup of ``name`` that failed with ``err`` (or its causes); ``None``: none fits.

    Reached-but-refused answers other than "no such repository" (a gated repository, a revision or file that does
    not exist, a server error) are left to transformers' own messages, which name them.
    """
    for seen in _causes(err):
        if isinstance(seen, HFValidationError):
            return _invalid(name, what, seen, default_hint)
        if isinstance(seen, OfflineModeIsEnabled):
            return _unreachable(name, what, "HF_HUB_OFFLINE=1 is set", default_hint)
        if isinstance(seen, GatedRepoError):
            return None
        if isinstance(seen, RepositoryNotFoundError):
            return _not_found(name, what, default_hint)
        if isinstance(seen, LocalEntryNotFoundError):
            reason = _offline_reason({}) or "no network connection to it, and the files are not in the local cache"
            return _unreachable(name, what, reason, default_hint)
        if isinstance(seen, HfHubHTTPError):
            return None
        if _is_network_error(seen):
            return _unreachable(name, what, f"{type(seen).__name__}: {seen}", default_hint)
    return None


def _is_network_error(err: BaseException) -> bool:
    """No route, no DNS, a proxy refusing, a timeout: the connection's own failure, not an answer of the Hub."""
    network = type(err).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "ssl", "socket")
    return network or isinstance(err, ConnectionError | TimeoutError)


def _connection_failed(err: BaseException) -> bool:
    """Whether the lookup failed on the connection (worth asking again), not on an answer of the Hub."""
    for seen in _causes(err):
        if isinstance(seen, HfHubHTTPError | HFValidationError | OfflineModeIsEnabled | LocalEntryNotFoundError):
            return False  # the Hub answered (a 404, a gated repository...), or was not asked
        if _is_network_error(seen):
            return True
    return False


def _causes(err: BaseException | None) -> Iterator[BaseException]:
    """``err`` and the errors it was raised from or while handling, outermost first."""
    while err is not None:
        yield err
        err = err.__cause__ or err.__context__


def check_hub_source(name: str, options: dict[str, Any], *, what: str = "encoder", default_hint: bool = True) -> None:
    """Fail at once, clearly, on a hub name that is invalid, unknown or cannot be reached (not in the local cache).

    A name whose ``config.json`` is in the cache is left to transformers (offline it loads from there). Otherwise the
    Hub is asked for the ``config.json`` without ``huggingface_hub``'s retries (which take 23 s per file with no
    network): once, and once more after a second's pause when the connection itself failed (a network blip); a
    reached Hub that answers is left to transformers, which downloads what it needs.

    Args:
        name: What was given: an existing folder returns at once.
        options: The ``from_pretrained`` options (``revision``, ``subfolder``, ``cache_dir``, ``token``,
            ``local_files_only``).
        what: ``"encoder"`` or ``"model"``: how the messages name it.
        default_hint: Whether the messages say that leaving the model out of ``attnpool train`` gives a default.

    Raises:
        OSError: The Hub cannot be reached (offline, no network) and the name is not cached, or it has no such
            repository.
        FileNotFoundError: The name is a file that cannot be a hub name (``.../config.json``), or no folder and not
            a valid hub name.
    """
    if _file_not_hub_name(name):
        raise file_given(name, what)
    if os.path.exists(name):  # a folder; or a file that may be a hub name, left to transformers (which asks the Hub)
        return
    try:
        huggingface_hub.utils.validate_repo_id(name)
    except HFValidationError as err:
        raise _invalid(name, what, err, default_hint) from None
    filename = "/".join(part for part in (options.get("subfolder") or "", "config.json") if part)
    revision = options.get("revision")
    cached = huggingface_hub.try_to_load_from_cache(name, filename, cache_dir=options.get("cache_dir"),
                                                    revision=revision)
    if isinstance(cached, str):
        return
    reason = _offline_reason(options)
    if reason is not None:
        raise _unreachable(name, what, reason, default_hint)
    url = huggingface_hub.hf_hub_url(name, filename, revision=revision)
    for attempt in range(LOOKUP_ATTEMPTS):
        try:
            huggingface_hub.get_hf_file_metadata(url, token=options.get("token"))  # one HEAD request, no retries
            return
        except Exception as err:  # noqa: BLE001 - what is not classified is left to from_pretrained
            if attempt + 1 < LOOKUP_ATTEMPTS and _connection_failed(err):
                time.sleep(RETRY_DELAY_S)  # a network blip: asked once more before it is called unreachable
                continue
            error = hub_error(name, err, what=what, default_hint=default_hint)
            if error is not None:
                raise error from None
            return
