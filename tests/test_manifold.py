"""LocallyLinearEmbedding against scikit-learn's; LocalPCA against scikit-learn's PCA."""
import numpy as np
import pytest
from scipy.spatial import procrustes
from scipy.stats import spearmanr
from sklearn.datasets import load_digits, load_iris, make_s_curve, make_swiss_roll
from sklearn.decomposition import PCA
from sklearn.manifold import LocallyLinearEmbedding as SkLLE
from sklearn.manifold._locally_linear import barycenter_kneighbors_graph
from sklearn.utils.estimator_checks import check_estimator

from localkit import LocallyLinearEmbedding, LocalPCA


@pytest.fixture(scope="module")
def roll():
    return make_swiss_roll(800, random_state=0)[0]


# -- LocallyLinearEmbedding ----------------------------------------------------------------------

def test_weights_equal_sklearn_barycenter_graph(roll):
    ours = LocallyLinearEmbedding(n_neighbors=12, eigen_solver="dense").fit(roll).weights_
    ref = barycenter_kneighbors_graph(roll, 12, reg=1e-3)
    np.testing.assert_allclose(ours.toarray(), ref.toarray(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ours.sum(axis=1)).ravel(), 1.0, atol=1e-12)


def test_zero_trace_gram_uses_plain_reg():
    # a point whose neighbours all coincide with it: trace(G) = 0, sklearn adds reg itself
    X = np.r_[np.zeros((4, 2)), [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]
    ours = LocallyLinearEmbedding(n_neighbors=3, n_components=1, eigen_solver="dense").fit(X).weights_
    ref = barycenter_kneighbors_graph(X, 3, reg=1e-3)
    # G = 0 + reg * I: equal weights on the three coinciding neighbours
    np.testing.assert_allclose(ours[:4].data, 1.0 / 3.0, rtol=1e-12)
    np.testing.assert_allclose(ours.toarray()[4:], ref.toarray()[4:], atol=1e-12)


@pytest.mark.parametrize("n_neighbors, n_components", [(12, 2), (8, 3)])
def test_dense_embedding_matches_sklearn(roll, n_neighbors, n_components):
    ours = LocallyLinearEmbedding(n_neighbors=n_neighbors, n_components=n_components,
                                  eigen_solver="dense").fit(roll)
    ref = SkLLE(n_neighbors=n_neighbors, n_components=n_components, eigen_solver="dense").fit(roll)
    assert procrustes(ours.embedding_, ref.embedding_)[2] < 1e-6
    assert ours.reconstruction_error_ == pytest.approx(ref.reconstruction_error_, rel=1e-6)
    # new points: the same orthogonal map takes our transform onto sklearn's
    new = roll[:40] + 0.05
    both_ours = np.r_[ours.embedding_, ours.transform(new)]
    both_ref = np.r_[ref.embedding_, ref.transform(new)]
    assert procrustes(both_ours, both_ref)[2] < 1e-6


def test_arpack_matches_sklearn_arpack_and_dense(roll):
    ours = LocallyLinearEmbedding(n_neighbors=12, eigen_solver="arpack", random_state=0).fit(roll)
    ref = SkLLE(n_neighbors=12, eigen_solver="arpack", random_state=0).fit(roll)
    dense = LocallyLinearEmbedding(n_neighbors=12, eigen_solver="dense").fit(roll)
    assert procrustes(ours.embedding_, ref.embedding_)[2] < 1e-6
    assert procrustes(ours.embedding_, dense.embedding_)[2] < 1e-6
    assert ours.reconstruction_error_ == pytest.approx(ref.reconstruction_error_, rel=1e-4)
    # "auto" chooses arpack here (n > 200, few components), as sklearn does
    auto = LocallyLinearEmbedding(n_neighbors=12, random_state=0).fit(roll)
    np.testing.assert_allclose(auto.embedding_, ours.embedding_)


def test_embedding_is_orthonormal_and_unrolls_the_roll():
    X, t = make_swiss_roll(1500, random_state=0)
    Y = LocallyLinearEmbedding(n_neighbors=12, random_state=0).fit_transform(X)
    np.testing.assert_allclose(Y.T @ Y, np.eye(2), atol=1e-6)
    # one embedding axis orders the points along the roll (a monotone map of t)
    assert max(abs(spearmanr(Y[:, j], t)[0]) for j in range(2)) > 0.99


@pytest.mark.parametrize("scale", [1e160, 1e-200])
def test_the_embedding_does_not_depend_on_the_datas_scale(roll, scale):
    """Weights and embedding are scale-invariant; at 1e160 squared distances overflow and at
    1e-200 the Gram matrices underflow unless the data are rescaled (by a power of two) first."""
    X = roll[:300]
    ref = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense").fit(X)
    ours = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense").fit(X * scale)
    np.testing.assert_allclose(ours.weights_.toarray(), ref.weights_.toarray(), atol=1e-10)
    assert procrustes(ours.embedding_, ref.embedding_)[2] < 1e-10
    new = (X[:20] + 0.05) * scale
    assert procrustes(np.r_[ours.embedding_, ours.transform(new)],
                      np.r_[ref.embedding_, ref.transform(new / scale)])[2] < 1e-10


def test_permuting_the_samples_permutes_the_embedding(roll):
    perm = np.random.default_rng(0).permutation(len(roll))
    a = LocallyLinearEmbedding(n_neighbors=12, eigen_solver="dense").fit_transform(roll)
    b = LocallyLinearEmbedding(n_neighbors=12, eigen_solver="dense").fit_transform(roll[perm])
    assert procrustes(a[perm], b)[2] < 1e-8


def test_fit_is_independent_of_threads(roll):
    a = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense", n_jobs=1).fit(roll)
    b = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense", n_jobs=2).fit(roll)
    np.testing.assert_allclose(a.weights_.toarray(), b.weights_.toarray(), atol=1e-14)


@pytest.mark.parametrize("params, match", [
    ({"n_neighbors": 30}, "n_neighbors must be < n_samples=30"),
    ({"n_neighbors": 0}, "n_neighbors"),
    ({"n_neighbors": 2.5}, "'n_neighbors' parameter .* must be an int"),
    ({"n_components": 4}, "n_components must be between 1 and 3"),
    ({"reg": -1.0}, "'reg' parameter .* must be a float in the range \\[0.0, inf\\)"),
    ({"eigen_solver": "lobpcg"}, "'eigen_solver' parameter .* must be a str among"),
    ({"max_iter": 0}, "max_iter"),
    ({"reg": 0.0, "n_neighbors": 8}, "8 neighbours in 3 dimensions it needs reg > 0"),  # singular Gram matrices
])
def test_lle_bad_parameters(params, match):
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises((ValueError, TypeError), match=match):
        LocallyLinearEmbedding(**params).fit(X)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_lle_rejects_non_finite(bad):
    X = np.random.default_rng(0).normal(size=(30, 3))
    X[3, 1] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        LocallyLinearEmbedding().fit(X)
    lle = LocallyLinearEmbedding().fit(np.nan_to_num(X, posinf=0.0, nan=0.0))
    with pytest.raises(ValueError, match="NaN|infinity"):
        lle.transform(X)


def test_lle_rejects_empty_and_wrong_width():
    with pytest.raises(ValueError):
        LocallyLinearEmbedding().fit(np.zeros((0, 3)))
    lle = LocallyLinearEmbedding().fit(np.random.default_rng(0).normal(size=(30, 3)))
    with pytest.raises(ValueError, match="features"):
        lle.transform(np.zeros((2, 4)))


# -- modified LLE, Hessian eigenmaps, LTSA ---------------------------------------------------------

@pytest.fixture(scope="module")
def lle_data():
    return {"s_curve": make_s_curve(600, random_state=0)[0], "digits": load_digits().data[:500],
            "iris": load_iris().data}


# well-posed cases only: where M's null space has more than 1 + n_components dimensions (a 2-D
# S-curve embedded in 3-D, LTSA with fewer neighbours than a 3-D tangent plane needs), or more
# than one dimension at 0 (a kNN graph in several pieces: digits[:500] with 12 neighbours, whose
# LTSA eigenvalues are 1.5e-15, 1.5e-15, 0.024), the embedding is any basis of it, scikit-learn's
# as much as ours (a full run's round-off picked another one: disparity 0.13)
@pytest.mark.parametrize("data, method, n_neighbors, n_components", [
    ("s_curve", "modified", 12, 2), ("s_curve", "hessian", 12, 2), ("s_curve", "ltsa", 12, 2),
    ("digits", "modified", 15, 3), ("digits", "hessian", 15, 3), ("digits", "ltsa", 15, 2),
    ("iris", "modified", 12, 2), ("iris", "hessian", 15, 3), ("iris", "modified", 15, 3),
])
def test_methods_match_sklearn_dense(lle_data, data, method, n_neighbors, n_components):
    X = lle_data[data]
    params = dict(n_neighbors=n_neighbors, n_components=n_components, method=method, eigen_solver="dense")
    ours = LocallyLinearEmbedding(**params).fit(X)
    ref = SkLLE(**params).fit(X)
    # measured: disparities 1e-28 .. 6e-9 (digits, hessian), errors equal to 1e-9 relative
    assert procrustes(ours.embedding_, ref.embedding_)[2] < 1e-6
    assert ours.reconstruction_error_ == pytest.approx(ref.reconstruction_error_, rel=1e-6)
    assert not hasattr(ours, "weights_")
    new = X[:30] + 0.05 * X.std(axis=0)
    assert procrustes(np.r_[ours.embedding_, ours.transform(new)], np.r_[ref.embedding_, ref.transform(new)])[2] < 1e-6


@pytest.mark.parametrize("method", ["modified", "hessian", "ltsa"])
def test_methods_arpack_match_sklearn_and_dense(lle_data, method):
    X = lle_data["s_curve"]
    ours = LocallyLinearEmbedding(n_neighbors=12, method=method, eigen_solver="arpack", random_state=0).fit(X)
    ref = SkLLE(n_neighbors=12, method=method, eigen_solver="arpack", random_state=0).fit(X)
    dense = LocallyLinearEmbedding(n_neighbors=12, method=method, eigen_solver="dense").fit(X)
    assert procrustes(ours.embedding_, ref.embedding_)[2] < 1e-6
    assert procrustes(ours.embedding_, dense.embedding_)[2] < 1e-6
    assert ours.reconstruction_error_ == pytest.approx(ref.reconstruction_error_, rel=1e-4)


@pytest.mark.parametrize("method", ["modified", "hessian", "ltsa"])
def test_methods_independent_of_threads_and_scale(lle_data, method):
    X = lle_data["s_curve"][:300]
    a = LocallyLinearEmbedding(n_neighbors=10, method=method, eigen_solver="dense", n_jobs=1).fit(X)
    b = LocallyLinearEmbedding(n_neighbors=10, method=method, eigen_solver="dense", n_jobs=2).fit(X * 1e160)
    assert procrustes(a.embedding_, b.embedding_)[2] < 1e-10


def test_refit_with_another_method_drops_the_weights(roll):
    lle = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense").fit(roll[:200])
    assert lle.weights_.shape == (200, 200)
    assert not hasattr(lle.set_params(method="ltsa").fit(roll[:200]), "weights_")


@pytest.mark.parametrize("params, match", [
    ({"method": "hessian", "n_neighbors": 5, "n_components": 2},
     r"method='hessian' needs n_neighbors > n_components \* \(n_components \+ 3\) / 2 = 5, got n_neighbors=5"),
    ({"method": "modified", "n_neighbors": 2, "n_components": 3}, "method='modified' needs n_neighbors >= n_components=3"),
    ({"method": "isomap"}, "'method' parameter .* must be a str among"),
    ({"hessian_tol": -1.0}, "'hessian_tol' parameter"),
    ({"modified_tol": "x"}, "'modified_tol' parameter"),
])
def test_method_bad_parameters(params, match):
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises((ValueError, TypeError), match=match):
        LocallyLinearEmbedding(**params).fit(X)


# -- LocalPCA ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def iris():
    return load_iris().data


@pytest.mark.filterwarnings("error::UserWarning")  # a wide kernel is global PCA, a sound fit: no warning
def test_local_pca_tends_to_global_pca(iris):
    n = len(iris)
    ref = PCA(n_components=3).fit(iris)
    errors = []
    for h in [10.0, 100.0, 1e4, 1e6]:
        res = LocalPCA(n_components=3, bandwidth=h).fit(iris).local_pca(iris[::15])
        errors.append(np.abs(res.components - ref.components_).max())
        if h == 1e6:
            np.testing.assert_allclose(res.components, np.broadcast_to(ref.components_, res.components.shape),
                                       atol=1e-9)
            # the weighted covariance divides by n, sklearn's by n - 1
            np.testing.assert_allclose(res.explained_variance * n / (n - 1),
                                       np.broadcast_to(ref.explained_variance_, res.explained_variance.shape),
                                       rtol=1e-9)
            np.testing.assert_allclose(res.explained_variance_ratio,
                                       np.broadcast_to(ref.explained_variance_ratio_, (10, 3)), atol=1e-9)
            np.testing.assert_allclose(res.mean, np.broadcast_to(ref.mean_, res.mean.shape), atol=1e-9)
    assert all(a > b for a, b in zip(errors, errors[1:]))


def test_knn_uniform_local_pca_is_pca_of_the_neighbours(iris):
    k = 25
    lpca = LocalPCA(n_components=2, kernel="uniform", n_neighbors=k).fit(iris)
    queries = iris[[3, 70, 120]] + 0.01
    res = lpca.local_pca(queries)
    for q, comps, var in zip(queries, res.components, res.explained_variance):
        nearest = np.argsort(((iris - q) ** 2).sum(axis=1))[:k]
        ref = PCA(n_components=2).fit(iris[nearest])
        np.testing.assert_allclose(comps, ref.components_, atol=1e-8)
        np.testing.assert_allclose(var * k / (k - 1), ref.explained_variance_, rtol=1e-8)


def test_local_components_follow_a_curve():
    t = np.linspace(0, np.pi, 300)
    X = np.c_[np.cos(t), np.sin(t)]
    lpca = LocalPCA(n_components=1, bandwidth=0.05).fit(X)
    comps = lpca.local_components(X[10::40])[:, 0]
    tangent = np.c_[-np.sin(t[10::40]), np.cos(t[10::40])]
    np.testing.assert_allclose(np.abs(np.sum(comps * tangent, axis=1)), 1.0, atol=1e-3)
    assert lpca.local_explained_variance(X[:3]).shape == (3, 1)


def test_local_pca_ignores_sample_order(iris):
    perm = np.random.default_rng(0).permutation(len(iris))
    a = LocalPCA(bandwidth=0.5).fit(iris).local_pca(iris[:10])
    b = LocalPCA(bandwidth=0.5).fit(iris[perm]).local_pca(iris[:10])
    np.testing.assert_allclose(a.components, b.components, atol=1e-10)
    np.testing.assert_allclose(a.explained_variance, b.explained_variance, rtol=1e-10)


def test_local_pca_translation_invariant(iris):
    a = LocalPCA(n_components=2, bandwidth=0.7).fit(iris).local_pca(iris[:20])
    b = LocalPCA(n_components=2, bandwidth=0.7).fit(iris + 1e4).local_pca(iris[:20] + 1e4)
    np.testing.assert_allclose(a.components, b.components, atol=1e-6)
    np.testing.assert_allclose(a.explained_variance, b.explained_variance, rtol=1e-6)


@pytest.mark.parametrize("params, match", [
    ({"n_components": 5}, "n_components must be between 1 and 4"),
    ({"n_components": 0}, "n_components"),
    ({"bandwidth": 0.0}, "bandwidth"),
    ({"bandwidth": -1.0}, "bandwidth"),
    ({"kernel": "nope"}, "'kernel' parameter .* must be a str among"),
    ({"n_neighbors": 151}, "n_neighbors must be between 1 and n_samples=150"),
])
def test_local_pca_bad_parameters(iris, params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LocalPCA(**params).fit(iris)


def test_local_pca_bad_queries(iris):
    lpca = LocalPCA().fit(iris)
    with pytest.raises(ValueError, match="NaN|infinity"):
        lpca.local_components([[np.nan, 0, 0, 0]])
    with pytest.raises(ValueError, match="features"):
        lpca.local_components([[0.0, 0.0]])


# not method="hessian" or "ltsa": on the check's two tight blobs their M has a null space of more
# than 1 + n_components dimensions, and transform(X) (the standard local model) is 0.05 away from
# the embedding, beyond the check's 1e-2, for scikit-learn's LocallyLinearEmbedding as for ours
@pytest.mark.parametrize("est", [LocallyLinearEmbedding(), LocallyLinearEmbedding(method="modified"), LocalPCA()],
                         ids=lambda e: f"{type(e).__name__}-{getattr(e, 'method', '')}")
def test_check_estimator(est):
    check_estimator(est)


def test_local_pca_in_float32_far_from_the_centre():
    # a thin arc of radius 10, h = 0.1: moments about the data's centre lost (R / h)^2 = 1e4 of
    # float32's digits (the normal variances came out 0 or 3x too large); about each query they keep them
    rng = np.random.default_rng(0)
    t = np.linspace(0, np.pi, 4000)
    X = np.c_[10 * np.cos(t), 10 * np.sin(t)] + 0.001 * rng.standard_normal((4000, 2))
    Q = X[[100, 2000, 3900]]
    ref = LocalPCA(2, bandwidth=0.1).fit(X).local_pca(Q)
    got = LocalPCA(2, bandwidth=0.1).fit(X.astype(np.float32)).local_pca(Q.astype(np.float32))
    assert got.explained_variance.dtype == np.float32
    np.testing.assert_allclose(got.explained_variance, ref.explained_variance, rtol=1e-3)
    np.testing.assert_allclose(np.abs(got.components), np.abs(ref.components), atol=1e-4)
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-6)
    w = np.exp(-0.5 * ((X[None] - Q[:, None]) ** 2).sum(-1) / 0.01)  # the weighted covariance, directly
    w /= w.sum(axis=1, keepdims=True)
    m = w @ X
    C = np.einsum("qi,qid,qie->qde", w, X[None] - m[:, None], X[None] - m[:, None])
    np.testing.assert_allclose(ref.explained_variance, np.linalg.eigvalsh(C)[:, ::-1], rtol=1e-8)


def test_local_pca_empty_nan_and_cv(iris):
    lpca = LocalPCA(kernel="uniform", bandwidth=0.1, empty="nan").fit(iris)
    with pytest.warns(RuntimeWarning, match="some queries have an empty neighbourhood; their local PCA results are NaN") as rec:
        Z = lpca.transform(np.r_[iris[:2] + 100, iris[:3]])
    assert (rec[0].message.n_empty, rec[0].message.n_queries) == (2, 5)
    assert np.isnan(Z[:2]).all() and np.isfinite(Z[2:]).all()
    with pytest.raises(ValueError, match="empty neighbourhood"):
        LocalPCA(kernel="uniform", bandwidth=0.1, empty="raise").fit(iris).transform(iris[:2] + 100)
    near = LocalPCA(kernel="uniform", bandwidth=0.1).fit(iris).local_pca(iris[:1] + 100)
    np.testing.assert_array_equal(near.mean, iris[[np.argmin(((iris - iris[0] - 100) ** 2).sum(1))]])
    with pytest.raises(ValueError, match="bandwidth"):
        LocalPCA(bandwidth="cv").fit(iris)


def test_local_pca_on_thousands_of_features_speaks_of_its_own_parameters():
    """d = 1,000 raised RecursionError (a recursive listing of monomials); beyond the memory
    budget the error names n_features and the covariance, not a degree LocalPCA does not have."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 2500))
    z = LocalPCA(n_components=1, bandwidth=100.0).fit(X[:, :1000]).transform(X[:2, :1000])
    assert z.shape == (2, 1) and np.all(np.isfinite(z))
    with pytest.raises(ValueError, match=r"covariance per query, and n_features=2500 is more than the memory") as err:
        LocalPCA(n_components=1, bandwidth=100.0).fit(X).transform(X[:1])
    assert "degree" not in str(err.value) and "monomial" not in str(err.value)
