"""Issue 25, "drop-in where we claim drop-in": what scikit-learn's neighbour estimators offer, on
the local means, against scikit-learn's own output on its bundled data: ``weights="distance"``
and callables, ``kneighbors`` / ``radius_neighbors``, ``outlier_label``, several outputs,
leave-one-out classification, and the metrics of ``p=inf`` and ``metric_params``.

Tolerances: the neighbour sets are scikit-learn's (the same k-d tree or brute force), so
indices agree exactly and distances, weights and means to round-off (``1e-12``)."""
import warnings
from contextlib import nullcontext

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import load_diabetes, load_iris, load_wine
from sklearn.neighbors import (KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors,
                               RadiusNeighborsClassifier, RadiusNeighborsRegressor)
from sklearn.neighbors import kneighbors_graph as sk_kneighbors_graph
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import check_estimator

from localkit import LocalMeanClassifier, LocalMeanRegressor, kneighbors_graph
from localkit.exceptions import BandwidthWarning, LocalkitWarning

TOL = 1e-12


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:300], X[300:], y[:300]


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    order = np.random.default_rng(0).permutation(len(X))
    X, y = X[order], y[order]
    return X[:120], X[120:], y[:120], y[120:]


def inverse_square(d):
    """A callable weight as scikit-learn takes it: a 2-D array, or an object array of arrays."""
    return 1.0 / (1.0 + d ** 2)


# -- weights --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 5, 12])
@pytest.mark.parametrize("weights", ["distance", inverse_square])
def test_knn_regressor_weights_equal_scikit_learn(diabetes, k, weights):
    Xtr, Xte, ytr = diabetes
    ref = KNeighborsRegressor(k, weights=weights).fit(Xtr, ytr)
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=k, weights=weights).fit(Xtr, ytr)
    np.testing.assert_allclose(ours.predict(Xte), ref.predict(Xte), rtol=TOL)


@pytest.mark.parametrize("weights", ["distance", inverse_square])
def test_knn_classifier_weights_equal_scikit_learn(wine, weights):
    Xtr, Xte, ytr, _ = wine
    ref = KNeighborsClassifier(6, weights=weights).fit(Xtr, ytr)
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=6, weights=weights).fit(Xtr, ytr)
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), rtol=0, atol=TOL)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))


@pytest.mark.parametrize("weights", ["distance", inverse_square])
def test_radius_regressor_weights_equal_scikit_learn(diabetes, weights):
    Xtr, Xte, ytr = diabetes
    ref = RadiusNeighborsRegressor(radius=0.12, weights=weights).fit(Xtr, ytr)
    ours = LocalMeanRegressor(kernel="uniform", bandwidth=0.12, weights=weights, empty="nan").fit(Xtr, ytr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both say that 4 test rows have no neighbour within 0.12
        expected, got = ref.predict(Xte), ours.predict(Xte)
    assert np.isnan(expected).sum() == 4
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=TOL)


def test_distance_weights_at_a_training_point_take_the_samples_there():
    """Iris repeats rows: a query at one takes the samples at distance 0 alone (scikit-learn's
    rule), every other neighbour weighing nothing."""
    X, y = load_iris(return_X_y=True)
    ref = KNeighborsClassifier(7, weights="distance").fit(X, y)
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=7, weights="distance").fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0, atol=TOL)
    twice = np.flatnonzero((cdist(X, X) == 0).sum(1) > 1)
    assert len(twice) >= 2
    reg = LocalMeanRegressor(kernel="epanechnikov", n_neighbors=7, weights="distance").fit(X, X[:, 3])
    np.testing.assert_allclose(reg.predict(X[twice]), X[twice, 3], rtol=TOL)


def test_distance_weights_multiply_a_non_uniform_profile(diabetes):
    """``w_i = k(d_i / d_k) / d_i``: the kNN Epanechnikov kernel times the inverse distance."""
    Xtr, Xte, ytr = diabetes
    k = 9
    dist, idx = NearestNeighbors(n_neighbors=k).fit(Xtr).kneighbors(Xte)
    w = (1 - (dist / dist[:, -1:]) ** 2) / dist
    expected = (w * ytr[idx]).sum(1) / w.sum(1)
    ours = LocalMeanRegressor(kernel="epanechnikov", n_neighbors=k, weights="distance").fit(Xtr, ytr)
    np.testing.assert_allclose(ours.predict(Xte), expected, rtol=TOL)
    # a fixed bandwidth and a profile of unbounded support: every sample, K_i / d_i
    D = cdist(Xte, Xtr)
    w = np.exp(-0.5 * (D / 0.05) ** 2) / D
    gauss = LocalMeanRegressor(kernel="gaussian", bandwidth=0.05, weights="distance").fit(Xtr, ytr)
    np.testing.assert_allclose(gauss.predict(Xte), (w @ ytr) / w.sum(1), rtol=1e-10)


