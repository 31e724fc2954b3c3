"""attnpool.synthetic: the signal-among-distractors sets, their closed-form limits, training and the sweep."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from attnpool.synthetic import (
    SignalSets,
    bayes_accuracy,
    make_signal_sets,
    snr_sweep,
    task_directions,
    train_pooler_on_sets,
)

# A rare-signal task that one thread trains in well under a second per pooler: 1 signal vector in 32 to 64.
RARE = {"set_size": 64, "num_signal": 1, "dim": 16, "strength": 4.0}
TRAIN = {"epochs": 30, "lr": 1e-2}
ATTENTION_OPTIONS = {"attn_size": 16}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny ops: with the cores shared, OpenMP threads waiting on each other make these runs many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rare_task(seed: int) -> tuple[SignalSets, SignalSets]:
    train = make_signal_sets(1024, **RARE, seed=2 * seed, task_seed=seed)
    test = make_signal_sets(1024, **RARE, seed=2 * seed + 1, task_seed=seed)
    return train, test


@pytest.fixture(scope="module")
def rare_fits():
    """Test accuracy of mean and attention pooling, and the mean-pooling bound, on the rare task for 3 seeds."""
    fits = {}
    for seed in (0, 1, 2):
        train, test = rare_task(seed)
        mean = train_pooler_on_sets("mean", train, test, seed=seed, **TRAIN)
        attention = train_pooler_on_sets(
            "attention", train, test, seed=seed, pooling_options=ATTENTION_OPTIONS, **TRAIN
        )
        fits[seed] = (mean, attention, bayes_accuracy(test, "mean"))
    return fits


class TestMakeSignalSets:
    def test_shapes_and_dtypes(self):
        sets = make_signal_sets(10, set_size=12, num_signal=3, dim=5, seed=0)
        assert sets.vectors.shape == (10, 12, 5) and sets.vectors.dtype == torch.float32
        assert sets.mask.shape == sets.signal.shape == (10, 12)
        assert sets.mask.dtype == sets.signal.dtype == torch.bool
        assert sets.labels.shape == (10,) and sets.labels.dtype == torch.int64
        assert (len(sets), sets.set_size, sets.dim, sets.num_signal) == (10, 12, 5, 3)

    def test_labels_balanced(self):
        sets = make_signal_sets(301, set_size=8, num_signal=1, dim=8, num_classes=3, seed=0)
        counts = torch.bincount(sets.labels, minlength=3)
        assert counts.tolist() in ([101, 100, 100], [100, 101, 100], [100, 100, 101])

    def test_each_set_has_num_signal_real_signal_vectors(self):
        sets = make_signal_sets(200, set_size=20, num_signal=4, dim=4, seed=1)
        assert (sets.signal.sum(dim=1) == 4).all()
        assert not (sets.signal & ~sets.mask).any(), "a padded position is marked as signal"
        # Positions are spread over the set, not always the first ones.
        assert sets.signal.float().mean(dim=0)[:10].min() > 0

    def test_variable_lengths_are_padded_with_zeros(self):
        sets = make_signal_sets(200, set_size=20, num_signal=4, dim=4, seed=1)
        lengths = sets.lengths
        assert lengths.min() >= 10 and lengths.max() <= 20 and lengths.unique().numel() > 5
        assert torch.equal(sets.mask, torch.arange(20) < lengths.unsqueeze(1)), "mask must be a prefix"
        assert (sets.vectors[~sets.mask] == 0).all()
        assert (sets.vectors[sets.mask] != 0).all()
        assert sets.snr == pytest.approx((4 / lengths.double()).mean().item())

    def test_shortest_set_still_holds_every_signal_vector(self):
        sets = make_signal_sets(100, set_size=10, num_signal=8, dim=4, seed=0)
        assert sets.lengths.min() >= 8
        assert (sets.signal.sum(dim=1) == 8).all()

    def test_fixed_length(self):
        sets = make_signal_sets(20, set_size=7, num_signal=2, dim=4, seed=0, variable_length=False)
        assert sets.mask.all()
        assert sets.snr == pytest.approx(2 / 7)

    def test_same_seed_same_sets_other_seed_other_sets(self):
        a = make_signal_sets(16, set_size=9, num_signal=2, dim=6, seed=3)
        b = make_signal_sets(16, set_size=9, num_signal=2, dim=6, seed=3)
        c = make_signal_sets(16, set_size=9, num_signal=2, dim=6, seed=4)
        for name in ("vectors", "mask", "labels", "signal"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert not torch.equal(a.vectors, c.vectors)

    def test_directions_are_orthonormal_and_fixed_by_task_seed(self):
        marker, prototypes = task_directions(8, 3, task_seed=5)
        basis = torch.cat([marker.unsqueeze(0), prototypes])  # (4, 8)
        torch.testing.assert_close(basis @ basis.T, torch.eye(4), atol=1e-5, rtol=0)
        again, _ = task_directions(8, 3, task_seed=5)
        other, _ = task_directions(8, 3, task_seed=6)
        assert torch.equal(marker, again) and not torch.allclose(marker, other)

    def test_only_signal_vectors_carry_the_class(self):
        strength = 2.5
        sets = make_signal_sets(4000, set_size=10, num_signal=2, dim=8, strength=strength, seed=0, task_seed=7)
        marker, prototypes = task_directions(8, 2, task_seed=7)
        own = prototypes[sets.labels].unsqueeze(1).expand(-1, 10, -1)  # (N, T, D)
        other = prototypes[1 - sets.labels].unsqueeze(1).expand(-1, 10, -1)
        signal, noise = sets.signal, sets.mask & ~sets.signal
        x = sets.vectors
        # Signal: noise plus strength along the marker and the own class prototype, nothing along the other.
        assert (x[signal] @ marker).mean().item() == pytest.approx(strength, abs=0.05)
        assert (x[signal] * own[signal]).sum(-1).mean().item() == pytest.approx(strength, abs=0.05)
        assert (x[signal] * other[signal]).sum(-1).mean().item() == pytest.approx(0.0, abs=0.05)
        # Distractors: standard normal noise, the same for both classes.
        assert (x[noise] @ marker).mean().item() == pytest.approx(0.0, abs=0.03)
        assert (x[noise] * own[noise]).sum(-1).mean().item() == pytest.approx(0.0, abs=0.03)
        assert x[noise].std().item() == pytest.approx(1.0, abs=0.02)

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"num_signal": 9}, r"num_signal=9 is larger than set_size=8.*lower num_signal or raise set_size"),
            ({"num_signal": 0}, r"num_signal must be an integer >= 1, got 0"),
            ({"strength": 0.0}, r"strength must be a finite number > 0.*got 0.0"),
            ({"strength": -1.0}, r"strength must be a finite number > 0"),
            ({"strength": math.inf}, r"strength must be a finite number > 0"),
            ({"dim": 2}, r"dim=2 is too small for num_classes=2.*dim must be >= 3"),
            ({"num_sets": 1}, r"num_sets=1 is smaller than num_classes=2.*raise num_sets"),
            ({"num_classes": 1}, r"num_classes must be an integer >= 2, got 1"),
            ({"set_size": 2.5}, r"set_size must be an integer >= 1, got 2.5"),
        ],
    )
    def test_bad_arguments_say_what_and_how_to_fix(self, kwargs, message):
        args = {"num_sets": 4, "set_size": 8, "num_signal": 2, "dim": 4, **kwargs}
        with pytest.raises(ValueError, match=r"make_signal_sets: " + message):
            make_signal_sets(**args)

    def test_numpy_numbers_are_taken_like_python_ones(self):
        """np.int64(8) was refused as "set_size must be an integer >= 1, got np.int64(8)", a numpy seed by torch."""
        plain = make_signal_sets(6, set_size=8, num_signal=2, dim=4, strength=2.0, seed=3, task_seed=1)
        numpy = make_signal_sets(
            np.int64(6), set_size=np.int64(8), num_signal=np.int32(2), dim=np.int64(4), strength=np.float32(2.0),
            num_classes=np.int64(2), seed=np.int64(3), task_seed=np.uint8(1),
        )
        for name in ("vectors", "mask", "labels", "signal"):
            assert torch.equal(getattr(plain, name), getattr(numpy, name)), name
        assert type(numpy.strength) is float and type(numpy.seed) is int and type(numpy.task_seed) is int

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"seed": 1.5}, r"seed must be an integer, got 1\.5"),
        ({"task_seed": "0"}, r"task_seed must be an integer, got '0'"),
        ({"set_size": True}, r"set_size must be an integer >= 1, got True"),
    ])
    def test_seeds_must_be_integers(self, kwargs, message):
        with pytest.raises(ValueError, match=r"make_signal_sets: " + message):
            make_signal_sets(**{"num_sets": 4, "set_size": 8, "num_signal": 2, "dim": 4, **kwargs})

    def test_the_sets_record_their_seeds(self):
        sets = make_signal_sets(4, set_size=8, num_signal=2, dim=4, seed=5, task_seed=7)
        assert (sets.seed, sets.task_seed) == (5, 7)

    def test_task_directions_refuses_fewer_dimensions_than_directions(self):
        """task_directions(2, 3) returned 1 prototype for 3 classes."""
        with pytest.raises(ValueError, match=r"task_directions: dim=2 is too small for num_classes=3.*must be >= 4"):
            task_directions(2, 3)
        with pytest.raises(ValueError, match=r"task_directions: dim=3 is too small.*>= 4"):
            task_directions(3, 3)
        assert task_directions(np.int64(4), 3)[1].shape == (3, 4)


def phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


class TestBayesAccuracy:
    def test_closed_forms_on_fixed_length_sets(self):
        sets = make_signal_sets(8, set_size=50, num_signal=2, dim=4, strength=3.0, variable_length=False)
        assert bayes_accuracy(sets, "mean") == pytest.approx(phi(2 * 3.0 / math.sqrt(2 * 50)))
        assert bayes_accuracy(sets, "signal_mean") == pytest.approx(phi(3.0 * math.sqrt(2 / 2)))

    def test_rarer_signal_lowers_the_mean_bound_only(self):
        common = make_signal_sets(64, set_size=64, num_signal=8, dim=4, variable_length=False)
        rare = make_signal_sets(64, set_size=256, num_signal=8, dim=4, variable_length=False)
        assert bayes_accuracy(rare, "mean") < bayes_accuracy(common, "mean")
        assert bayes_accuracy(rare, "signal_mean") == bayes_accuracy(common, "signal_mean")

    def test_errors(self):
        three = make_signal_sets(6, set_size=4, num_signal=1, dim=4, num_classes=3)
        with pytest.raises(ValueError, match="closed forms are for two classes, got num_classes=3"):
            bayes_accuracy(three, "mean")
        two = make_signal_sets(6, set_size=4, num_signal=1, dim=4)
        with pytest.raises(ValueError, match="pooled must be 'mean' or 'signal_mean', got 'max'"):
            bayes_accuracy(two, "max")


class TestTrainPoolerOnSets:
    def test_attention_beats_mean_when_the_signal_is_rare(self, rare_fits):
        for seed, (mean, attention, _) in rare_fits.items():
            assert attention.accuracy - mean.accuracy > 0.2, (seed, mean.accuracy, attention.accuracy)
            assert attention.accuracy > 0.9, (seed, attention.accuracy)
            # It got there by weighting the signal vector far above its 1/L share.
            assert attention.signal_weight > 0.3, (seed, attention.signal_weight)

    def test_mean_pooling_reaches_but_cannot_beat_its_bound(self, rare_fits):
        for seed, (mean, _, bound) in rare_fits.items():
            assert bound - 0.06 < mean.accuracy < bound + 0.05, (seed, mean.accuracy, bound)

    def test_mean_pooling_signal_weight_is_k_over_length(self, rare_fits):
        _, test = rare_task(0)
        mean, _, _ = rare_fits[0]
        assert mean.signal_weight == pytest.approx(test.snr, rel=1e-5)

    def test_same_seed_same_result(self):
        train, test = rare_task(0)
        train = SignalSets(train.vectors[:256], train.mask[:256], train.labels[:256], train.signal[:256], 4.0, 2)
        runs = [
            train_pooler_on_sets("attention", train, test, epochs=2, seed=1, pooling_options=ATTENTION_OPTIONS)
            for _ in range(2)
        ]
        assert runs[0].accuracy == runs[1].accuracy
        for a, b in zip(runs[0].pooler.parameters(), runs[1].pooler.parameters(), strict=True):
            assert torch.equal(a, b)

    def test_max_pooling_has_no_signal_weight(self):
        train, test = rare_task(0)
        fit = train_pooler_on_sets("max", train, test, epochs=1)
        assert fit.signal_weight is None
        assert 0.0 <= fit.accuracy <= 1.0 and 0.0 <= fit.train_accuracy <= 1.0

    def test_pooler_needing_other_inputs_is_refused(self):
        train, test = rare_task(0)
        with pytest.raises(ValueError, match=r"'weighted_layer' needs stacked encoder layers.*e\.g\. 'attention'"):
            train_pooler_on_sets("weighted_layer", train, test, epochs=1, pooling_options={"num_layers": 2})

    def test_mismatched_train_and_test_are_refused(self):
        train, _ = rare_task(0)
        test = make_signal_sets(8, set_size=64, num_signal=1, dim=8)
        with pytest.raises(ValueError, match="train sets have dim=16.*test sets have dim=8.*same dim"):
            train_pooler_on_sets("mean", train, test, epochs=1)

    def test_train_and_test_sets_of_different_tasks_are_refused(self):
        """Other task_seed: other marker and prototypes; the docstring promised a ValueError, training went ahead."""
        train, _ = rare_task(0)
        _, other_task = rare_task(1)
        with pytest.raises(ValueError, match=r"train sets have task_seed=0 but test sets have task_seed=1.*"
                                             r"sample both with the same task_seed"):
            train_pooler_on_sets("mean", train, other_task, epochs=1)

    def test_test_sets_of_the_same_draw_as_the_train_sets_are_refused(self):
        """seed and task_seed both default to 0: two calls with the same num_sets gave test sets equal to train."""
        train = make_signal_sets(8, set_size=4, num_signal=1, dim=4)
        test = make_signal_sets(8, set_size=4, num_signal=1, dim=4)
        assert torch.equal(train.vectors, test.vectors)
        with pytest.raises(ValueError, match=r"the train and test sets are the same sets \(seed=0, task_seed=0\).*"
                                             r"sample the test sets with another seed, e\.g\. seed=1"):
            train_pooler_on_sets("mean", train, test, epochs=1)
        other = make_signal_sets(8, set_size=4, num_signal=1, dim=4, seed=1)
        assert 0.0 <= train_pooler_on_sets("mean", train, other, epochs=1).accuracy <= 1.0
        longer = make_signal_sets(8, set_size=16, num_signal=1, dim=4)  # seed 0 too, other data: a length test
        assert 0.0 <= train_pooler_on_sets("mean", train, longer, epochs=1).accuracy <= 1.0

    def test_the_callers_random_state_is_left_alone(self):
        """torch.manual_seed(seed) inside reset the caller's generator: its later draws no longer followed its seed."""
        train, test = rare_task(0)
        torch.manual_seed(123)
        expected = torch.rand(4)
        cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        torch.manual_seed(123)
        fit = train_pooler_on_sets("attention", train, test, epochs=1, seed=7, pooling_options=ATTENTION_OPTIONS)
        assert torch.equal(torch.rand(4), expected)
        if cuda_state is not None:
            assert all(map(torch.equal, torch.cuda.get_rng_state_all(), cuda_state))
        # ... and the call itself still depends on its own seed only.
        again = train_pooler_on_sets("attention", train, test, epochs=1, seed=7, pooling_options=ATTENTION_OPTIONS)
        for a, b in zip(fit.pooler.parameters(), again.pooler.parameters(), strict=True):
            assert torch.equal(a, b)

    def test_bad_settings_are_refused(self):
        train, test = rare_task(0)
        with pytest.raises(ValueError, match="epochs must be an integer >= 1, got 0"):
            train_pooler_on_sets("mean", train, test, epochs=0)
        with pytest.raises(ValueError, match="lr must be > 0, got 0"):
            train_pooler_on_sets("mean", train, test, lr=0)


