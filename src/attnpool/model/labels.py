"""The label options (``num_labels``, ``id2label``, ``label2id``) of a new model or a load, checked and normalised."""

from __future__ import annotations

from typing import Any


def normalise_labels(options: dict[str, Any], where: str) -> None:
    """Check ``num_labels``, ``id2label`` and ``label2id`` against each other and normalise them, in place.

    ``id2label`` gets integer keys (a JSON file gives strings: pipelines then found no label 0), ``label2id``
    alone becomes ``id2label`` (its inverse), and a ``num_labels`` given with names is their number. Nothing is set
    when no names are given.

    Raises:
        ValueError: ``num_labels``, ``id2label`` and ``label2id`` that disagree, ids that are not integers, or ids
            that are not 0..N-1 (the head's outputs).
    """
    id2label, label2id = options.get("id2label"), options.get("label2id")
    if id2label:
        try:
            named = {int(key): value for key, value in id2label.items()}
        except (TypeError, ValueError):
            raise ValueError(f"{where}: id2label={id2label} must map integer ids (the head's outputs) to names, e.g. "
                             "{0: 'neg', 1: 'pos'}") from None
        if len(named) != len(id2label) or sorted(named) != list(range(len(named))):
            raise ValueError(f"{where}: id2label={id2label} must name each output once, with ids 0 to "
                             f"{len(id2label) - 1} (the head's outputs)")
        id2label = options["id2label"] = named
    if label2id:
        try:
            named = {int(value): key for key, value in label2id.items()}
        except (TypeError, ValueError):
            raise ValueError(f"{where}: label2id={label2id} must map names to integer ids, e.g. "
                             "{'neg': 0, 'pos': 1}") from None
        if len(named) != len(label2id) or sorted(named) != list(range(len(named))):
            raise ValueError(f"{where}: label2id={label2id} must give each label its own id, 0 to "
                             f"{len(label2id) - 1} (the head's outputs)")
        if id2label and named != id2label:
            raise ValueError(f"{where}: label2id={label2id} is not the inverse of id2label={id2label}; give one "
                             "of them (the other is made from it)")
        id2label = options["id2label"] = named
    if id2label and options.setdefault("num_labels", len(id2label)) != len(id2label):
        raise ValueError(f"{where}: num_labels={options['num_labels']} but {len(id2label)} labels are "
                         f"named ({id2label}); name every output, or leave num_labels out")


def label_options(config_kwargs: dict[str, Any], *, has_head: bool) -> None:
    """Fill in ``from_encoder``'s ``num_labels``, ``id2label`` and ``problem_type`` from what was given, in place.

    ``num_labels`` is the number of labels named (``id2label``, or ``label2id``, whose inverse becomes
    ``id2label``), else 1; one output on a model with a head is a regression (set now, so that pipelines add no
    sigmoid or softmax; not on :class:`AttnPoolModel`, whose folder may get a head of 3 labels later).

    Raises:
        ValueError: ``num_labels``, ``id2label`` and ``label2id`` that disagree, or ids that are not 0..N-1
            (:func:`normalise_labels`).
    """
    normalise_labels(config_kwargs, "from_encoder")
    config_kwargs.setdefault("num_labels", 1)
    if config_kwargs.get("problem_type") is None and config_kwargs["num_labels"] == 1 and has_head:
        config_kwargs["problem_type"] = "regression"