def test_weights_bad_values_are_named(diabetes):
    Xtr, Xte, ytr = diabetes
    with pytest.raises(InvalidParameterError, match="'weights' parameter"):
        LocalMeanRegressor(weights="inverse").fit(Xtr, ytr)
    with pytest.raises(ValueError, match="weights='distance' multiplies a distance kernel"):
        LocalMeanRegressor(kernel="softmax", bandwidth=1.0, weights="distance").fit(Xtr, ytr)
    with pytest.raises(ValueError, match="bandwidth='cv' .* weights='distance'"):
        LocalMeanRegressor(bandwidth="cv", weights="distance").fit(Xtr, ytr)
    bad = LocalMeanRegressor(kernel="uniform", n_neighbors=3, weights=lambda d: d[:, :1]).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="weights \\(a callable\\) must return an array shaped"):
        bad.predict(Xte)
    negative = LocalMeanRegressor(kernel="uniform", n_neighbors=3, weights=lambda d: -d).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="finite weights >= 0"):
        negative.predict(Xte)


# -- kneighbors / radius_neighbors --------------------------------------------------------------------
@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_kneighbors_equals_scikit_learn(wine, Est):
    Xtr, Xte, ytr, _ = wine
    ours = Est(kernel="uniform", n_neighbors=4).fit(Xtr, ytr)
    ref = NearestNeighbors(n_neighbors=4).fit(Xtr)
    for X, k in [(Xte, None), (None, None), (Xte, 9), (None, 1)]:
        d, i = ours.kneighbors(X, n_neighbors=k)
        d_ref, i_ref = ref.kneighbors(X, n_neighbors=k)
        np.testing.assert_array_equal(i, i_ref)
        np.testing.assert_allclose(d, d_ref, rtol=TOL)
    np.testing.assert_array_equal(ours.kneighbors(Xte, return_distance=False), ref.kneighbors(Xte)[1])


def test_radius_neighbors_equals_scikit_learn(diabetes):
    Xtr, Xte, ytr = diabetes
    ours = LocalMeanRegressor(kernel="uniform", bandwidth=0.1).fit(Xtr, ytr)
    ref = NearestNeighbors(radius=0.1).fit(Xtr)
    for X, r in [(Xte, None), (None, None), (Xte, 0.07)]:
        d, i = ours.radius_neighbors(X, radius=r, sort_results=True)
        d_ref, i_ref = ref.radius_neighbors(X, radius=r, sort_results=True)
        assert len(i) == len(i_ref) and sum(map(len, i)) > len(i)
        for a, b in zip(i, i_ref):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(d, d_ref):
            np.testing.assert_allclose(a, b, rtol=TOL)
    unsorted = ours.radius_neighbors(Xte, return_distance=False)
    assert all(set(a) == set(b) for a, b in zip(unsorted, ref.radius_neighbors(Xte, return_distance=False)))


def test_neighbour_queries_refuse_bad_input(diabetes):
    Xtr, Xte, ytr = diabetes
    knn = LocalMeanRegressor(kernel="uniform", n_neighbors=3).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="n_neighbors <= n_samples_fit"):
        knn.kneighbors(Xte, n_neighbors=301)
    with pytest.raises(ValueError, match="n_neighbors <= n_samples_fit - 1 with X=None"):
        knn.kneighbors(n_neighbors=300)
    with pytest.raises(TypeError, match="n_neighbors must be an integer"):
        knn.kneighbors(Xte, n_neighbors=2.5)
    with pytest.raises(ValueError, match="radius must be given"):
        knn.radius_neighbors(Xte)
    with pytest.raises(ValueError, match="n_neighbors must be given"):
        LocalMeanRegressor(bandwidth=0.1).fit(Xtr, ytr).kneighbors(Xte)
    with pytest.raises(ValueError, match="radius must be a finite number >= 0"):
        knn.radius_neighbors(Xte, radius=-1.0)
    with pytest.raises(ValueError, match="return_distance must be True if sort_results is True"):
        knn.radius_neighbors(Xte, radius=0.1, return_distance=False, sort_results=True)
    with pytest.raises(ValueError, match="features"):
        knn.kneighbors(Xte[:, :3])