def test_snr_sweep_rows():
    seen = []
    rows = snr_sweep(
        ["mean", "max"],
        set_sizes=[4, 8],
        num_signals=[1, 6],
        seeds=[0, 1],
        dim=4,
        num_train=32,
        num_test=16,
        epochs=1,
        progress=seen.append,
    )
    # num_signal=6 does not fit sets of 4: skipped.
    assert len(rows) == 2 * (1 + 2) * 2 and seen == rows
    assert {(r["set_size"], r["num_signal"]) for r in rows} == {(4, 1), (8, 1), (8, 6)}
    row = next(r for r in rows if (r["pooler"], r["set_size"], r["num_signal"], r["seed"]) == ("mean", 8, 6, 1))
    assert row["snr"] == 6 / 8 and 6 / 8 <= row["mean_snr"] <= 1
    assert set(row) >= {"accuracy", "train_accuracy", "signal_weight", "seconds", "mean_bound", "signal_mean_bound"}
    assert next(r for r in rows if r["pooler"] == "max")["signal_weight"] is None


def test_snr_sweep_takes_generators_and_numpy_arrays():
    """Generators were used up by the first pass of the outer loop (2 rows instead of 8); numpy sizes were refused."""
    rows = snr_sweep(
        ["mean"],
        set_sizes=np.array([4, 8]),
        num_signals=(k for k in (1, 2)),
        seeds=(seed for seed in (0, 1)),
        dim=4,
        num_train=16,
        num_test=8,
        epochs=1,
    )
    assert [(r["set_size"], r["num_signal"], r["seed"]) for r in rows] == [
        (size, k, seed) for size in (4, 8) for k in (1, 2) for seed in (0, 1)
    ]
    assert all(type(r["set_size"]) is int for r in rows)


