"""Fuzzing the public functions: ``local_mean``, ``local_sums``, ``kernel_density``, ``Kernel`` and
``denoise_nl_means`` (random shapes, dtypes, scales 1e-300..1e300, NaN/inf, empty and single
samples, hyper-parameters inside and outside their domains), with the invariant of
:mod:`test_fuzz_common` and cheap oracles: a local mean lies within its values, its weights sum to
one, a tiny bandwidth gives the nearest sample's value, a huge one the global mean, and the order of
the samples does not matter."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_fuzz_common import arrays, check_floats, examples, outcome, within

from localkit import Kernel, denoise_nl_means, kernel_density, local_mean, local_sums

SMOOTH = ("gaussian", "laplacian", "cauchy")
COMPACT = ("epanechnikov", "tricube", "uniform", "biweight", "triangular", "cosine")
#: hyper-parameter values inside and outside every domain
ODD_VALUES = (-1, 0, 1, 2, 0.5, -0.5, 1.5, 1e-300, 1e300, np.nan, np.inf, True, "bogus", None, [1.0, 2.0],
              np.array(2.0), "scott", "cv", "softmax", "epanechnikov")
LOCAL_MEAN_PARAMS = {"kernel": ODD_VALUES, "bandwidth": ODD_VALUES, "n_neighbors": ODD_VALUES,
                     "exclude_self": ODD_VALUES, "metric": ODD_VALUES + ("manhattan",), "empty": ODD_VALUES + ("nan",),
                     "algorithm": ODD_VALUES + ("dense", "neighbors"), "n_jobs": ODD_VALUES + (-1, "two"),
                     "block_size": ODD_VALUES}


def _good_data(seed, n=12, d=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, -1]


@settings(max_examples=examples(2))
@given(queries=arrays(rows=(0, 4)), samples=arrays(rows=(0, 6)), values=arrays(rows=(0, 6), features=(1, 2)),
       kernel=st.sampled_from(SMOOTH + COMPACT + ("softmax",)))
def test_local_mean_inputs(queries, samples, values, kernel):
    ok, out = outcome(lambda: local_mean(queries, samples, values, kernel=kernel, bandwidth=1.0),
                      ["queries", "samples", "values"])
    if ok:
        out = check_floats(out, (len(queries), values.shape[1]), "local_mean")
        within(out, np.asarray(values, dtype=float))


@settings(max_examples=examples(2))
@given(params=st.dictionaries(st.sampled_from(sorted(LOCAL_MEAN_PARAMS)), st.sampled_from(range(len(ODD_VALUES) + 4)),
                              min_size=1, max_size=2), seed=st.integers(0, 100))
def test_local_mean_hyper_parameters(params, seed):
    kwargs = {}
    for name, i in params.items():
        pool = LOCAL_MEAN_PARAMS[name]
        kwargs[name] = pool[i % len(pool)]
    X, y = _good_data(seed)
    ok, out = outcome(lambda: local_mean(X, X, y, **kwargs), list(kwargs) + ["queries", "samples"])
    if ok and not (kwargs.get("empty") == "nan"):
        within(check_floats(out, (len(X),), "local_mean"), y)


@settings(max_examples=examples())
@given(seed=st.integers(0, 2**16), n=st.integers(1, 9), d=st.integers(1, 3), kernel=st.sampled_from(SMOOTH + COMPACT),
       log_h=st.floats(-2, 2), log_scale=st.sampled_from([-100, -10, 0, 0, 10, 100]), dtype=st.sampled_from(["float64", "float32"]))
def test_local_mean_oracles(seed, n, d, kernel, log_h, log_scale, dtype):
    """Within the values, weights summing to one, permutation invariance, at any scale."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** (log_scale if dtype == "float64" else np.clip(log_scale, -10, 10))  # float32's range
    X = (rng.normal(size=(n, d)) * scale).astype(dtype)
    Q = (rng.normal(size=(3, d)) * scale).astype(dtype)
    V = rng.normal(size=(n, 2))
    h = float(10.0 ** log_h * scale)
    m = check_floats(local_mean(Q, X, V, kernel=kernel, bandwidth=h), (3, 2), "local_mean")
    assert m.dtype == np.dtype(dtype)
    within(m, V, rtol=1e-5)
    ones = local_mean(Q, X, np.ones(n), kernel=kernel, bandwidth=h)
    np.testing.assert_allclose(ones, 1.0, rtol=1e-5)  # the weights sum to one
    perm = rng.permutation(n)
    np.testing.assert_allclose(local_mean(Q, X[perm], V[perm], kernel=kernel, bandwidth=h), m,
                               rtol=1e-4 if dtype == "float32" else 1e-9, atol=1e-5 if dtype == "float32" else 1e-12)