# -- outlier_label, several outputs, leave-one-out --------------------------------------------------------
@pytest.mark.parametrize("outlier_label", ["most_frequent", 1, 7])
def test_outlier_label_equals_radius_neighbors_classifier(wine, outlier_label):
    Xtr, Xte, ytr, _ = wine
    ref = RadiusNeighborsClassifier(2.5, weights="distance", outlier_label=outlier_label).fit(Xtr, ytr)
    ours = LocalMeanClassifier(kernel="uniform", bandwidth=2.5, weights="distance",
                               outlier_label=outlier_label).fit(Xtr, ytr)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        P_ref = ref.predict_proba(Xte)
        P = ours.predict_proba(Xte)
        labels, labels_ref = ours.predict(Xte), ref.predict(Xte)
    assert sum(len(n) == 0 for n in ours.radius_neighbors(Xte, return_distance=False)) == 10  # outliers
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=TOL)
    np.testing.assert_array_equal(labels, labels_ref)
    assert sum("not in training classes" in str(w.message) for w in seen) == (4 if outlier_label == 7 else 0)


def test_outlier_label_bad_values_are_named(wine):
    Xtr, _, ytr, _ = wine
    with pytest.raises(TypeError, match="dtype of outlier_label"):
        LocalMeanClassifier(kernel="uniform", bandwidth=2.0, outlier_label="none").fit(Xtr, ytr)
    with pytest.raises(ValueError, match="length of outlier_label"):
        LocalMeanClassifier(kernel="uniform", bandwidth=2.0, outlier_label=[0, 1]).fit(Xtr, ytr)
    with pytest.raises(TypeError, match="outlier_label of classes .* supposed to be a scalar"):
        LocalMeanClassifier(kernel="uniform", bandwidth=2.0, outlier_label=[[0, 1]]).fit(Xtr, ytr)
    with pytest.raises(InvalidParameterError, match="'outlier_label' parameter"):
        LocalMeanClassifier(outlier_label=object()).fit(Xtr, ytr)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_multi_output_classification_equals_scikit_learn(wine, weights):
    Xtr, Xte, ytr, _ = wine
    Y = np.c_[ytr, (Xtr[:, 0] > 0).astype(int) + 3, ytr % 2]
    ref = KNeighborsClassifier(5, weights=weights).fit(Xtr, Y)
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=5, weights=weights).fit(Xtr, Y)
    assert isinstance(ours.classes_, list) and len(ours.classes_) == 3
    for a, b in zip(ours.classes_, ref.classes_):
        np.testing.assert_array_equal(a, b)
    P, P_ref = ours.predict_proba(Xte), ref.predict_proba(Xte)
    assert isinstance(P, list) and len(P) == 3
    for a, b in zip(P, P_ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    # string labels in one output, and a radius with an outlier label per output
    names = np.array(["barolo", "grignolino", "barbera"])[ytr]
    Y = np.c_[names, names[::-1]]
    ours = LocalMeanClassifier(kernel="uniform", bandwidth=2.5, outlier_label=["barolo", "none"]).fit(Xtr, Y)
    ref = RadiusNeighborsClassifier(2.5, outlier_label=["barolo", "none"]).fit(Xtr, Y)
    with pytest.warns(UserWarning, match="Outlier label none is not in training classes") as seen:
        labels, labels_ref = ours.predict(Xte), ref.predict(Xte)
    assert [w.category for w in seen] == [LocalkitWarning, UserWarning]  # ours, and scikit-learn's
    np.testing.assert_array_equal(labels, labels_ref)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_leave_one_out_is_the_refit_without_the_point(wine, weights):
    Xtr, _, ytr, _ = wine
    X, y = Xtr[:60], ytr[:60]
    clf = LocalMeanClassifier(kernel="uniform", n_neighbors=5, weights=weights).fit(X, y)
    expected = np.array([KNeighborsClassifier(5, weights=weights).fit(np.delete(X, i, 0), np.delete(y, i))
                         .predict_proba(X[[i]])[0] for i in range(len(X))])
    np.testing.assert_allclose(clf.loo_predict_proba(), expected, rtol=0, atol=TOL)
    np.testing.assert_array_equal(clf.loo_predict(), clf.classes_[expected.argmax(1)])
    # the regressor's leave-one-out takes the weights too
    reg = LocalMeanRegressor(kernel="uniform", n_neighbors=5, weights=weights).fit(X, y)
    ref = [KNeighborsRegressor(5, weights=weights).fit(np.delete(X, i, 0), np.delete(y, i)).predict(X[[i]])[0]
           for i in range(len(X))]
    np.testing.assert_allclose(reg.loo_predict(), ref, rtol=TOL)


# -- metrics ----------------------------------------------------------------------------------------------
def _metric_cases(X):
    V = X.var(0, ddof=1) * np.linspace(0.5, 2.0, X.shape[1])
    VI = np.linalg.inv(np.cov(X.T) + 0.1 * np.eye(X.shape[1]))
    w = np.linspace(0.2, 3.0, X.shape[1])
    return [("minkowski", np.inf, None, "chebyshev", {}),
            ("seuclidean", 2, {"V": V}, "seuclidean", {"V": V}),
            ("mahalanobis", 2, {"VI": VI}, "mahalanobis", {"VI": VI}),
            ("minkowski", 3, {"w": w}, "minkowski", {"p": 3, "w": w})]


@pytest.mark.parametrize("case", range(4))
def test_metrics_equal_scikit_learn(wine, case):
    Xtr, Xte, ytr, _ = wine
    metric, p, params, ref_metric, ref_params = _metric_cases(Xtr)[case]
    # chebyshev ties at the k-th distance (wine repeats values): the same k-d tree breaks them alike
    # weighted minkowski: the reference takes p from metric_params, and warns that __init__'s p is ignored
    with pytest.warns(SyntaxWarning, match="Parameter p is found") if "p" in ref_params else nullcontext():
        ref = KNeighborsRegressor(6, weights="distance", metric=ref_metric, metric_params=ref_params or None,
                                  algorithm="kd_tree" if case == 0 else "brute").fit(Xtr, ytr)
        pred_ref, (d_ref, i_ref) = ref.predict(Xte), ref.kneighbors(Xte)
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=6, weights="distance", metric=metric, p=p,
                              metric_params=params).fit(Xtr, ytr)
    np.testing.assert_allclose(ours.predict(Xte), pred_ref, rtol=TOL)
    d, i = ours.kneighbors(Xte)
    np.testing.assert_array_equal(i, i_ref)
    np.testing.assert_allclose(d, d_ref, rtol=1e-10)
    # a fixed bandwidth on every path: the definition with scipy's distance
    D = cdist(Xte, Xtr, ref_metric, **{k: v for k, v in ref_params.items()})
    W = np.exp(-0.5 * (D / 2.0) ** 2)
    for algorithm in ("dense", "auto"):
        gauss = LocalMeanRegressor(bandwidth=2.0, metric=metric, p=p, metric_params=params, algorithm=algorithm)
        np.testing.assert_allclose(gauss.fit(Xtr, ytr).predict(Xte), (W @ ytr) / W.sum(1), rtol=1e-10)
    epa = LocalMeanRegressor(kernel="epanechnikov", bandwidth=4.0, metric=metric, p=p, metric_params=params,
                             empty="nan").fit(Xtr, ytr)
    W = np.clip(1 - (D / 4.0) ** 2, 0, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(epa.predict(Xte), (W @ ytr) / W.sum(1), rtol=1e-10)


def test_default_seuclidean_and_mahalanobis_are_the_samples_own(wine):
    Xtr, Xte, ytr, _ = wine
    for metric, key, value in [("seuclidean", "V", Xtr.var(0, ddof=1)), ("mahalanobis", "VI", np.linalg.inv(np.cov(Xtr.T)))]:
        ours = LocalMeanClassifier(kernel="uniform", n_neighbors=5, metric=metric).fit(Xtr, ytr)
        ref = KNeighborsClassifier(5, metric=metric, metric_params={key: value}, algorithm="brute").fit(Xtr, ytr)
        np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), atol=TOL)


