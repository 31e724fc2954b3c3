r"""Synthetic sets in which a few vectors carry the class and the rest are distractors.

After the synthetic study of "Robust Noise Attenuation via Adaptive Pooling of Transformer Outputs" (Brothers,
2025, ICML, arXiv:2506.09215): a pooler sees a set of ``N`` vectors of which only ``k`` (the signal) hold what the
task needs, and the paper's signal-to-noise ratio is the share of signal vectors, :math:`\mathrm{SNR} = k / N`.
Mean pooling dilutes the signal by :math:`k / N` while the distractors' noise only shrinks by :math:`1/\sqrt{N}`,
so its accuracy collapses as the signal becomes rare; a learned attention pooler can find the signal vectors and
keep their centroid, the signal-optimal pool of the paper.

Here the task is classification. With :math:`\varepsilon \sim \mathcal{N}(0, I_D)`, a unit ``marker`` direction
:math:`u` and unit class prototypes :math:`p_c`, all orthonormal and fixed by ``task_seed``:

.. math::
    x_{\mathrm{noise}} = \varepsilon, \qquad
    x_{\mathrm{signal}} = \varepsilon + a\,(u + p_y)

with ``a = strength``. The class lives only in the signal vectors (along :math:`p_y`); the marker lets a pooler
tell signal from distractors without knowing the class. For two classes both limits are closed forms
(:func:`bayes_accuracy`): any classifier of the masked mean of a set of ``L`` real vectors reaches at most
:math:`\Phi(k a / \sqrt{2L})`, a classifier of the signal vectors' centroid :math:`\Phi(a \sqrt{k / 2})`.

Example:
    >>> from attnpool.synthetic import make_signal_sets, train_pooler_on_sets
    >>> train = make_signal_sets(2048, set_size=256, num_signal=1, dim=16, seed=1)  # 1 signal vector in 128-256
    >>> test = make_signal_sets(1024, set_size=256, num_signal=1, dim=16, seed=2)
    >>> fit = train_pooler_on_sets("attention", train, test, pooling_options={"attn_size": 16})
    >>> fit.accuracy, fit.signal_weight  # ~0.99 (mean pooling: ~0.57) and the attention weight on the signal

``benchmarks/snr.py`` sweeps poolers over signal fractions and set sizes with :func:`snr_sweep`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F_nn
from torch import Tensor, nn

from attnpool.pooling import Pooler, build_pooler

__all__ = [
    "PoolerFit",
    "SignalSets",
    "bayes_accuracy",
    "make_signal_sets",
    "snr_sweep",
    "train_pooler_on_sets",
]


@dataclass(frozen=True)
class SignalSets:
    """A batch of padded sets, their labels, and which vectors carry the signal.

    Padded positions hold zeros and are ``False`` in ``mask`` (and in ``signal``); sets of different lengths share
    one tensor, so a pooler that ignored the mask would see the zeros.

    Attributes:
        vectors: ``(N, T, D)`` float32, ``T`` the largest set size.
        mask: ``(N, T)`` bool, ``True`` for the real vectors of each set (a prefix: right padding).
        labels: ``(N,)`` int64 in ``[0, num_classes)``, balanced to within one set per class.
        signal: ``(N, T)`` bool, ``True`` for the ``num_signal`` vectors of each set that carry its class.
        strength: ``a`` of the module docstring: how many noise standard deviations a signal vector stands out,
            along the marker and along its class prototype each.
        num_classes: Number of classes.
    """

    vectors: Tensor
    mask: Tensor
    labels: Tensor
    signal: Tensor
    strength: float
    num_classes: int

    def __len__(self) -> int:
        return self.vectors.shape[0]

    @property
    def set_size(self) -> int:
        """``T``, the largest set size (the padded length)."""
        return self.vectors.shape[1]

    @property
    def dim(self) -> int:
        """``D``, the size of each vector."""
        return self.vectors.shape[2]

    @property
    def num_signal(self) -> int:
        """Signal vectors per set (the same in every set)."""
        return int(self.signal[0].sum())

    @property
    def lengths(self) -> Tensor:
        """``(N,)`` int64, the number of real vectors of each set."""
        return self.mask.sum(dim=1)

    @property
    def snr(self) -> float:
        """The paper's signal-to-noise ratio ``k / N`` averaged over the sets (``N`` each set's real length)."""
        return (self.num_signal / self.lengths.double()).mean().item()


def _check_int(where: str, name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def task_directions(dim: int, num_classes: int, task_seed: int = 0) -> tuple[Tensor, Tensor]:
    """The marker ``(D,)`` and class prototypes ``(C, D)``: orthonormal, the same for every call with these args.

    Args:
        dim: ``D``; at least ``num_classes + 1``.
        num_classes: ``C``.
        task_seed: Seed of the directions; train and test sets of one task must share it.

    Returns:
        ``(marker, prototypes)``, float32.
    """
    gen = torch.Generator().manual_seed(task_seed)
    basis, _ = torch.linalg.qr(torch.randn(dim, num_classes + 1, generator=gen, dtype=torch.float64))
    return basis[:, 0].float(), basis[:, 1:].T.float().contiguous()  # (D,), (C, D)


def make_signal_sets(
    num_sets: int,
    set_size: int,
    num_signal: int,
    dim: int,
    *,
    strength: float = 4.0,
    num_classes: int = 2,
    seed: int = 0,
    task_seed: int = 0,
    variable_length: bool = True,
) -> SignalSets:
    r"""Sample sets of ``set_size`` vectors of which ``num_signal`` carry the class (see the module docstring).

    The paper's SNR is ``num_signal / set_size`` for full sets. With ``variable_length`` each set's real length
    is drawn uniformly from ``[max(num_signal, ceil(set_size / 2)), set_size]`` and the rest is padding, so the
    SNR of a set lies between ``num_signal / set_size`` and about twice that (:attr:`SignalSets.snr` gives the
    mean). The signal vectors sit at random real positions.

    Args:
        num_sets: ``N``, at least ``num_classes``.
        set_size: ``T``, the largest number of vectors in a set.
        num_signal: ``k``, the signal vectors in each set, ``1 <= k <= set_size``.
        dim: ``D``, at least ``num_classes + 1`` (the marker and the prototypes are orthonormal).
        strength: ``a > 0``: a signal vector is noise plus ``a`` times (marker + its class prototype).
        num_classes: ``C >= 2``.
        seed: Seed of the sampling (lengths, labels, positions, noise); use different ones for train and test.
        task_seed: Seed of the marker and prototypes (:func:`task_directions`); the same for train and test.
        variable_length: Ragged sets with padding; ``False`` makes every set ``set_size`` long.

    Returns:
        The sets; the same arguments always give the same tensors.

    Raises:
        ValueError: An argument out of range, saying which and how to fix it.

    Shapes:
        ``vectors (N, T, D)``, ``mask (N, T)``, ``labels (N,)``, ``signal (N, T)``.
    """
    where = "make_signal_sets"
    _check_int(where, "set_size", set_size, 1)
    _check_int(where, "num_signal", num_signal, 1)
    _check_int(where, "num_classes", num_classes, 2)
    _check_int(where, "num_sets", num_sets, 1)
    _check_int(where, "dim", dim, 1)
    if num_signal > set_size:
        raise ValueError(
            f"{where}: num_signal={num_signal} is larger than set_size={set_size}; a set cannot hold more signal "
            f"vectors than vectors: lower num_signal or raise set_size"
        )
    if num_sets < num_classes:
        raise ValueError(
            f"{where}: num_sets={num_sets} is smaller than num_classes={num_classes}; every class needs at least "
            f"one set: raise num_sets"
        )
    if dim < num_classes + 1:
        raise ValueError(
            f"{where}: dim={dim} is too small for num_classes={num_classes}; the marker and the {num_classes} class "
            f"prototypes are orthonormal, so dim must be >= {num_classes + 1}"
        )
    if not isinstance(strength, (int, float)) or isinstance(strength, bool) or not 0 < strength < math.inf:
        raise ValueError(
            f"{where}: strength must be a finite number > 0 (the signal's size in noise standard deviations, "
            f"e.g. 4.0), got {strength!r}"
        )

    marker, prototypes = task_directions(dim, num_classes, task_seed)
    gen = torch.Generator().manual_seed(seed)
    if variable_length:
        shortest = max(num_signal, math.ceil(set_size / 2))
        lengths = torch.randint(shortest, set_size + 1, (num_sets,), generator=gen)
    else:
        lengths = torch.full((num_sets,), set_size)
    mask = torch.arange(set_size).unsqueeze(0) < lengths.unsqueeze(1)  # (N, T)
    labels = (torch.arange(num_sets) % num_classes)[torch.randperm(num_sets, generator=gen)]

    # The k lowest of uniform draws over the real positions (padding drawn as +inf) are the signal positions.
    draws = torch.rand(num_sets, set_size, generator=gen).masked_fill(~mask, math.inf)
    signal = torch.zeros(num_sets, set_size, dtype=torch.bool)
    signal.scatter_(1, draws.argsort(dim=1)[:, :num_signal], True)

    vectors = torch.randn(num_sets, set_size, dim, generator=gen)  # (N, T, D)
    offsets = strength * (marker + prototypes[labels])  # (N, D)
    vectors = vectors + signal.unsqueeze(-1) * offsets.unsqueeze(1)
    vectors = vectors.masked_fill(~mask.unsqueeze(-1), 0.0)
    return SignalSets(vectors, mask, labels, signal, float(strength), num_classes)


def _normal_cdf(x: Tensor) -> Tensor:
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def bayes_accuracy(sets: SignalSets, pooled: Literal["mean", "signal_mean"]) -> float:
    r"""The best expected accuracy of any classifier that sees only one pooled vector per set (two classes).

    * ``"mean"``: the masked mean of the set. Along :math:`(p_0 - p_1)/\sqrt 2` the classes sit at
      :math:`\pm k a / (\sqrt 2 L)` and the noise has standard deviation :math:`1/\sqrt L`, the rest carries no
      class, so the bound is :math:`\Phi(k a / \sqrt{2L})`, averaged over the sets' real lengths ``L``.
    * ``"signal_mean"``: the centroid of the signal vectors alone, the signal-optimal pool of the paper (an oracle
      that knows which vectors carry the signal): :math:`\Phi(a \sqrt{k/2})`.

    Args:
        sets: Sets from :func:`make_signal_sets` with ``num_classes=2``.
        pooled: Which pooled vector the classifier sees.

    Returns:
        The accuracy bound, in ``[0.5, 1]``.

    Raises:
        ValueError: More than two classes (no closed form) or an unknown ``pooled``.
    """
    if sets.num_classes != 2:
        raise ValueError(
            f"bayes_accuracy: the closed forms are for two classes, got num_classes={sets.num_classes}; "
            f"sample the sets with num_classes=2"
        )
    k, a = sets.num_signal, sets.strength
    if pooled == "mean":
        return _normal_cdf(k * a / torch.sqrt(2.0 * sets.lengths.double())).mean().item()
    if pooled == "signal_mean":
        return _normal_cdf(torch.tensor(a * math.sqrt(k / 2.0), dtype=torch.float64)).item()
    raise ValueError(f"bayes_accuracy: pooled must be 'mean' or 'signal_mean', got {pooled!r}")


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
    the classifier are initialised after ``torch.manual_seed(seed)`` and the batches shuffled by a generator
    seeded with ``seed``: the same arguments give the same result on one machine.

    Args:
        pooler: A registered pooler name (``"attention"``, ``"mean"``...) or a config dict, as
            :func:`attnpool.build_pooler` takes; not one that needs stacked layers or attention maps.
        train: Training sets.
        test: Test sets of the same task (same ``task_seed``, ``dim`` and classes).
        epochs: Passes over ``train``.
        lr: Peak learning rate.
        batch_size: Sets per step.
        weight_decay: AdamW's decoupled weight decay.
        seed: Seed of the initialisation and the shuffling.
        pooling_options: Constructor options of the pooler, e.g. ``{"attn_size": 32}``.

    Returns:
        Test and train accuracy, the weight on the signal vectors, the time taken and the trained modules.

    Raises:
        ValueError: Train and test sets that do not match, a pooler that needs other inputs, bad settings.
    """
    where = "train_pooler_on_sets"
    _check_int(where, "epochs", epochs, 1)
    _check_int(where, "batch_size", batch_size, 1)
    if not lr > 0:
        raise ValueError(f"{where}: lr must be > 0, got {lr!r}")
    if (train.dim, train.num_classes) != (test.dim, test.num_classes):
        raise ValueError(
            f"{where}: train sets have dim={train.dim}, num_classes={train.num_classes} but test sets have "
            f"dim={test.dim}, num_classes={test.num_classes}; sample both with the same dim, num_classes and "
            f"task_seed"
        )
    start = time.perf_counter()
    torch.manual_seed(seed)
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
            logits = classifier(model(train.vectors[batch], train.mask[batch]))  # (B, C)
            loss = F_nn.cross_entropy(logits, train.labels[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    train_accuracy, _ = _evaluate(model, classifier, train, 4 * batch_size)
    accuracy, signal_weight = _evaluate(model, classifier, test, 4 * batch_size)
    return PoolerFit(accuracy, train_accuracy, signal_weight, time.perf_counter() - start, model, classifier)


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
        poolers: Pooler names, e.g. ``["mean", "max", "attention"]``.
        set_sizes: Largest set sizes ``T``.
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
        pooling_options: Options per pooler name, e.g. ``{"attention": {"attn_size": 32}}``.
        progress: Called with each row as soon as it is measured.

    Returns:
        Rows with keys ``pooler``, ``set_size``, ``num_signal``, ``snr`` (``k / T``, the nominal signal fraction
        of a full set), ``mean_snr`` (``k / L`` averaged over the test sets), ``seed``, ``accuracy``,
        ``train_accuracy``, ``signal_weight`` (``None`` without token weights), ``seconds`` and, for two classes,
        the closed-form limits ``mean_bound`` and ``signal_mean_bound`` of :func:`bayes_accuracy`.
    """
    options = dict(pooling_options or {})
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
                        pooling_options=options.get(name),
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
