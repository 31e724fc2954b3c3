"""Training a pooler and a linear classifier on signal sets, and sweeping poolers over signal fractions."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F_nn
from torch import nn

from attnpool.pooling import Pooler, build_pooler, get_pooler_class
from attnpool.synthetic.sets import SignalSets, bayes_accuracy, check_int, make_signal_sets


@dataclass(frozen=True)
class PoolerFit:
    """What :func:`train_pooler_on_sets` measured.

    Attributes:
        accuracy: Accuracy on the test sets.
        train_accuracy: Accuracy on the training sets after training (a gap to ``accuracy`` is overfitting).
        signal_weight: The pooler's token weight on the signal vectors, summed per set (averaged over heads) and
            averaged over the test sets: 1 means all weight on the signal, ``k / L`` is what mean pooling gives.
            About 0.5 with two classes often means the pooler attends to the signal of one class only and tells
            the other class by its absence. ``None`` for poolers without token weights.
        seconds: Wall time of training and evaluation.
        pooler: The trained pooler (eval mode).
        classifier: The trained linear classifier on the pooled vector.
    """

    accuracy: float
    train_accuracy: float
    signal_weight: float | None
    seconds: float
    pooler: Pooler
    classifier: nn.Linear


@torch.no_grad()
def _evaluate(pooler: Pooler, classifier: nn.Linear, sets: SignalSets, batch_size: int) -> tuple[float, float | None]:
    """Accuracy and the mean token weight on the signal vectors (``None`` without weights)."""
    pooler.eval()
    correct, signal_weight, has_weights = 0, 0.0, True
    for start in range(0, len(sets), batch_size):
        part = slice(start, start + batch_size)
        pooled, weights = pooler(sets.vectors[part], sets.mask[part], return_weights=True)
        correct += int((classifier(pooled).argmax(dim=-1) == sets.labels[part]).sum())
        if weights is None:
            has_weights = False
        elif has_weights:
            weights = weights.reshape(weights.shape[0], -1, weights.shape[-1])  # (B, heads, T)
            on_signal = (weights.float() * sets.signal[part].unsqueeze(1)).sum(dim=-1)  # (B, heads)
            signal_weight += on_signal.mean(dim=1).sum().item()
    return correct / len(sets), signal_weight / len(sets) if has_weights else None


def train_pooler_on_sets(
    pooler: str | Mapping[str, Any],
    train: SignalSets,
    test: SignalSets,
    *,
    epochs: int = 20,
    lr: float = 1e-2,
    batch_size: int = 128,
    weight_decay: float = 0.01,
    seed: int = 0,
    pooling_options: Mapping[str, Any] | None = None,
) -> PoolerFit:
    """Train a pooler and a linear classifier on the pooled vectors, directly on the sets; test them.

    AdamW with a cosine learning-rate decay to zero over ``epochs`` full passes, cross-entropy loss. The pooler and
    the classifier are initialised from torch's CPU generator seeded with ``seed`` and the batches shuffled by a
    generator seeded with ``seed``: the same arguments give the same result on one machine. The caller's random
    state is restored afterwards: its later draws do not depend on this call.

    Args:
        pooler: A registered pooler name (``"attention"``, ``"mean"``...) or a config dict, as
            :func:`attnpool.build_pooler` takes; not one that needs stacked layers or attention maps.
        train: Training sets.
        test: Test sets of the same task (same ``task_seed``, ``dim`` and classes) but another draw (``seed``).
        epochs: Passes over ``train``.
        lr: Peak learning rate.
        batch_size: Sets per step.
        weight_decay: AdamW's decoupled weight decay.
        seed: Seed of the initialisation and the shuffling.
        pooling_options: Constructor options of the pooler, e.g. ``{"attn_size": 32}``.

    Returns:
        Test and train accuracy, the weight on the signal vectors, the time taken and the trained modules.

    Raises:
        ValueError: Train and test sets that do not match or are the same draw, a pooler that needs other inputs,
            bad settings.
    """
    where = "train_pooler_on_sets"
    epochs = check_int(where, "epochs", epochs, 1)
    batch_size = check_int(where, "batch_size", batch_size, 1)
    seed = check_int(where, "seed", seed)
    if not lr > 0:
        raise ValueError(f"{where}: lr must be > 0, got {lr!r}")
    if (train.dim, train.num_classes) != (test.dim, test.num_classes):
        raise ValueError(
            f"{where}: train sets have dim={train.dim}, num_classes={train.num_classes} but test sets have "
            f"dim={test.dim}, num_classes={test.num_classes}; sample both with the same dim, num_classes and "
            f"task_seed"
        )
    _check_same_task_other_draw(where, train, test)
    start = time.perf_counter()
    # Only the CPU generator is seeded (everything here runs on the CPU), so only it is forked: a GPU's generators
    # are not touched, and the caller's CPU state comes back when the block ends.
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        model, classifier = _train(pooler, train, epochs, lr, batch_size, weight_decay, seed, pooling_options)
        train_accuracy, _ = _evaluate(model, classifier, train, 4 * batch_size)
        accuracy, signal_weight = _evaluate(model, classifier, test, 4 * batch_size)
    return PoolerFit(accuracy, train_accuracy, signal_weight, time.perf_counter() - start, model, classifier)


def _check_same_task_other_draw(where: str, train: SignalSets, test: SignalSets) -> None:
    """``ValueError`` for train and test sets of different tasks, or of one draw (test sets that are train sets)."""
    if train.task_seed is not None and test.task_seed is not None and train.task_seed != test.task_seed:
        raise ValueError(
            f"{where}: train sets have task_seed={train.task_seed} but test sets have task_seed={test.task_seed}: "
            f"their marker and class prototypes differ, so they are different tasks; sample both with the same "
            f"task_seed"
        )
    if train.vectors.shape == test.vectors.shape and torch.equal(train.vectors, test.vectors):  # not just one seed:
        # sets of one seed but another size or strength are other data (a length-generalisation test)
        other = f", e.g. seed={train.seed + 1}" if train.seed is not None else ""
        raise ValueError(
            f"{where}: the train and test sets are the same sets (seed={train.seed}, task_seed={train.task_seed}), "
            f"so the test would measure memorisation; sample the test sets with another seed{other}"
        )


def _train(
    pooler: str | Mapping[str, Any],
    train: SignalSets,
    epochs: int,
    lr: float,
    batch_size: int,
    weight_decay: float,
    seed: int,
    pooling_options: Mapping[str, Any] | None,
) -> tuple[Pooler, nn.Linear]:
    """Build the pooler and classifier from the current CPU random state and train them; both end in eval mode."""
    where = "train_pooler_on_sets"
    model = build_pooler(pooler, train.dim, **dict(pooling_options or {}))
    if model.needs_all_layers or model.needs_attentions:
        raise ValueError(
            f"{where}: pooler {model.name!r} needs stacked encoder layers or attention maps, which sets of vectors "
            f"do not have; choose a pooler of one layer's vectors, e.g. 'attention' or 'mean'"
        )
    classifier = nn.Linear(model.output_dim, train.num_classes)
    params = [*model.parameters(), *classifier.parameters()]
    steps_per_epoch = math.ceil(len(train) / batch_size)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)  # the classifier has parameters
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * steps_per_epoch)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(train), generator=gen).split(batch_size):
            pooled, weights = model(train.vectors[batch], train.mask[batch], return_weights=True)
            loss = F_nn.cross_entropy(classifier(pooled), train.labels[batch])  # logits (B, C)
            if model.has_auxiliary_loss:  # the pooler's regulariser (multihead_attention's penalty), as in training
                loss = loss + model.auxiliary_loss(weights)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    return model, classifier


def snr_sweep(
    poolers: Sequence[str],
    set_sizes: Iterable[int],
    num_signals: Iterable[int],
    *,
    seeds: Iterable[int] = (0, 1, 2),
    dim: int = 16,
    strength: float = 4.0,
    num_train: int = 2048,
    num_test: int = 1024,
    variable_length: bool = True,
    epochs: int = 20,
    lr: float = 1e-2,
    batch_size: int = 128,
    pooling_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Train every pooler on every (set size, signal count, seed) task and collect one row per run.

    Each seed draws its own task (marker and prototypes), training sets and test sets; all poolers of one
    (set size, signal count, seed) see the same data. Signal counts larger than a set size are skipped.

    Args:
        poolers: Pooler names, e.g. ``["mean", "max", "attention"]``; one name alone is a list of one.
        set_sizes: Largest set sizes ``T`` (any iterable of integers: a list, a numpy array, a generator).
        num_signals: Signal vectors per set ``k``.
        seeds: Seeds of the task, the data and the training.
        dim: Vector size ``D``.
        strength: Signal strength ``a`` (see :func:`make_signal_sets`).
        num_train: Training sets per task.
        num_test: Test sets per task.
        variable_length: Ragged, padded sets.
        epochs: See :func:`train_pooler_on_sets`.
        lr: See :func:`train_pooler_on_sets`.
        batch_size: See :func:`train_pooler_on_sets`.
        pooling_options: Options per pooler name, e.g. ``{"attention": {"attn_size": 32}}``; a name is matched as
            the registry matches it (``Attention`` and ``attention_pooling`` are ``attention``).
        progress: Called with each row as soon as it is measured.

    Returns:
        Rows with keys ``pooler``, ``set_size``, ``num_signal``, ``snr`` (``k / T``, the nominal signal fraction
        of a full set), ``mean_snr`` (``k / L`` averaged over the test sets), ``seed``, ``accuracy``,
        ``train_accuracy``, ``signal_weight`` (``None`` without token weights), ``seconds`` and, for two classes,
        the closed-form limits ``mean_bound`` and ``signal_mean_bound`` of :func:`bayes_accuracy`.

    Raises:
        ValueError: A set size, signal count or seed that is not an integer, or bad settings; an unknown pooler;
            a ``pooling_options`` key naming no pooler of ``poolers`` (or the same one as another key).
    """
    where = "snr_sweep"
    poolers = [poolers] if isinstance(poolers, str) else list(poolers)  # one name, not its letters
    per_pooler = _options_per_pooler(poolers, pooling_options or {})  # before anything trains
    # Tuples, not the iterables themselves: a generator would be used up by the first pass of the outer loop.
    set_sizes = tuple(check_int(where, "a set size", size, 1) for size in set_sizes)
    num_signals = tuple(check_int(where, "a signal count", count, 1) for count in num_signals)
    seeds = tuple(check_int(where, "a seed", seed) for seed in seeds)
    rows = []
    for set_size in set_sizes:
        for num_signal in num_signals:
            if num_signal > set_size:
                continue
            for seed in seeds:
                common = {"dim": dim, "strength": strength, "task_seed": seed, "variable_length": variable_length}
                train = make_signal_sets(num_train, set_size, num_signal, seed=2 * seed, **common)
                test = make_signal_sets(num_test, set_size, num_signal, seed=2 * seed + 1, **common)
                bounds = {}
                if test.num_classes == 2:
                    bounds = {key: bayes_accuracy(test, key) for key in ("mean", "signal_mean")}
                for name in poolers:
                    fit = train_pooler_on_sets(
                        name,
                        train,
                        test,
                        epochs=epochs,
                        lr=lr,
                        batch_size=batch_size,
                        seed=seed,
                        pooling_options=per_pooler.get(name),
                    )
                    row = {
                        "pooler": name,
                        "set_size": set_size,
                        "num_signal": num_signal,
                        "snr": num_signal / set_size,
                        "mean_snr": test.snr,
                        "seed": seed,
                        "accuracy": fit.accuracy,
                        "train_accuracy": fit.train_accuracy,
                        "signal_weight": fit.signal_weight,
                        "seconds": fit.seconds,
                        **{f"{key}_bound": value for key, value in bounds.items()},
                    }
                    rows.append(row)
                    if progress is not None:
                        progress(row)
    return rows


