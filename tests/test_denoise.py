"""The local-mean denoiser (posterior mean) and the lazy autoencoder (unsupervised kernel regression)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax
from sklearn.datasets import load_digits, make_swiss_roll
from sklearn.decomposition import PCA
from sklearn.utils.estimator_checks import check_estimator

from localkit import LazyAutoencoder, LocalMeanDenoiser, local_mean
from localkit.exceptions import LocalkitConvergenceWarning
from localkit.engine.reconstruction import reconstruction_gradient


# -- LocalMeanDenoiser ---------------------------------------------------------------------------

def test_is_the_exact_posterior_mean(rng):
    clean = rng.normal(size=(30, 5))
    noisy = clean[rng.integers(0, 30, size=12)] + 0.7 * rng.normal(size=(12, 5))
    # Bayes: P(x_i | y) proportional to N(y; x_i, sigma^2 I) with a uniform prior on the x_i
    log_lik = -((noisy[:, None, :] - clean[None]) ** 2).sum(-1) / (2 * 0.7**2)
    posterior_mean = softmax(log_lik, axis=1) @ clean
    out = LocalMeanDenoiser(noise_std=0.7).fit(clean).transform(noisy)
    np.testing.assert_allclose(out, posterior_mean, rtol=0, atol=1e-12)
    # a tiny noise level: the nearest clean sample, never 0/0
    nearest = clean[np.argmin(-log_lik, axis=1)]
    np.testing.assert_allclose(LocalMeanDenoiser(noise_std=1e-4).fit(clean).transform(noisy), nearest, atol=1e-12)


@pytest.fixture(scope="module")
def digits_noisy():
    X = load_digits().data / 16.0
    rng = np.random.default_rng(0)
    clean = X[rng.choice(len(X), 500, replace=False)]  # drawn from the prior: the data set itself
    return X, clean, clean + 0.4 * rng.standard_normal(clean.shape)


def test_beats_pca_and_the_width_is_optimal_on_digits(digits_noisy):
    X, clean, noisy = digits_noisy
    mse = lambda est: np.mean((est - clean) ** 2)
    ours = mse(LocalMeanDenoiser(noise_std=0.4).fit(X).transform(noisy))
    best_pca = min(mse(p.inverse_transform(p.transform(noisy)))
                   for p in (PCA(k).fit(X) for k in (5, 10, 15, 20, 30)))
    assert ours < 0.5 * best_pca
    # the posterior mean minimises the expected squared error: other widths do worse
    for factor in (0.7, 1.4):
        assert ours < mse(LocalMeanDenoiser(noise_std=0.4 * factor).fit(X).transform(noisy))


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_denoiser_ignores_the_order_of_the_clean_samples(seed):
    rng = np.random.default_rng(seed)
    clean, noisy = rng.normal(size=(25, 3)), rng.normal(size=(6, 3))
    out = LocalMeanDenoiser(0.8).fit(clean).transform(noisy)
    np.testing.assert_allclose(LocalMeanDenoiser(0.8).fit(clean[rng.permutation(25)]).transform(noisy), out,
                               rtol=0, atol=1e-12)


def test_iteration_is_mean_shift(rng):
    clean = rng.normal(size=(40, 2))
    noisy = rng.normal(size=(5, 2))
    once = local_mean(noisy, clean, clean, bandwidth=0.5)
    twice = local_mean(once, clean, clean, bandwidth=0.5)
    np.testing.assert_allclose(LocalMeanDenoiser(0.5, n_iter=2).fit(clean).transform(noisy), twice, atol=1e-12)


@pytest.mark.parametrize("params, match", [
    ({"noise_std": 0.0}, "noise_std"), ({"noise_std": -1.0}, "noise_std"), ({"noise_std": np.nan}, "noise_std"),
    ({"n_iter": 0}, "n_iter"), ({"kernel": "nope"}, "kernel"), ({"kernel": "softmax"}, "softmax"),
])
def test_denoiser_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        LocalMeanDenoiser(**params).fit(np.zeros((4, 2)))


def test_denoiser_bad_data():
    with pytest.raises(ValueError, match="NaN"):
        LocalMeanDenoiser().fit([[0.0, np.nan]])
    den = LocalMeanDenoiser().fit(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="features"):
        den.transform(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="infinity|NaN"):
        den.transform([[np.inf, 0.0]])


# -- the gradient of the leave-one-out reconstruction ----------------------------------------

@pytest.mark.parametrize("kernel", ["gaussian", "cauchy"])
@pytest.mark.parametrize("queries", [False, True])
def test_reconstruction_gradient_by_finite_differences(rng, kernel, queries):
    Z, X = rng.normal(size=(15, 2)), rng.normal(size=(15, 3))
    Q, T = rng.normal(size=(6, 2)), rng.normal(size=(6, 3))
    if queries:
        f = lambda q: reconstruction_gradient(Z, X, q.reshape(Q.shape), T, kernel=kernel, bandwidth=0.8)
        x0 = Q.ravel()
    else:
        f = lambda z: reconstruction_gradient(z.reshape(Z.shape), X, kernel=kernel, bandwidth=0.8)
        x0 = Z.ravel()
    _, grad = f(x0)
    eye = np.eye(len(x0)) * 1e-6
    numeric = np.array([(f(x0 + e)[0] - f(x0 - e)[0]) / 2e-6 for e in eye])
    np.testing.assert_allclose(grad.ravel(), numeric, rtol=0, atol=1e-7 * np.abs(numeric).max())


def test_reconstruction_error_is_the_engines_leave_one_out(rng):
    Z, X = rng.normal(size=(50, 2)), rng.normal(size=(50, 4))
    error, _ = reconstruction_gradient(Z, X, bandwidth=0.6, memory_budget=8 * 4 * 50 * 7)  # blocks of 7 rows
    loo = local_mean(Z, Z, X, bandwidth=0.6, exclude_self=True)
    assert error == pytest.approx(np.mean(np.sum((loo - X) ** 2, axis=1)), rel=1e-12)
    with pytest.raises(ValueError, match="kernel must be one of"):
        reconstruction_gradient(Z, X, kernel="epanechnikov")
    with pytest.raises(ValueError, match="'memory_budget' parameter of reconstruction_gradient"):
        reconstruction_gradient(Z, X, memory_budget=-1)  # was taken as blocks of one row
    with pytest.raises(TypeError, match="'per_query' parameter of reconstruction_gradient"):
        reconstruction_gradient(Z, X, Z, X, per_query="yes")


# -- LazyAutoencoder ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def swiss_fit():
    X, _ = make_swiss_roll(450, noise=0.2, random_state=0)
    train, test = X[:300], X[300:]
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=60"):  # 60 iterations: good enough, and quick
        return train, test, LazyAutoencoder(n_components=2, max_iter=60).fit(train)


def test_swiss_roll_reconstructs_clearly_better_than_pca(swiss_fit):
    train, test, ukr = swiss_fit
    pca = PCA(2).fit(train)
    err = lambda rec: np.mean(np.sum((rec - test) ** 2, axis=1))
    pca_err = err(pca.inverse_transform(pca.transform(test)))
    ukr_err = err(ukr.inverse_transform(ukr.transform(test)))
    assert ukr_err < 0.2 * pca_err  # held-out points, the same number of components
    assert ukr.reconstruction_error_ < ukr.init_error_  # the optimisation improves the PCA start


def test_decoder_is_the_local_mean_of_the_data(swiss_fit):
    train, _, ukr = swiss_fit
    Z = ukr.embedding_[:5] + 0.1
    K = np.exp(-0.5 * ((Z[:, None] - ukr.embedding_[None]) ** 2).sum(-1))
    np.testing.assert_allclose(ukr.inverse_transform(Z), (K @ train) / K.sum(1, keepdims=True), atol=1e-10)


@pytest.mark.parametrize("params, match", [
    ({"n_components": 0}, "n_components"), ({"n_components": 4}, "n_components"),
    ({"kernel": "epanechnikov"}, "kernel"), ({"max_iter": 0}, "max_iter"),
])
def test_autoencoder_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        LazyAutoencoder(**params).fit(np.random.default_rng(0).normal(size=(10, 3)))


def test_autoencoder_bad_data(swiss_fit):
    with pytest.raises(ValueError, match="NaN"):
        LazyAutoencoder().fit([[0.0, np.nan], [1.0, 2.0], [3.0, 1.0]])
    with pytest.raises(ValueError, match="minimum of 3"):
        LazyAutoencoder(n_components=1).fit([[0.0, 1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="n_components"):
        swiss_fit[2].inverse_transform(np.zeros((2, 3)))


@pytest.mark.parametrize("est", [LocalMeanDenoiser(), LazyAutoencoder(n_components=1, max_iter=10)],
                         ids=lambda e: type(e).__name__)
def test_check_estimator(est):
    # max_iter=10 keeps LazyAutoencoder's checks fast (24 s; 100 iterations: 129 s, and they still
    # do not converge): its fits stop there and say so, every one with the same warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LocalkitConvergenceWarning)
        check_estimator(est)
    expected = {"LazyAutoencoder did not converge within max_iter=10 iterations; increase max_iter"}
    assert {str(w.message) for w in caught} == (expected if isinstance(est, LazyAutoencoder) else set())