def test_metric_params_bad_values_are_named(wine):
    Xtr, _, ytr, _ = wine
    d = Xtr.shape[1]
    cases = [({"metric": "seuclidean", "metric_params": {"V": np.ones(3)}}, ValueError, r"metric_params\['V'\].*shape"),
             ({"metric": "seuclidean", "metric_params": {"V": -np.ones(d)}}, ValueError, "variances V.* > 0"),
             ({"metric": "mahalanobis", "metric_params": {"VI": -np.eye(d)}}, ValueError, "positive semi-definite"),
             ({"metric": "mahalanobis", "metric_params": {"VI": np.triu(np.ones((d, d)))}}, ValueError, "symmetric"),
             ({"metric": "minkowski", "p": np.inf, "metric_params": {"w": np.ones(d)}}, ValueError, "finite p"),
             ({"metric": "minkowski", "metric_params": {"w": -np.ones(d)}}, ValueError, r"\['w'\] .* >= 0"),
             ({"metric": "euclidean", "metric_params": {"V": np.ones(d)}}, ValueError, "takes no parameters"),
             ({"metric": "seuclidean", "metric_params": {"VI": np.eye(d)}}, ValueError, r"takes the keys \['V'\]"),
             ({"metric": "mahalanobis", "metric_params": [1]}, InvalidParameterError, "'metric_params' parameter"),
             ({"metric": "braycurtis"}, InvalidParameterError, "'metric' parameter")]
    for params, error, match in cases:
        with pytest.raises(error, match=match):
            LocalMeanRegressor(kernel="uniform", n_neighbors=3, **params).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="more than one sample"):
        LocalMeanRegressor(kernel="uniform", n_neighbors=1, metric="seuclidean").fit(Xtr[:1], ytr[:1])


