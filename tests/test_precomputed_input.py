"""metric="precomputed": the matrices are checked where the estimators validate their input, as
scikit-learn's ``NearestNeighbors(metric="precomputed")`` checks them: fit takes a square matrix of
non-negative distances, predict non-negative query distances. Before, negative distances were
taken as their absolute values (u^2) and a non-square fit matrix was refused only at predict."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import load_iris, load_wine
from sklearn.preprocessing import StandardScaler

from localkit import KernelDensity, LocalMeanClassifier, LocalMeanRegressor, kernel_density


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return cdist(X[:120], X[:120]), cdist(X[120:], X[:120]), y[:120]


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
@pytest.mark.parametrize("params", [dict(kernel="gaussian", bandwidth=2.0), dict(kernel="epanechnikov", bandwidth=3.0),
                                    dict(kernel="uniform", n_neighbors=5)])
def test_negative_distances_are_refused_at_fit(Est, params, wine):
    D, _, y = wine
    with pytest.raises(ValueError, match="X holds negative distances.*precomputed.*>= 0"):
        Est(metric="precomputed", **params).fit(-D, y)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_negative_query_distances_are_refused_at_predict(Est, wine):
    D, Dq, y = wine
    est = Est(kernel="gaussian", bandwidth=2.0, metric="precomputed").fit(D, y)
    est.predict(Dq)  # valid distances pass
    with pytest.raises(ValueError, match="X holds negative distances"):
        est.predict(-Dq)


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_non_square_fit_matrix_is_refused_at_fit(Est, wine):
    D, _, y = wine
    with pytest.raises(ValueError, match=r"X must be the square \(n_samples, n_samples\).*got shape \(120, 60\)"):
        Est(kernel="gaussian", bandwidth=2.0, metric="precomputed").fit(D[:, :60], y)


def test_sample_neighbors_checks_before_scaling(wine):
    D, _, y = wine
    with pytest.raises(ValueError, match="negative distances"):
        LocalMeanRegressor(bandwidth=1.0, sample_neighbors=3, metric="precomputed").fit(-D, y)


def test_kernel_density_takes_no_precomputed_distances(wine):
    # its normaliser c_d is the Euclidean one: a precomputed matrix is refused by name
    D, Dq, _ = wine
    with pytest.raises(ValueError, match="metric"):
        kernel_density(Dq, D, metric="precomputed")
    with pytest.raises(ValueError, match="metric"):  # KernelDensity takes the norm metrics (issue 25), not this
        KernelDensity(metric="precomputed").fit(D)


@pytest.mark.parametrize("make", [
    lambda m: LocalMeanClassifier(kernel="uniform", n_neighbors=5, metric=m),
    lambda m: LocalMeanRegressor(kernel="epanechnikov", n_neighbors=9, metric=m),
])
def test_cross_validation_slices_precomputed_distances_as_pairwise(make):
    """With metric="precomputed" the estimators carry scikit-learn's pairwise tag, so that
    cross_val_score and GridSearchCV slice the distance matrix on both axes (fit refused it)."""
    from sklearn.metrics import pairwise_distances
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

    X, y = load_iris(return_X_y=True)
    y = y if isinstance(make("euclidean"), LocalMeanClassifier) else X[:, 3]
    X = X[:, :3]
    cv = KFold(5, shuffle=True, random_state=0)
    on_features = cross_val_score(make("euclidean"), X, y, cv=cv)
    on_distances = cross_val_score(make("precomputed"), pairwise_distances(X), y, cv=cv)
    np.testing.assert_allclose(on_distances, on_features, rtol=1e-12)
    grid = GridSearchCV(make("precomputed"), {"n_neighbors": [3, 7]}, cv=cv).fit(pairwise_distances(X), y)
    assert grid.best_score_ == pytest.approx(GridSearchCV(make("euclidean"), {"n_neighbors": [3, 7]}, cv=cv)
                                             .fit(X, y).best_score_, rel=1e-12)