def _options_per_pooler(poolers: list[str], options: Mapping[str, Any]) -> dict[str, Any]:
    """``snr_sweep``'s ``pooling_options`` keyed by the swept names they belong to, matched as the registry matches.

    Raises:
        ValueError: An unknown pooler in ``poolers``, or an options key that names none of them (a typo, a pooler
            not swept) or the same one as another key; the options would be left out silently.
    """
    def classes(name: str, what: str) -> tuple[type, ...]:
        try:
            return tuple(get_pooler_class(part.strip()) for part in str(name).split("+"))
        except ValueError as err:
            raise ValueError(f"snr_sweep: {what} {name!r}: {err}") from None

    swept = {name: classes(name, "pooler") for name in poolers}
    found: dict[str, Any] = {}
    taken: dict[str, str] = {}
    for key, value in options.items():
        names = [name for name in poolers if swept[name] == classes(key, "pooling_options key")]
        if not names:
            raise ValueError(f"snr_sweep: pooling_options key {key!r} names none of the poolers swept "
                             f"({', '.join(poolers)}): its options would be ignored; key them by a swept pooler's name")
        if names[0] in taken:
            raise ValueError(f"snr_sweep: pooling_options keys {taken[names[0]]!r} and {key!r} name the same pooler "
                             f"{names[0]!r}: give its options under one key")
        for name in names:
            found[name], taken[name] = value, key
    return found
