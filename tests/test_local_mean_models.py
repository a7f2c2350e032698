"""Nadaraya–Watson regression and kernel classification against statsmodels and scikit-learn."""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator
from statsmodels.nonparametric.kernel_regression import KernelReg

from localkit import LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=0)


@pytest.mark.parametrize("bw", [[0.03], [0.02, 0.05, 0.04]])
def test_nadaraya_watson_equals_statsmodels_kernelreg(diabetes, bw):
    Xtr, Xte, ytr, _ = diabetes
    d = len(bw)
    Xtr, Xte = Xtr[:, [2, 3, 8][:d]], Xte[:, [2, 3, 8][:d]]
    ref = KernelReg(ytr, Xtr, var_type="c" * d, reg_type="lc", bw=bw, rng=0).fit(Xte)[0]
    ours = LocalMeanRegressor(bandwidth=bw[0] if d == 1 else np.array(bw)).fit(Xtr, ytr).predict(Xte)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8)


@pytest.mark.parametrize("k", [1, 5, 12])
def test_knn_regression_equals_sklearn(diabetes, k):
    Xtr, Xte, ytr, _ = diabetes
    ref = KNeighborsRegressor(k).fit(Xtr, ytr).predict(Xte)
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=k).fit(Xtr, ytr).predict(Xte)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("loader,k", [(load_breast_cancer, 7), (load_wine, 4), (load_wine, 6)])
def test_knn_classification_equals_sklearn(loader, k):
    X, y = loader(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xtr, Xte, ytr, _ = train_test_split(X, y, test_size=0.3, random_state=1)
    ref = KNeighborsClassifier(k).fit(Xtr, ytr)
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=k).fit(Xtr, ytr)
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))


def test_classifier_string_labels_and_gaussian_probabilities():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    names = np.array(["barolo", "grignolino", "barbera"])[y]
    clf = LocalMeanClassifier(bandwidth=1.5).fit(X, names)
    P = clf.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0)
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / (2 * 1.5**2))
    onehot = (names[:, None] == clf.classes_[None]).astype(float)
    np.testing.assert_allclose(P, K @ onehot / K.sum(1)[:, None], rtol=1e-12)
    assert (clf.predict(X) == names).mean() > 0.9


def test_multi_output_regression(diabetes):
    Xtr, Xte, ytr, _ = diabetes
    Y = np.c_[ytr, 2 * ytr]
    pred = LocalMeanRegressor(bandwidth=0.05).fit(Xtr, Y).predict(Xte)
    assert pred.shape == (len(Xte), 2)
    np.testing.assert_allclose(pred[:, 1], 2 * pred[:, 0])


def test_loo_predict_is_leave_one_out(diabetes):
    Xtr, _, ytr, _ = diabetes
    reg = LocalMeanRegressor(bandwidth=0.05).fit(Xtr[:50], ytr[:50])
    expected = [LocalMeanRegressor(bandwidth=0.05).fit(np.delete(Xtr[:50], i, 0), np.delete(ytr[:50], i))
                .predict(Xtr[[i]])[0] for i in range(50)]
    np.testing.assert_allclose(reg.loo_predict(), expected, rtol=1e-12)


