"""The dense path's pruned blocks (issue 28): a compact profile at a fixed bandwidth in more than
16 features runs over the leaves of k-d trees and skips the sample leaves whose bounding box lies
beyond the support of every query of a leaf; the sums are those of the definition."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import load_digits

from localkit import Kernel, local_sums
from localkit.engine import BoundKernel
from localkit.engine.passes.dense import boxes_in_reach, kd_order, leaf_boxes
from localkit.exceptions import EmptyNeighbourhoodWarning
from localkit.kernels import PROFILES


def definition(Q, X, v, name, h, c=None):
    """``(sums of K v, sums of K)`` from exact distances, in float64."""
    K = PROFILES[name].k(cdist(np.asarray(Q, float), np.asarray(X, float), "sqeuclidean") / h**2)
    if c is not None:
        K = K * c
    return K @ np.asarray(v, float), K.sum(axis=1)


def clusters(d, n, m, k=40, seed=0):
    """Points around ``k`` centres far apart (3 standard deviations of the centres, 0.3 within)."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.normal(size=(k, d))
    X = centres[rng.integers(0, k, n)] + 0.3 * rng.normal(size=(n, d))
    Q = centres[rng.integers(0, k, m)] + 0.3 * rng.normal(size=(m, d))
    return X, Q, np.sin(X[:, 0]) + X[:, 1]


def test_kd_leaves_are_a_permutation_and_their_boxes_keep_every_pair_in_reach():
    rng = np.random.default_rng(0)
    P = rng.normal(size=(1000, 20))
    order = kd_order(P, 37)
    assert np.array_equal(np.sort(order), np.arange(len(P)))
    cols, lo, hi = leaf_boxes(P, order, 37)
    assert [len(c) for c in cols] == [37] * 27 + [1] and all(np.all(np.diff(c) > 0) for c in cols)
    for c, a, b in zip(cols, lo, hi):
        assert np.all(P[c] >= a) and np.all(P[c] <= b)
    # a query leaf keeps every sample leaf that holds a point of some query's support (u^2 <= 1)
    X, Q, _ = clusters(20, 1000, 200)
    P4, Q = X / 4, Q / 4  # in units of the bandwidth: supports of radius 1
    order = kd_order(P4, 16)
    cols, lo, hi = leaf_boxes(P4, order, 16)
    q_order = kd_order(Q, 8)
    kept = 0
    for a in range(0, len(Q), 8):
        rows = q_order[a:a + 8]
        keep = boxes_in_reach(lo, hi, Q[rows])
        reach = [np.any(cdist(Q[rows], P4[c], "sqeuclidean") <= 1.0) for c in cols]
        assert np.all(keep[reach])
        kept += keep.sum()
    assert kept < 0.5 * len(cols) * len(Q) / 8  # and most leaves are skipped


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-4)])
@pytest.mark.parametrize("name", ["epanechnikov", "tricube", "uniform"])
def test_pruned_blocks_give_the_definition_and_the_plain_dense_sums(name, dtype, tol):
    X, Q, v = clusters(40, 4000, 500, k=6)
    c = np.random.default_rng(1).uniform(0.5, 2.0, len(X))
    h = 4.0
    bound = BoundKernel(Kernel(name, bandwidth=h), X.astype(dtype))
    plan = bound.explain(Q.astype(dtype))
    assert plan.path == "dense" and "blocks pruned by bounding boxes" in plan.reasons["dense"]
    ref_sum, ref_w = definition(Q, X, v, name, h, c)
    assert np.all(ref_w > 0) and np.mean(ref_w) < 0.3 * c.sum()  # supports within a cluster
    kw = dict(sample_weight=c.astype(dtype), empty="nan")
    auto = local_sums(Q.astype(dtype), X.astype(dtype), v.astype(dtype), name, h, **kw)
    dense = local_sums(Q.astype(dtype), X.astype(dtype), v.astype(dtype), name, h, algorithm="dense", **kw)
    assert auto.mean.dtype == dtype
    scale = np.abs(ref_sum / ref_w).max()
    np.testing.assert_allclose(auto.mean, ref_sum / ref_w, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(np.exp(auto.log_weight_sum), ref_w, rtol=tol * 10)
    np.testing.assert_allclose(auto.mean, dense.mean, rtol=0, atol=tol * scale)


def test_queries_out_of_every_support_stay_empty_when_pruned():
    X, Q, v = clusters(40, 3000, 200, k=6)
    Q[::2] += 100.0  # far from every cluster: empty
    with pytest.warns(EmptyNeighbourhoodWarning, match="some queries have an empty neighbourhood") as record:
        got = local_sums(Q, X, v, "epanechnikov", 4.0, empty="nan")
    assert [w.message.n_empty for w in record] == [100]
    ref_sum, ref_w = definition(Q, X, v, "epanechnikov", 4.0)
    np.testing.assert_array_equal(got.empty, ref_w == 0)
    assert got.empty[::2].all() and not got.empty[1::2].any()
    np.testing.assert_allclose(got.mean[1::2], (ref_sum / np.where(ref_w > 0, ref_w, 1))[1::2], rtol=1e-12)


def test_digits_boxes_do_not_prune_and_the_plan_says_so():
    """64 pixel features: leaves of digits span nearly the whole pixel range in most pixels, so
    the probe keeps almost every block pair and the plain order of blocks is kept."""
    X, y = load_digits(return_X_y=True)
    plan = BoundKernel(Kernel("epanechnikov", bandwidth=20.0), X).explain(X[::3])
    assert plan.path == "dense" and "no blocks pruned" in plan.reasons["dense"]
    got = local_sums(X[::3], X, y, "epanechnikov", 20.0)
    dense = local_sums(X[::3], X, y, "epanechnikov", 20.0, algorithm="dense")
    np.testing.assert_array_equal(got.mean, dense.mean)
    ref_sum, ref_w = definition(X[::3], X, y, "epanechnikov", 20.0)
    np.testing.assert_allclose(got.mean, ref_sum / ref_w, rtol=1e-12)
