"""HopfieldNetwork: the modern update is the softmax local mean; the classical network follows
Hopfield's 1982 rule and its capacity."""
import warnings

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_estimator

from localkit import HopfieldNetwork
from localkit.exceptions import LocalkitConvergenceWarning


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return np.where(X > X.mean(axis=0), 1.0, -1.0)  # binarised, bipolar


def bipolar(rng, shape):
    return rng.choice([-1.0, 1.0], size=shape)


def flip(rng, X, rate):
    return X * np.where(rng.random(X.shape) < rate, -1.0, 1.0)


@pytest.mark.parametrize("beta", [0.05, 0.5, 4.0])
def test_one_modern_step_is_the_softmax_formula(digits, rng, beta):
    X = digits[:200]
    probes = flip(rng, X[:20], 0.2)
    one = HopfieldNetwork(beta=beta, max_iter=1).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        got = one.predict(probes)
    expected = np.stack([X.T @ softmax(beta * X @ xi) for xi in probes])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)


def test_modern_retrieval_stores_many_correlated_patterns(digits, rng):
    X = digits[:300]  # 300 patterns in 64 units: far beyond the classical capacity
    probes = flip(rng, X, 0.1)
    with pytest.warns(LocalkitConvergenceWarning, match="still moving") as rec:  # a few probes cycle
        out = HopfieldNetwork(beta=1.0, tol=1e-6).fit(X).retrieve(probes)
    assert rec[0].message.n_unconverged == np.sum(~out.converged) and rec[0].message.n_rows == len(X)
    assert out.converged.mean() > 0.95 and np.median(out.row_iter) <= 4
    nearest = np.argmax(np.sign(out.state) @ X.T, axis=1)
    assert (nearest == np.arange(len(X))).mean() > 0.9


def test_modern_energy_never_increases_along_retrieval(digits, rng):
    net = HopfieldNetwork(beta=0.3).fit(digits[:100])
    with pytest.warns(LocalkitConvergenceWarning, match="still moving"):  # a probe that has not settled
        states = net.retrieve(flip(rng, digits[:10], 0.3) * 0.5, history=True).history
    energies = np.array([net.energy(s) for s in states])
    assert np.all(np.diff(energies, axis=0) <= 1e-9)


def test_classical_weights_are_hebbian_with_zero_diagonal(rng):
    X = bipolar(rng, (5, 40))
    W = HopfieldNetwork(kind="classical").fit(X).weights_
    expected = sum(np.outer(x, x) for x in X) / 40
    np.fill_diagonal(expected, 0)
    np.testing.assert_allclose(W, expected, atol=1e-15)


