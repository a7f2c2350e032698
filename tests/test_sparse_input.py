"""Sparse (CSR) input on the neighbour paths and in relaxation labeling (issue 25).

References: scikit-learn's neighbour estimators and ``LabelPropagation(kernel="knn")`` fitted on
the same CSR matrix, the bundled digits (64 pixels, 51% of them 0) as ``scipy.sparse.csr_matrix``.
Both sides search by brute force on the CSR matrix, so the neighbours, their order and ties are
the same: the tolerance is 1e-12 (measured: 0, or 2.2e-16 after relaxation labeling's iterations).
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import load_digits
from sklearn.neighbors import (KNeighborsClassifier, KNeighborsRegressor, RadiusNeighborsClassifier,
                               RadiusNeighborsRegressor)
from sklearn.semi_supervised import LabelPropagation
from sklearn.utils.estimator_checks import check_estimator

from localkit import Kernel, LocalMeanClassifier, LocalMeanRegressor, RelaxationLabeling, local_mean
from localkit.engine import BoundKernel, EngineOptions, twin_groups

TOL = 1e-12


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    Xs = sparse.csr_matrix(X)
    return Xs[:1200], Xs[1200:], y[:1200], y[1200:]


def _as_target(y):
    return y.astype(np.float64) + 0.1 * (y % 3)  # a regression target that is not the label itself


@pytest.mark.parametrize("params", [
    dict(n_neighbors=5),
    dict(n_neighbors=1),
    dict(n_neighbors=7, weights="distance"),
    dict(n_neighbors=5, metric="manhattan"),
    dict(n_neighbors=5, metric="cosine", weights="distance"),
    dict(n_neighbors=4, metric="minkowski", p=1),
])
def test_knn_regression_and_classification_equal_scikit_learn_on_csr(digits, params):
    Xtr, Xte, ytr, yte = digits
    ours = LocalMeanRegressor(kernel="uniform", **params).fit(Xtr, _as_target(ytr))
    ref = KNeighborsRegressor(**params).fit(Xtr, _as_target(ytr))
    np.testing.assert_allclose(ours.predict(Xte), ref.predict(Xte), rtol=0, atol=TOL)
    clf = LocalMeanClassifier(kernel="uniform", **params).fit(Xtr, ytr)
    # uniform weights as a callable: scikit-learn's predict_proba then counts the classes of its own
    # kneighbors; with weights="uniform" it takes a reduction (ArgKminClassMode) that breaks ties at
    # the k-th distance otherwise (manhattan distances on digits: 12 of 5970 probabilities differ
    # between scikit-learn's two answers)
    uniform = params.get("weights", lambda d: np.ones_like(d))
    rclf = KNeighborsClassifier(**{**params, "weights": uniform}).fit(Xtr, ytr)
    np.testing.assert_allclose(clf.predict_proba(Xte), rclf.predict_proba(Xte), rtol=0, atol=TOL)
    np.testing.assert_array_equal(clf.predict(Xte), rclf.predict(Xte))
    # dense queries beside sparse samples: the same answers
    np.testing.assert_allclose(clf.predict_proba(Xte[:50].toarray()), rclf.predict_proba(Xte[:50]), rtol=0, atol=TOL)


def test_a_compact_knn_profile_equals_scikit_learn_with_its_weights(digits):
    """Epanechnikov kNN kernel: ``k(d / d_k)``, scikit-learn's ``weights=`` callable of the distances."""
    Xtr, Xte, ytr, _ = digits

    def epanechnikov(d):
        return 1.0 - (d / d[:, -1:]) ** 2

    ours = LocalMeanRegressor(kernel="epanechnikov", n_neighbors=9).fit(Xtr, _as_target(ytr))
    ref = KNeighborsRegressor(9, weights=epanechnikov).fit(Xtr, _as_target(ytr))
    np.testing.assert_allclose(ours.predict(Xte), ref.predict(Xte), rtol=0, atol=TOL)


