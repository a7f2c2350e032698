"""The uniform profile jumps at the edge of its support (``u <= 1``): a sample at exactly the
bandwidth from a query is in, on every path. Points on a lattice (digits' integer pixels) put
tens of thousands of pairs there; rounded distances (the engine's centred, scaled coordinates, a
matrix product) used to count 43% of them on the dense path, 99% on the radius path, 100% on the
compiled pass, so results hung on ``algorithm`` and ``block_size``."""
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.neighbors import RadiusNeighborsRegressor

from localkit import LocalMeanRegressor, kernel_density
from localkit.engine import local_sums


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:, 20:24], y.astype(float)


def _exact_counts(X, Q, h):
    """``#{j : |q - x_j|^2 <= h^2}`` in integer arithmetic (integer points, integer h)."""
    D = ((Q.astype(np.int64)[:, None, :] - X.astype(np.int64)[None, :, :]) ** 2).sum(axis=2)
    return (D <= h * h).sum(axis=1)


@pytest.mark.parametrize("h", [1.0, 2.0])
def test_every_path_keeps_the_samples_at_the_edge(digits, h):
    X, y = digits
    counts = _exact_counts(X, X, int(h))
    ref = RadiusNeighborsRegressor(radius=h).fit(X, y).predict(X)  # scikit-learn: d <= radius
    for algorithm in ("dense", "neighbors", "compiled", "auto"):
        for block_size in (None, 7):
            out = local_sums(None, X, y, "uniform", bandwidth=h, algorithm=algorithm, block_size=block_size)
            np.testing.assert_array_equal(np.rint(np.exp(out.log_weight_sum)), counts)
            np.testing.assert_allclose(out.mean, ref, rtol=1e-13)
    model = LocalMeanRegressor(kernel="uniform", bandwidth=h, algorithm="dense").fit(X, y)
    np.testing.assert_allclose(model.predict(X), ref, rtol=1e-13)


def test_tophat_density_counts_the_closed_ball(digits):
    X, _ = digits
    for algorithm in ("dense", "neighbors", "compiled"):
        p = kernel_density(X[:200], X, "tophat", 1.0, algorithm=algorithm)
        np.testing.assert_allclose(p / p[0] * _exact_counts(X, X[:1], 1)[0], _exact_counts(X, X[:200], 1),
                                   rtol=1e-12)
    x = np.array([[0.0], [1.0], [2.0], [3.0], [10.0]])
    np.testing.assert_allclose(kernel_density(x, x, "tophat", 1.0, algorithm="dense"), [0.2, 0.3, 0.3, 0.2, 0.1])


def test_tensors_keep_the_samples_at_the_edge(digits, monkeypatch):
    torch = pytest.importorskip("torch")
    import sklearn

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    X, y = digits
    # leave-one-out on tensors takes distinct rows (repeated ones are refused there: engine.twins)
    distinct = np.sort(np.unique(X, axis=0, return_index=True)[1])
    for exclude_self in (False, True):
        if exclude_self:
            X, y = X[distinct], y[distinct]
        ref = local_sums(None, X, y, "uniform", bandwidth=1.0, exclude_self=exclude_self)
        with sklearn.config_context(array_api_dispatch=True):
            got = local_sums(None, torch.tensor(X), torch.tensor(y), "uniform", bandwidth=1.0,
                             exclude_self=exclude_self)
        np.testing.assert_array_equal(got.log_weight_sum.numpy(), ref.log_weight_sum)
        keep = ~ref.empty  # an empty neighbourhood takes a nearest sample: ties are each path's pick
        np.testing.assert_allclose(got.mean.numpy()[keep], ref.mean[keep], rtol=1e-13)


def test_per_feature_bandwidths_keep_the_edge_on_every_path(digits, monkeypatch):
    torch = pytest.importorskip("torch")
    import sklearn

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    X, y = digits
    h = np.array([1.0, 2.0, 1.0, 2.0])  # powers of two: (q - x) / h exact on the integer pixels
    D = ((X[:, None, :] - X[None, :, :]) / h) ** 2
    counts = (D.sum(axis=2) <= 1).sum(axis=1)
    for algorithm in ("dense", "neighbors", "compiled"):
        out = local_sums(None, X, y, "uniform", bandwidth=h, algorithm=algorithm)
        np.testing.assert_array_equal(np.rint(np.exp(out.log_weight_sum)), counts)
    with sklearn.config_context(array_api_dispatch=True):
        got = local_sums(None, torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32), "uniform",
                         bandwidth=h)
    np.testing.assert_array_equal(np.rint(np.exp(got.log_weight_sum.double().numpy())), counts)