def test_classical_synchronous_step_is_sign_of_the_field(rng):
    X = bipolar(rng, (6, 50))
    net = HopfieldNetwork(kind="classical", max_iter=1).fit(X)
    probes = flip(rng, X, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        got = net.predict(probes)
    field = probes @ net.weights_
    np.testing.assert_array_equal(got, np.where(field > 0, 1, np.where(field < 0, -1, probes)))


@pytest.mark.parametrize("update", ["synchronous", "asynchronous"])
def test_classical_capacity(rng, update):
    n = 200
    recall = {}
    for load in (0.05, 0.5):
        X = bipolar(rng, (int(load * n), n))
        net = HopfieldNetwork(kind="classical", update=update, random_state=0).fit(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            out = net.predict(flip(rng, X, 0.05))
        recall[load] = (out == X).all(axis=1).mean()
    assert recall[0.05] == 1.0   # well below 0.14 N: every pattern recalled exactly
    assert recall[0.5] == 0.0    # far above: none


def test_asynchronous_updates_never_increase_the_energy(rng):
    X = bipolar(rng, (30, 100))
    net = HopfieldNetwork(kind="classical", update="asynchronous", random_state=1).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        states = net.retrieve(bipolar(rng, (8, 100)), history=True).history
    energies = np.array([net.energy(s) for s in states])
    assert np.all(np.diff(energies, axis=0) <= 1e-12)
    assert np.all(energies[-1] < energies[0])


@pytest.mark.parametrize("params, match", [
    (dict(kind="sparse"), "kind"),
    (dict(beta=0.0), "beta"),
    (dict(beta=-1.0), "beta"),
    (dict(max_iter=0), "max_iter"),
    (dict(tol=-1e-3), "tol"),
    (dict(update="random"), "update"),
])
def test_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        HopfieldNetwork(**params).fit(np.ones((2, 4)))


def test_bad_patterns_and_probes(rng):
    with pytest.raises(ValueError, match="2D"):
        HopfieldNetwork().fit(np.ones(4))
    with pytest.raises(ValueError, match="dim"):
        HopfieldNetwork().fit(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="NaN|infinity"):
        HopfieldNetwork().fit([[np.nan, 1.0]])
    with pytest.raises(ValueError, match="bipolar"):
        HopfieldNetwork(kind="classical").fit([[0.0, 1.0]])
    net = HopfieldNetwork(kind="classical").fit(bipolar(rng, (3, 8)))
    with pytest.raises(ValueError, match="features"):
        net.predict(np.ones((2, 5)))
    with pytest.raises(ValueError, match="bipolar"):
        net.predict(np.full((1, 8), 0.5))
    with pytest.raises(ValueError, match="features"):
        HopfieldNetwork().fit(np.ones((3, 8))).energy(np.ones((1, 7)))


def test_check_estimator():
    check_estimator(HopfieldNetwork())


def _digit_probes(rng=None):
    """One binarised (+1/-1) pattern per digit, five probes each with 15% of the pixels flipped."""
    data = load_digits()
    rows = [np.flatnonzero(data.target == c)[0] for c in range(10)]
    P = np.where(data.data[rows] > 7, 1.0, -1.0)
    rng = np.random.default_rng(0) if rng is None else rng
    probes = np.repeat(P, 5, axis=0)
    return P, flip(rng, probes, 0.15)


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.2, 0.5])
def test_float32_default_tolerance_converges_and_agrees_with_float64(beta):
    # tol=1e-8 (the old default) is below float32's resolution: at beta=0.2, 5 of these 50 probes
    # oscillated at round-off until max_iter and warned; the default now follows the dtype
    P, probes = _digit_probes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fp32 = HopfieldNetwork(beta=beta).fit(P.astype(np.float32)).retrieve(probes.astype(np.float32))
    ref = HopfieldNetwork(beta=beta).fit(P).predict(probes)
    assert fp32.state.dtype == np.float32 and np.all(fp32.converged)
    np.testing.assert_allclose(fp32.state, ref, rtol=0, atol=1e-5)


def test_default_tolerance_is_1e8_in_float64_and_scaled_epsilons_in_float32():
    P, probes = _digit_probes()
    net = HopfieldNetwork(beta=0.2).fit(P)
    assert net._tolerance(np.float64) == 1e-8
    assert net._tolerance(np.float32) == 16 * np.finfo(np.float32).eps  # |x_mu| = 1
    assert HopfieldNetwork().fit(16 * P)._tolerance(np.float32) == 16 * 16 * np.finfo(np.float32).eps
    # float64 retrieval is what tol=1e-8 gave, iteration for iteration
    a, b = net.retrieve(probes), HopfieldNetwork(beta=0.2, tol=1e-8).fit(P).retrieve(probes)
    np.testing.assert_array_equal(a.state, b.state)
    np.testing.assert_array_equal(a.row_iter, b.row_iter)


def test_an_explicit_tolerance_is_used_as_given():
    """An explicit ``tol`` reaches the fixed-point driver unchanged in float32: 1e-8 (below the
    default 16 eps) takes at least as many updates per row as the default, and more in all; a
    tolerance above any move stops every row after its first update. (Whether 1e-8 also
    oscillates at round-off until ``max_iter`` depends on the BLAS kernel's float32 rounding: it
    did on one machine, not on another, so that is not what this test asserts.)"""
    P, probes = _digit_probes()
    net = HopfieldNetwork(beta=0.2, tol=1e-8).fit(P.astype(np.float32))
    assert net._tolerance(np.float32) == 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        tight = net.retrieve(probes.astype(np.float32))
        default = HopfieldNetwork(beta=0.2).fit(P.astype(np.float32)).retrieve(probes.astype(np.float32))
    assert np.all(tight.row_iter >= default.row_iter) and tight.row_iter.sum() > default.row_iter.sum()
    loose = HopfieldNetwork(beta=0.2, tol=1e3).fit(P.astype(np.float32)).retrieve(probes.astype(np.float32))
    assert np.all(loose.row_iter == 1)