@pytest.mark.parametrize("radius", [18.0, 25.0])
def test_radius_regression_and_classification_equal_scikit_learn_on_csr(digits, radius):
    Xtr, Xte, ytr, _ = digits
    ours = LocalMeanRegressor(kernel="uniform", bandwidth=radius, empty="nan")
    ref = RadiusNeighborsRegressor(radius=radius)
    with pytest.warns(RuntimeWarning, match="empty neighbourhood; their local means are NaN"):
        got = ours.fit(Xtr, _as_target(ytr)).predict(Xte)
    with pytest.warns(UserWarning, match="no neighbors within specified radius; predicting NaN"):
        want = ref.fit(Xtr, _as_target(ytr)).predict(Xte)
    assert np.isnan(want).any() and not np.isnan(want).all()
    assert ours._bound.bound.explain(Xte).path == "neighbors"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    clf = LocalMeanClassifier(kernel="uniform", bandwidth=radius, outlier_label="most_frequent").fit(Xtr, ytr)
    rclf = RadiusNeighborsClassifier(radius=radius, outlier_label="most_frequent").fit(Xtr, ytr)
    np.testing.assert_allclose(clf.predict_proba(Xte), rclf.predict_proba(Xte), rtol=0, atol=TOL)
    np.testing.assert_array_equal(clf.predict(Xte), rclf.predict(Xte))


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_kneighbors_and_radius_neighbors_equal_scikit_learn_on_csr(digits, metric):
    Xtr, Xte, ytr, _ = digits
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=6, metric=metric).fit(Xtr, ytr)
    ref = KNeighborsClassifier(6, metric=metric).fit(Xtr, ytr)
    for X in (Xte, None):  # None: each training sample without itself
        d, i = ours.kneighbors(X, n_neighbors=8)
        d_ref, i_ref = ref.kneighbors(X, n_neighbors=8)
        np.testing.assert_array_equal(i, i_ref)
        np.testing.assert_allclose(d, d_ref, rtol=0, atol=TOL)
    radius = {"euclidean": 22.0, "manhattan": 110.0, "cosine": 0.1}[metric]
    rref = RadiusNeighborsClassifier(radius=radius, metric=metric).fit(Xtr, ytr)
    for X in (Xte[:100], None):
        d, i = ours.radius_neighbors(X, radius=radius, sort_results=True)
        d_ref, i_ref = rref.radius_neighbors(X, sort_results=True)
        assert sum(map(len, i)) > 0
        for a, b, c, e in zip(d, d_ref, i, i_ref):
            np.testing.assert_array_equal(c, e)
            np.testing.assert_allclose(a, b, rtol=0, atol=TOL)


def test_relaxation_labeling_knn_equals_label_propagation_on_csr(digits):
    Xtr, _, ytr, _ = digits
    X, y = Xtr[:600], ytr[:600].copy()
    y[np.random.default_rng(0).random(len(y)) < 0.8] = -1
    ours = RelaxationLabeling(kernel="uniform", n_neighbors=7).fit(X, y)
    ref = LabelPropagation(kernel="knn", n_neighbors=7, max_iter=1000).fit(X, y)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=TOL)
    np.testing.assert_array_equal(ours.transduction_, ref.transduction_)
    np.testing.assert_allclose(ours.predict_proba(Xtr[600:700]), ref.predict_proba(Xtr[600:700]), rtol=0, atol=TOL)
    assert sparse.issparse(ours._bound.bound.samples)


def test_the_samples_stay_sparse(digits):
    Xtr, Xte, ytr, _ = digits
    for est in (LocalMeanRegressor(kernel="uniform", n_neighbors=5).fit(Xtr, _as_target(ytr)),
                LocalMeanClassifier(kernel="tricube", bandwidth=30.0).fit(Xtr, ytr)):
        est.predict(Xte)
        bound = est._bound.bound
        assert bound.sparse and sparse.issparse(bound.samples) and sparse.issparse(bound.X)
        assert sparse.issparse(bound.index._fit_X)
        assert bound.samples.nnz == Xtr.nnz


def test_memory_stays_far_below_the_dense_matrix():
    """20,000 x 4,000 samples, 0.1% stored: 640 MB dense, 1 MB as CSR. Fit, predict 100 queries
    and their neighbours within a peak of 96 MB (the distance block of 100 queries x 20,000
    samples is 16 MB)."""
    rng = np.random.default_rng(0)
    X = sparse.random(20_000, 4_000, density=0.001, format="csr", random_state=rng)
    y = rng.normal(size=20_000)
    Q = sparse.random(100, 4_000, density=0.001, format="csr", random_state=rng)
    tracemalloc.start()
    try:
        reg = LocalMeanRegressor(kernel="uniform", n_neighbors=10).fit(X, y)
        reg.predict(Q)
        reg.kneighbors(Q)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 96 * 2**20, f"peak {peak / 2**20:.0f} MB"


@pytest.mark.parametrize("params, name", [
    (dict(), "kernel='gaussian'"),  # the defaults: Gaussian, Scott's rule
    (dict(kernel="laplacian", n_neighbors=5), "kernel='laplacian'"),
    (dict(kernel="softmax", bandwidth=1.0), "kernel='softmax'"),
    (dict(kernel="uniform"), "bandwidth='scott'"),
    (dict(kernel="uniform", bandwidth=np.full(64, 20.0)), "bandwidth=\\[20.0"),
    (dict(kernel="uniform", bandwidth="cv"), "bandwidth='cv'"),
    (dict(kernel="uniform", bandwidth=20.0, sample_neighbors=5), "sample_neighbors=5"),
    (dict(kernel="uniform", n_neighbors=5, metric="chebyshev"), "metric='chebyshev'"),
    (dict(kernel="uniform", n_neighbors=5, metric="minkowski", p=3), "metric='minkowski'"),
    (dict(kernel="uniform", n_neighbors=5, metric="seuclidean"), "metric='seuclidean'"),
    (dict(kernel="uniform", n_neighbors=5, algorithm="dense"), "algorithm='dense'"),
    (dict(kernel="uniform", n_neighbors=5, algorithm="compiled"), "algorithm='compiled'"),
    (dict(kernel=Kernel("uniform", bandwidth=20.0)), "kernel: a Kernel instance"),
])
@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_dense_only_options_are_refused_by_name(digits, Est, params, name):
    Xtr, _, ytr, _ = digits
    with pytest.raises(ValueError, match=f"X is a sparse matrix.*{name}"):
        Est(**params).fit(Xtr[:100], ytr[:100])