def test_rule_bandwidth_is_resolved(diabetes):
    Xtr, _, ytr, _ = diabetes
    reg = LocalMeanRegressor(bandwidth="silverman").fit(Xtr, ytr)
    assert reg.bandwidth_.shape == (Xtr.shape[1],) and np.all(reg.bandwidth_ > 0)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_check_estimator(Est):
    check_estimator(Est())


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
@pytest.mark.parametrize("params,X,match", [
    (dict(bandwidth=0.0), None, "'bandwidth' parameter .* must be a float in the range \\(0.0, inf\\)"),
    (dict(bandwidth=-2.0), None, "bandwidth"),
    (dict(bandwidth="wide"), None, "'bandwidth' parameter .* Got 'wide'"),
    (dict(kernel="box"), None, "'kernel' parameter .* must be a str among .*'gaussian'"),
    (dict(n_neighbors=0), None, "'n_neighbors' parameter .* must be an int in the range \\[1, inf\\) or None"),
    (dict(n_neighbors=100), None, "n_neighbors must be between 1"),
    (dict(empty="zero"), None, "'empty' parameter .* must be a str among"),
    (dict(algorithm="kd"), None, "'algorithm' parameter .* must be a str among"),
    (dict(), [[np.nan, 1.0]] * 10, "NaN"),
    (dict(), [[np.inf, 1.0]] * 10, "infinity"),
])
def test_bad_parameters_and_data(Est, params, X, match):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 2)) if X is None else np.array(X)
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match=match):
        Est(**params).fit(X, y)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_bad_queries(Est):
    rng = np.random.default_rng(0)
    est = Est().fit(rng.normal(size=(10, 2)), np.arange(10) % 2)
    with pytest.raises(ValueError, match="features"):
        est.predict(rng.normal(size=(3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        est.predict([[np.nan, 0.0]])
    with pytest.raises(ValueError, match="0 sample"):
        est.predict(np.zeros((0, 2)))


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_sample_point_bandwidth_is_the_definition(diabetes, Est):
    Xtr, Xte, ytr, _ = diabetes
    Xtr, Xte = Xtr[:150, :3], Xte[:20, :3]
    y = ytr[:150] if Est is LocalMeanRegressor else (ytr[:150] > 140).astype(int)
    est = Est(bandwidth=2.0, sample_neighbors=5).fit(Xtr, y)
    D = np.sqrt(((Xtr[:, None] - Xtr[None]) ** 2).sum(-1))
    h_i = np.sort(D, axis=1)[:, 5]  # column 0 is the sample itself
    Dq = np.sqrt(((Xte[:, None] - Xtr[None]) ** 2).sum(-1))
    K = np.exp(-0.5 * (Dq / (2.0 * h_i)) ** 2)
    np.testing.assert_allclose(est.sample_scale_, h_i, rtol=1e-12)
    out = est.predict(Xte) if Est is LocalMeanRegressor else est.predict_proba(Xte)[:, 1]
    np.testing.assert_allclose(out, K @ y / K.sum(1), rtol=1e-10)
    with pytest.raises(ValueError, match="sample_neighbors"):
        Est(sample_neighbors=3, n_neighbors=4).fit(Xtr, y)
    with pytest.raises(ValueError, match="sample_neighbors"):
        Est(sample_neighbors=150).fit(Xtr, y)
    cv = Est(bandwidth="cv", sample_neighbors=5).fit(Xtr, y)
    assert cv.bandwidth_ > 0 and np.isfinite(cv.cv_results_["loo_loss"]).all()


# -- issue 25: defaults that work on any scale, a warning for a bandwidth beyond the data's spread
def test_default_bandwidth_works_on_any_scale():
    """The default is Scott's rule per feature, scipy's gaussian_kde bandwidths: the same R^2 on
    diabetes as given (scaled) and raw, above KNeighborsRegressor()'s. The old default
    (bandwidth=1.0) gave the global mean there: R^2 -0.02 scaled, -0.23 raw."""
    from scipy.stats import gaussian_kde
    from sklearn.model_selection import cross_val_score

    X, y = load_diabetes(return_X_y=True)
    raw, _ = load_diabetes(return_X_y=True, scaled=False)
    scores = [cross_val_score(LocalMeanRegressor(), data, y).mean() for data in (X, raw)]
    knn = cross_val_score(KNeighborsRegressor(), X, y).mean()  # 0.377
    assert scores[0] == pytest.approx(scores[1], abs=1e-10)
    assert scores[0] > knn  # 0.397
    reg = LocalMeanRegressor().fit(raw, y)
    kde = gaussian_kde(raw.T, bw_method="scott")
    np.testing.assert_allclose(reg.bandwidth_, np.sqrt(np.diag(kde.covariance)), rtol=1e-12)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_default_rule_reads_weights_as_repeated_rows_or_as_gaussian_kde(Est):
    """scikit-learn's weight-equivalence check on the default (a rule); sample_weight_type="prior"
    keeps gaussian_kde(weights=)'s effective size instead."""
    from scipy.stats import gaussian_kde
    from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data

    check_sample_weight_equivalence_on_dense_data(Est.__name__, Est())
    X, y = load_wine(return_X_y=True)
    c = np.random.default_rng(0).integers(0, 4, size=len(X))
    weighted = Est().fit(X, y, sample_weight=c)
    repeated = Est().fit(np.repeat(X, c, axis=0), np.repeat(y, c))
    np.testing.assert_allclose(weighted.bandwidth_, repeated.bandwidth_, rtol=1e-12)
    prior = Est(sample_weight_type="prior").fit(X, y, sample_weight=c)
    kde = gaussian_kde(X.T, bw_method="scott", weights=c)
    np.testing.assert_allclose(prior.bandwidth_, np.sqrt(np.diag(kde.covariance)), rtol=1e-10)


def test_bandwidth_far_beyond_the_spread_warns():
    X, y = load_diabetes(return_X_y=True)  # spread 0.15: h = 1 is 6.6 times it
    with pytest.warns(UserWarning, match=r"bandwidth=1.0 is more than 3 times the data's spread .*global mean") as rec:
        LocalMeanRegressor(bandwidth=1.0).fit(X, y)
    assert rec[0].filename == __file__
    np.testing.assert_allclose(rec[0].message.spread, np.sqrt(np.sum(X.var(axis=0, ddof=1))), rtol=1e-12)
    with pytest.warns(UserWarning, match="more than 3 times"):
        LocalMeanClassifier(bandwidth=np.full(X.shape[1], 1.0)).fit(X, y > 140)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LocalMeanRegressor(bandwidth=0.05).fit(X, y)
        LocalMeanRegressor().fit(X, y)
        LocalMeanRegressor(kernel="uniform", n_neighbors=5).fit(X * 1e6, y)
        # a local line at a wide bandwidth is the global line (statsmodels' cv_ls picks h ~ 1e5 on bmi)
        LocalPolynomialRegressor(kernel="gaussian", degree=1, bandwidth=1e5).fit(X[:, 2:3], y)
    with pytest.warns(UserWarning, match="global mean"):
        LocalPolynomialRegressor(kernel="gaussian", degree=0, bandwidth=1e5).fit(X[:, 2:3], y)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_default_rule_bad_input(Est):
    X, y = load_wine(return_X_y=True)
    with pytest.raises(ValueError, match="sample_weight_type"):
        Est(sample_weight_type="counts").fit(X, y)
    with pytest.raises(ValueError, match=r"sample_weight_type='frequency' .* sum to more than 1 \(got 0.89"):
        Est().fit(X, y, sample_weight=np.full(len(X), 0.005))
    Est(sample_weight_type="prior").fit(X, y, sample_weight=np.full(len(X), 0.005))
    Est(bandwidth=2.0).fit(X, y, sample_weight=np.full(len(X), 0.005))  # a number: no count involved
    D = np.abs(X[:, :1] - X[:, 0])
    with pytest.raises(ValueError, match=r"bandwidth='scott' is a per-feature rule .* metric='precomputed' give a "
                                         "scalar bandwidth or n_neighbors"):
        Est(metric="precomputed").fit(D, y)
    Est(metric="precomputed", n_neighbors=5).fit(D, y)  # the rule goes unused
    with pytest.raises(ValueError, match="n_samples=1"):
        Est().fit(X[:1], y[:1])
