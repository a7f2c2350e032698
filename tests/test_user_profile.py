"""A profile written by the user, ``Kernel(log_k, support=...)`` (issue 23).

Reference: the built-in profile it restates. A user-written Epanechnikov ``log1p(-u2)`` with
``support=1.0`` equals ``Kernel("epanechnikov")`` to 1e-10 on every engine path that takes it
(dense, neighbours, streamed, dask, torch tensors, products), in the density and in
:func:`localkit.nn.kernel_attention` (outputs and autograd gradients); a Gaussian ``-u2 / 2``
without support the same; the compiled paths refuse it, saying why; bad callables are refused.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from sklearn.datasets import load_diabetes

from localkit import Kernel, LocalMeanRegressor, LocalPolynomialRegressor, kernel_density, local_mean
from localkit.nn import explain_attention, kernel_attention


def user_epanechnikov(u2, xp):
    return xp.log1p(-u2)


def user_gaussian(u2, xp):
    return -0.5 * u2


def _data():
    X, y = load_diabetes(return_X_y=True)
    X = X[:, [2, 3, 8]] / X[:, [2, 3, 8]].std(axis=0)
    return X[:300], y[:300], X[300:]


@pytest.mark.parametrize("algorithm", ["auto", "dense", "neighbors", "streamed"])
def test_epanechnikov_equals_builtin_in_local_mean(algorithm):
    X, y, Q = _data()
    K = Kernel(user_epanechnikov, bandwidth=1.3, support=1.0)
    ref = local_mean(Q, X, y, Kernel("epanechnikov", bandwidth=1.3))
    np.testing.assert_allclose(local_mean(Q, X, y, K, algorithm=algorithm), ref, rtol=0, atol=1e-10)
    loo = local_mean(None, X, y, Kernel("epanechnikov", bandwidth=1.3), exclude_self=True, algorithm=algorithm
                     if algorithm != "auto" else "dense")
    np.testing.assert_allclose(local_mean(None, X, y, K, exclude_self=True, algorithm=algorithm), loo, rtol=0,
                               atol=1e-10)


def test_gaussian_and_products_and_density_equal_builtin():
    X, y, Q = _data()
    G = Kernel(user_gaussian, bandwidth=[0.5, 0.8, 1.1])
    np.testing.assert_allclose(local_mean(Q, X, y, G), local_mean(Q, X, y, "gaussian", [0.5, 0.8, 1.1]),
                               rtol=0, atol=1e-10)
    P = Kernel(user_epanechnikov, bandwidth=1.5, support=1.0, features=[0, 1]) * Kernel("gaussian", 0.7, features=[2])
    B = Kernel("epanechnikov", bandwidth=1.5, features=[0, 1]) * Kernel("gaussian", 0.7, features=[2])
    np.testing.assert_allclose(local_mean(Q, X, y, P), local_mean(Q, X, y, B), rtol=0, atol=1e-10)
    # the density normaliser, integrated numerically for a user profile, in closed form for the built-in
    for user, builtin in [(Kernel(user_epanechnikov, bandwidth=1.3, support=1.0), Kernel("epanechnikov", 1.3)),
                          (Kernel(user_gaussian, bandwidth=0.9), Kernel("gaussian", 0.9))]:
        np.testing.assert_allclose(kernel_density(Q, X, kernel=user), kernel_density(Q, X, kernel=builtin),
                                   rtol=1e-10)
    reg = LocalMeanRegressor(kernel=Kernel(user_epanechnikov, bandwidth=1.3, support=1.0)).fit(X, y)
    ref = LocalMeanRegressor(kernel="epanechnikov", bandwidth=1.3).fit(X, y)
    np.testing.assert_allclose(reg.predict(Q), ref.predict(Q), rtol=0, atol=1e-10)


@pytest.mark.parametrize("options", [{"bandwidth": 2.5}, {"n_neighbors": 30}])
def test_local_polynomial_fixed_and_knn(options):
    """The local linear fit: the dense path at a fixed bandwidth, the gathered kNN path."""
    X, y, Q = _data()
    user = LocalPolynomialRegressor(kernel=Kernel(user_epanechnikov, support=1.0, **options)).fit(X, y)
    ref = LocalPolynomialRegressor(kernel=Kernel("epanechnikov", **options)).fit(X, y)
    np.testing.assert_allclose(user.predict(Q), ref.predict(Q), rtol=0, atol=1e-10)


def test_dask_and_tensors(dispatch):
    import dask.array as da

    X, y, Q = _data()
    # every query has a sample within 2.0 (at 1.3 one has none, and the dask pass warns from its chunk
    # even where the "nearest" policy answers it: the built-in profile's behaviour too)
    K = Kernel(user_epanechnikov, bandwidth=2.0, support=1.0)
    ref = local_mean(Q, X, y, Kernel("epanechnikov", bandwidth=2.0))
    out = local_mean(da.from_array(Q, chunks=50), da.from_array(X, chunks=100), da.from_array(y, chunks=100), K)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=0, atol=1e-10)
    t = local_mean(*(torch.tensor(a) for a in (Q, X, y)), K)
    assert isinstance(t, torch.Tensor)
    np.testing.assert_allclose(t.numpy(), ref, rtol=0, atol=1e-10)


def test_compiled_paths_refuse_it():
    X, y, Q = _data()
    K = Kernel(user_epanechnikov, bandwidth=1.3, support=1.0)
    with pytest.raises(ValueError, match="a user profile .* has no compiled form"):
        local_mean(Q, X, y, K, algorithm="compiled")
    with pytest.raises(ValueError, match="no compiled"):
        K.profile.compiled_k
    with pytest.raises(ValueError, match="states no slope"):
        K.profile.slope_for(np)


@pytest.mark.parametrize("options", [{}, {"causal": True}, {"window": 6}, {"top_k": 9}])
def test_attention_with_gradients(options):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, n, 4, dtype=torch.float64, generator=g, requires_grad=True) for n in (40, 50))
    v = torch.randn(2, 3, 50, 5, dtype=torch.float64, generator=g, requires_grad=True)
    results = []
    for kernel in ("epanechnikov", Kernel(user_epanechnikov, support=1.0)):
        out = kernel_attention(q, k, v, kernel, bandwidth=2.5, **options)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
        results.append((out, *grads))
    for ref, got in zip(*results):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    assert explain_attention(q, k, v, Kernel(user_epanechnikov, support=1.0), bandwidth=2.5).path == "streamed"


def _wrong_shape(u2, xp):
    return xp.sum(u2)


def _nan(u2, xp):
    return xp.log(0.5 - u2)  # NaN beyond u2 = 0.5


def _needs_three(u2, xp, z):
    return u2


def _integers(u2, xp):
    return (u2 > 0.5).astype(int)


@pytest.mark.parametrize("log_k, support, error, match", [
    (3.0, None, TypeError, "a callable log_k"),
    (_wrong_shape, None, ValueError, "shape of u2"),
    (_nan, 1.0, ValueError, "NaN or \\+inf"),
    (lambda u2, xp: 1.0 / u2, None, ValueError, "NaN or \\+inf"),
    (lambda u2, xp: xp.log(u2), None, ValueError, "k\\(0\\) > 0"),
    (_needs_three, None, TypeError, "log_k\\(u2, xp\\)"),
    (_integers, None, ValueError, "floating"),
    (user_epanechnikov, 2.0, ValueError, "support must be None .* or 1.0"),
])
def test_bad_callables(log_k, support, error, match):
    with pytest.raises(error, match=match):
        Kernel(log_k, support=support)


def test_support_with_a_named_profile_and_repr_and_pickle():
    with pytest.raises(ValueError, match="support is given with a user profile"):
        Kernel("gaussian", support=1.0)
    K = Kernel(user_epanechnikov, bandwidth=0.5, support=1.0)
    assert repr(K) == "Kernel(user_epanechnikov, bandwidth=0.5, support=1.0)"
    back = pickle.loads(pickle.dumps(K))
    assert back.profile == K.profile and back.compact
    with pytest.raises(ValueError, match="bandwidth as its own argument"):
        kernel_attention(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1), K)