def test_the_planner_says_why_and_refuses_dense_paths(digits):
    Xtr, Xte, ytr, _ = digits
    bound = BoundKernel(Kernel("uniform", n_neighbors=5), Xtr)
    plan = bound.explain(Xte)
    assert plan.path == "neighbors"
    assert all("sparse" in why for why in plan.reasons.values()), str(plan)
    assert "centres" in plan.reasons["dense"]
    with pytest.raises(ValueError, match="algorithm='dense': sparse samples take the neighbour path only"):
        bound.using(EngineOptions(algorithm="dense")).sums(Xte, ytr.astype(float))
    with pytest.raises(ValueError, match="log_weights forms dense"):
        bound.log_weights(Xte[:3])
    with pytest.raises(ValueError, match="samples are a sparse matrix.*kernel='gaussian'"):
        BoundKernel(Kernel("gaussian", bandwidth=1.0), Xtr)
    # a fitted estimator reads its options at each pass: a dense path asked for later is refused too
    reg = LocalMeanRegressor(kernel="uniform", n_neighbors=5).fit(Xtr, _as_target(ytr))
    with pytest.raises(ValueError, match="algorithm='dense'"):
        reg.set_params(algorithm="dense").predict(Xte)


def test_other_entry_points_keep_refusing_sparse_input(digits):
    from localkit import LocalPolynomialRegressor

    Xtr, Xte, ytr, _ = digits
    X, y = Xtr[:100], _as_target(ytr[:100])
    with pytest.raises(TypeError, match=r"samples is a scipy sparse matrix .* pass samples\.toarray\(\)"):
        local_mean(None, X, y, kernel="uniform", n_neighbors=5)
    with pytest.raises(TypeError, match="[Ss]parse"):
        LocalPolynomialRegressor(kernel="uniform", n_neighbors=5).fit(X, y)
    dense = LocalMeanRegressor(kernel="uniform", n_neighbors=5).fit(X.toarray(), y)
    with pytest.raises(TypeError, match="[Ss]parse"):  # fitted on dense samples: dense queries
        dense.predict(Xte[:3])
    with pytest.raises(TypeError, match="[Ss]parse"):
        dense.kneighbors(Xte[:3])


def test_leave_one_out_groups_repeated_sparse_rows():
    rng = np.random.default_rng(1)
    X = sparse.random(300, 20, density=0.3, format="csr", random_state=rng)
    X = sparse.vstack([X, X[:40]]).tocsr()  # 40 repeated rows
    groups, dense_groups = twin_groups(X), twin_groups(X.toarray())
    assert groups is not None
    np.testing.assert_array_equal(groups[:, None] == groups[None, :], dense_groups[:, None] == dense_groups[None, :])
    y = rng.normal(size=300)
    y = np.r_[y, y[:40]]  # repeated rows, repeated targets: a tie between two copies is no tie in value
    for params in (dict(kernel="uniform", n_neighbors=5), dict(kernel="epanechnikov", bandwidth=1.2)):
        ours = LocalMeanRegressor(**params).fit(X, y)
        dense = LocalMeanRegressor(**params).fit(X.toarray(), y)
        np.testing.assert_allclose(ours.loo_predict(), dense.loo_predict(), rtol=1e-12)


#: a kNN kernel counts neighbours: a weight of 2 is not a repeated row, which would take a second
#: place among the k (scikit-learn's KNeighbors* take no sample_weight); dense or sparse alike
KNN_WEIGHTS = "a kNN kernel counts neighbours; a sample weight does not repeat a row among the k"


@pytest.mark.parametrize("est, expected_failed", [
    (LocalMeanRegressor(kernel="uniform", bandwidth=1.0), {}),
    (LocalMeanClassifier(kernel="epanechnikov", bandwidth=1.0), {}),
    (LocalMeanRegressor(kernel="uniform", n_neighbors=3),
     {"check_sample_weight_equivalence_on_dense_data": KNN_WEIGHTS,
      "check_sample_weight_equivalence_on_sparse_data": KNN_WEIGHTS}),
])
def test_check_estimator_with_sparse_input(est, expected_failed):
    """Parameters that take sparse X carry scikit-learn's ``input_tags.sparse``: its checks then fit
    sparse X too (the sample-weight equivalence on sparse data among them)."""
    assert est.__sklearn_tags__().input_tags.sparse
    check_estimator(est, expected_failed_checks=expected_failed)