@settings(max_examples=examples())
@given(seed=st.integers(0, 2**16), n=st.integers(2, 9), kernel=st.sampled_from(tuple(set(SMOOTH + COMPACT) - {"cauchy"})),
       log_scale=st.sampled_from([-100, -10, 0, 10, 100]))
def test_local_mean_bandwidth_limits(seed, n, kernel, log_scale):
    """A tiny bandwidth gives the nearest sample's value; a huge one the global mean. (Not the
    Cauchy kernel: its weights 1 / (1 + u^2) tend to inverse-square-distance weights, not to the
    nearest sample, as h -> 0.)"""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** log_scale
    X = rng.normal(size=(n, 2)) * scale
    Q = rng.normal(size=(4, 2)) * scale
    V = rng.normal(size=n)
    dist = np.linalg.norm(Q[:, None] - X[None], axis=2)
    order = np.sort(dist, axis=1)
    assume(np.all(order[:, 1] > order[:, 0] * (1 + 1e-6)))  # a unique nearest sample
    tiny = local_mean(Q, X, V, kernel=kernel, bandwidth=1e-6 * scale)
    np.testing.assert_allclose(tiny, V[np.argmin(dist, axis=1)], rtol=1e-9)
    huge = local_mean(Q, X, V, kernel=kernel, bandwidth=1e9 * scale)
    np.testing.assert_allclose(huge, V.mean(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("h", [1e-300, 1e300])
def test_compact_kernel_at_extreme_bandwidths(h):
    """Any finite positive bandwidth: the nearest value (tiny h), the global mean (huge h)."""
    X = np.array([[0.0], [1.0], [3.0]])
    V = np.array([1.0, 2.0, 4.0])
    out = local_mean([[0.9]], X, V, kernel="epanechnikov", bandwidth=h)
    np.testing.assert_allclose(out, [2.0] if h < 1 else [V.mean()])


# The softmax kernel's logits <q, x> / T beyond the float range (inputs near 1e200): the exact
# answer is the limit, the value of the sample with the largest inner product (they used to come
# back NaN, silently).
def test_softmax_kernel_with_overflowing_logits():
    X = np.array([[1e200, 0.0], [0.0, 1e200], [-1e200, 0.0]])
    out = local_mean([[1e200, 1.0]], X, np.array([1.0, 2.0, 3.0]), kernel="softmax", bandwidth=1.0)
    np.testing.assert_allclose(out, [1.0])


@pytest.mark.parametrize("algorithm", ["dense", "streamed"])
def test_softmax_kernel_sample_weights_with_logits_streamed_over_two_to_the_k(algorithm):
    """Sample weights under logits streamed as ``logits / 2^k``: ``log c_j`` is divided by ``2^k``
    with them. The NumPy pass added it undivided, so that it came back multiplied by ``2^k`` (the
    weight 3 below counted as ``3^(2^k)``: mean 1.0, not 1.2888). A huge sample orthogonal to the
    query sets ``k``; the logits of the others are 0, 1, 1, 0."""
    X = np.array([[0.0, 1e160, 0.0], [1e-160, 0.0, 0.0], [1e-160, 0.0, 0.0], [0.0, 0.0, 1.0]])
    w, v = np.array([1.0, 3.0, 1.0, 1.0]), np.array([0.0, 1.0, 2.0, 3.0])
    W = w * np.exp([0.0, 1.0, 1.0, 0.0])  # the direct formula, in float64
    out = local_sums([[1e160, 0.0, 0.0]], X, v, "softmax", 1.0, sample_weight=w, algorithm=algorithm)
    np.testing.assert_allclose(out.mean, [(W * v).sum() / W.sum()], rtol=1e-14)
    np.testing.assert_allclose(out.log_weight_sum, [np.log(W.sum())], rtol=1e-14)


@settings(max_examples=examples())
@given(seed=st.integers(0, 100), n_jobs=st.sampled_from([0, "two", 1.5, True, -1, 1, 2, None]),
       kernel=st.sampled_from(SMOOTH + COMPACT))
def test_local_sums_n_jobs(seed, n_jobs, kernel):
    """scikit-learn's n_jobs everywhere: None, -1 and positive counts run; 0, strings, floats and
    bools are errors naming n_jobs, whichever path (dense, neighbours, compiled) the kernel takes."""
    X, y = _good_data(seed)
    ok, out = outcome(lambda: local_sums(X, X, y, kernel=kernel, n_jobs=n_jobs), ["n_jobs"])
    valid = n_jobs is None or (isinstance(n_jobs, int) and not isinstance(n_jobs, bool) and n_jobs != 0)  # True too
    assert ok == valid, (n_jobs, out)
    if ok:
        within(check_floats(out.mean, (len(X),)), y)


@settings(max_examples=examples(2))
@given(queries=arrays(rows=(0, 4)), samples=arrays(rows=(0, 6)),
       kernel=st.sampled_from(("gaussian", "epanechnikov", "uniform", "cosine", "softmax", "cauchy", "bogus")),
       bandwidth=st.sampled_from([1.0, 0.3, "scott", "silverman", "isj", "sj", 0.0, -1.0, np.nan, "cv",
                                  [1.0, 2.0]]),
       extra=st.sampled_from([{}, {"log": True}, {"log": "yes"}, {"metric": "manhattan"}, {"n_neighbors": 3},
                              {"n_jobs": 0}, {"algorithm": "dense"}, {"bogus": 1}]))
def test_kernel_density(queries, samples, kernel, bandwidth, extra):
    ok, out = outcome(lambda: kernel_density(queries, samples, kernel=kernel, bandwidth=bandwidth, **extra),
                      ["queries", "samples", "kernel", "bandwidth", *extra])
    assert not ok or not ({"metric", "n_neighbors", "bogus", "n_jobs"} & set(extra)) and extra.get("log", False) in (
        True, False), f"kernel_density accepted {extra}"
    if ok:
        p = check_floats(out, (len(queries),), "kernel_density")
        assert extra.get("log") or np.all(p >= 0)


@settings(max_examples=examples())
@given(X=arrays(rows=(0, 4)), Y=arrays(rows=(0, 4)), name=st.sampled_from(SMOOTH + COMPACT + ("softmax", "nope", 3)),
       bandwidth=st.sampled_from([1.0, 1e-300, 1e300, 0.0, np.nan, "scott", np.array(0.5), [1.0, 1.0], None]),
       n_neighbors=st.sampled_from([None, 1, 2, 0, 2.5, True]))
def test_kernel_matrix(X, Y, name, bandwidth, n_neighbors):
    def call():
        return Kernel(name, bandwidth=bandwidth, n_neighbors=n_neighbors)(X, Y)

    ok, K = outcome(call, ["X", "Y", "kernel", "bandwidth", "n_neighbors", "name"])
    if ok:
        K = np.asarray(K)
        assert K.shape == (len(X), len(Y))
        assert not np.any(np.isnan(K)) and np.all(K >= 0)


@settings(max_examples=examples(0.5))
@given(image=arrays(rows=(0, 9), features=(0, 9), scales=(-20, 0, 0, 20)),
       params=st.sampled_from([{}, {"patch_size": 3, "patch_distance": 2}, {"patch_size": 0}, {"h": 0.0},
                               {"h": np.nan}, {"sigma": -1.0}, {"patch_distance": -1}, {"channel_axis": "x"},
                               {"n_jobs": 0}, {"patch_size": 2.5}]))
def test_denoise_nl_means(image, params):
    kwargs = {"patch_size": 3, "patch_distance": 2, "h": 0.1} | params
    ok, out = outcome(lambda: denoise_nl_means(image, **kwargs), ["image", *kwargs])
    if ok:
        check_floats(out, image.shape, "denoise_nl_means")


@pytest.mark.parametrize("dtype, scale, h", [(np.float64, 1e300, 1e-3), (np.float32, 1e20, 1.0),
                                             (np.float32, 1e30, 1e-3)])
def test_softmax_kernel_with_logits_far_beyond_the_float_range(dtype, scale, h):
    """Logits past 2^1024 (float64) or 2^128 (float32), whose 2^-k scaling is itself beyond the
    float range: the limit, one-hot on the largest inner product (an OverflowError / NaN before)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = rng.normal(size=40)
    out = local_mean((X[:6] * scale).astype(dtype), (X * scale).astype(dtype), y.astype(dtype), kernel="softmax",
                     bandwidth=h)
    np.testing.assert_allclose(out, y[np.argmax(X[:6] @ X.T, axis=1)], rtol=1e-6)


def test_float32_queries_at_the_float_edge_warn_nothing():
    """Squared distances beyond float32's range are inf (a zero weight; the empty policy then gives
    the nearest sample), not a RuntimeWarning from a cast."""
    X = np.array([[0.0], [1.0], [2.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = local_mean(np.array([[-3e38], [3e38]], np.float32), X, np.array([1, 2, 3], np.float32),
                         kernel="laplacian", bandwidth=1.0)
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