def test_callable_metric_takes_metric_params(wine):
    Xtr, Xte, ytr, _ = wine

    def scaled_l1(a, b, scale=1.0):
        return float(np.abs(a - b).sum() * scale)

    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=4, metric=scaled_l1, metric_params={"scale": 3.0})
    ref = KNeighborsRegressor(4, metric=scaled_l1, metric_params={"scale": 3.0}).fit(Xtr, ytr)
    np.testing.assert_allclose(ours.fit(Xtr, ytr).predict(Xte), ref.predict(Xte), rtol=TOL)
    np.testing.assert_allclose(ours.kneighbors(Xte)[0], ref.kneighbors(Xte)[0], rtol=TOL)


# -- scikit-learn's estimator checks on the new settings ---------------------------------------------------
@pytest.mark.parametrize("est", [
    LocalMeanClassifier(kernel="uniform", bandwidth=2.0, weights="distance", outlier_label="most_frequent"),
    LocalMeanRegressor(kernel="epanechnikov", bandwidth=2.0, weights="distance"),
    LocalMeanClassifier(metric="mahalanobis"),
    LocalMeanRegressor(metric="seuclidean"),
    LocalMeanRegressor(metric="minkowski", p=np.inf),
], ids=lambda e: repr(e).replace("\n", "").replace(" ", ""))
def test_check_estimator_on_the_new_settings(est):
    # bandwidth=2.0 is wide on some of the checks' small data: there it says so
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BandwidthWarning)
        check_estimator(est)
    assert all("bandwidth=2.0 is more than 3 times the data's spread" in str(w.message) for w in caught)


# -- kneighbors_graph (issue 41): scikit-learn's function and KNeighborsMixin method ---------------

@pytest.mark.parametrize("kw", [dict(), dict(mode="distance"), dict(include_self=True),
                                dict(metric="manhattan", mode="distance"), dict(metric="minkowski", p=3)])
def test_kneighbors_graph_equals_scikit_learns(kw):
    X = load_iris().data  # with repeated rows: ties broken as scikit-learn breaks them
    ours = kneighbors_graph(X, 5, **kw)
    ref = sk_kneighbors_graph(X, 5, **{"metric": "minkowski", **kw})
    assert ours.format == "csr" and ours.shape == ref.shape == (150, 150)
    np.testing.assert_array_equal(ours.indices, ref.indices)
    np.testing.assert_allclose(ours.toarray(), ref.toarray(), rtol=0, atol=1e-12)


def test_kneighbors_graph_method_and_refusals():
    X, y = load_wine(return_X_y=True)
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=4).fit(X, y)
    ref = KNeighborsRegressor(n_neighbors=4).fit(X, y)
    for args in [(), (X[:20],), (X[:20], 7, "distance")]:
        np.testing.assert_allclose(ours.kneighbors_graph(*args).toarray(), ref.kneighbors_graph(*args).toarray(),
                                   rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="mode must be one of"):
        ours.kneighbors_graph(mode="weights")
    with pytest.raises(ValueError, match="n_neighbors=178 must be at most n_samples - 1 = 177"):
        kneighbors_graph(X, 178)
    with pytest.raises(ValueError, match="'mode' parameter"):
        kneighbors_graph(X, 3, mode="weights")