def test_snr_sweep_refuses_a_set_size_that_is_not_an_integer():
    with pytest.raises(ValueError, match=r"snr_sweep: a set size must be an integer >= 1, got 2\.5"):
        snr_sweep(["mean"], set_sizes=[2.5], num_signals=[1], epochs=1)


def test_a_poolers_regulariser_is_added_to_the_sets_training_loss():
    """multihead_attention's penalty was never added here: penalty 10 trained exactly as penalty 0."""
    train = make_signal_sets(64, set_size=8, num_signal=1, dim=8, seed=1)
    test = make_signal_sets(32, set_size=8, num_signal=1, dim=8, seed=2)
    fits = [train_pooler_on_sets("multihead_attention", train, test, epochs=2, seed=0,
                                 pooling_options={"num_heads": 2, "penalty": penalty}) for penalty in (0.0, 10.0)]
    plain, penalised = (dict(fit.pooler.named_parameters()) for fit in fits)
    assert any(not torch.equal(plain[name], penalised[name]) for name in plain)


@pytest.fixture
def trained(monkeypatch):
    """The poolers ``snr_sweep`` trains and the options each got, none trained (a fit of accuracy 0.5)."""
    fitting = importlib.import_module("attnpool.synthetic.fitting")
    calls = []

    def fake(name, train, test, *, pooling_options=None, **_):
        calls.append((name, pooling_options))
        return fitting.PoolerFit(0.5, 0.5, None, 0.0, None, None)

    monkeypatch.setattr(fitting, "train_pooler_on_sets", fake)
    return calls


