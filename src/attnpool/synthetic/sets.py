"""Sets of vectors in which a few signal vectors decide the class among noise: the generator and its Bayes bounds."""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor


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
        task_seed: The ``task_seed`` of the marker and prototypes; ``None`` when unknown (sets built by hand).
        seed: The ``seed`` of the sampling; ``None`` when unknown. Train and test sets of one task share
            ``task_seed`` and differ in ``seed``.
    """

    vectors: Tensor
    mask: Tensor
    labels: Tensor
    signal: Tensor
    strength: float
    num_classes: int
    task_seed: int | None = None
    seed: int | None = None

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


def check_int(where: str, name: str, value: object, minimum: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer >= ``minimum``; else ``ValueError`` naming ``where`` and ``name``.

    Any integer type is taken (``numpy.int64`` from an array too), not ``bool``; ``minimum=None`` takes any integer.
    """
    # numbers.Integral covers numpy's integers, which are not subclasses of int.
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or (
            minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{where}: {name} must be an integer{bound}, got {value!r}")
    return operator.index(value)


def check_dim(where: str, dim: int, num_classes: int) -> None:
    """``ValueError`` unless ``dim`` holds the marker and ``num_classes`` orthonormal prototypes."""
    if dim < num_classes + 1:
        raise ValueError(
            f"{where}: dim={dim} is too small for num_classes={num_classes}; the marker and the {num_classes} class "
            f"prototypes are orthonormal, so dim must be >= {num_classes + 1}"
        )


def task_directions(dim: int, num_classes: int, task_seed: int = 0) -> tuple[Tensor, Tensor]:
    """The marker ``(D,)`` and class prototypes ``(C, D)``: orthonormal, the same for every call with these args.

    Args:
        dim: ``D``; at least ``num_classes + 1``.
        num_classes: ``C``.
        task_seed: Seed of the directions; train and test sets of one task must share it.

    Returns:
        ``(marker, prototypes)``, float32.

    Raises:
        ValueError: ``dim`` below ``num_classes + 1`` (there would be fewer prototypes than classes) or an argument
            that is not an integer.
    """
    where = "task_directions"
    dim = check_int(where, "dim", dim, 1)
    num_classes = check_int(where, "num_classes", num_classes, 1)
    task_seed = check_int(where, "task_seed", task_seed)
    check_dim(where, dim, num_classes)
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
        seed: Seed of the sampling (lengths, labels, positions, noise); use different ones for train and test
            (:func:`~attnpool.synthetic.train_pooler_on_sets` refuses sets of the same draw).
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
    set_size = check_int(where, "set_size", set_size, 1)
    num_signal = check_int(where, "num_signal", num_signal, 1)
    num_classes = check_int(where, "num_classes", num_classes, 2)
    num_sets = check_int(where, "num_sets", num_sets, 1)
    dim = check_int(where, "dim", dim, 1)
    seed = check_int(where, "seed", seed)
    task_seed = check_int(where, "task_seed", task_seed)
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
    check_dim(where, dim, num_classes)
    # numbers.Real covers numpy's floats of any width (numpy.float32 is not a subclass of float).
    if not isinstance(strength, numbers.Real) or isinstance(strength, bool) or not 0 < strength < math.inf:
        raise ValueError(
            f"{where}: strength must be a finite number > 0 (the signal's size in noise standard deviations, "
            f"e.g. 4.0), got {strength!r}"
        )

    strength = float(strength)
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
    return SignalSets(vectors, mask, labels, signal, strength, num_classes, task_seed, seed)


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