SMALL = {"set_sizes": [4], "num_signals": [1], "seeds": [0], "dim": 4, "num_train": 8, "num_test": 8}


def test_snr_sweep_takes_one_pooler_name_as_a_list_of_one(trained):
    """`snr_sweep("mean", ...)` swept its letters: "Unknown pooler 'm'"."""
    rows = snr_sweep("mean", **SMALL)
    assert [r["pooler"] for r in rows] == ["mean"] and trained == [("mean", None)]


def test_snr_sweep_matches_pooling_options_to_poolers_as_the_registry_does(trained):
    """'Attention' and 'multihead-attention' got no options: they were looked up by their exact spelling."""
    snr_sweep(["Attention", "multihead-attention", "mean"], **SMALL,
              pooling_options={"attention": {"attn_size": 3}, "multihead_attention": {"num_heads": 2}})
    assert trained == [("Attention", {"attn_size": 3}), ("multihead-attention", {"num_heads": 2}), ("mean", None)]


@pytest.mark.parametrize(("options", "message"), [
    ({"atention": {"attn_size": 3}}, r"^snr_sweep: pooling_options key 'atention': Unknown pooler 'atention'\. Did "
                                     r"you mean 'attention'\?"),
    ({"attention": {"attn_size": 3}}, r"^snr_sweep: pooling_options key 'attention' names none of the poolers "
                                      r"swept \(mean, max\): its options would be ignored; key them by a swept "
                                      r"pooler's name$"),
    ({"max": {}, "Max_Pooling": {}}, r"^snr_sweep: pooling_options keys 'max' and 'Max_Pooling' name the same pooler "
                                     r"'max': give its options under one key$"),
])
def test_snr_sweep_refuses_pooling_options_of_no_pooler_swept(trained, options, message):
    with pytest.raises(ValueError, match=message):
        snr_sweep(["mean", "max"], **SMALL, pooling_options=options)
    assert trained == []
