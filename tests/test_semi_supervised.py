"""RelaxationLabeling against scikit-learn's LabelPropagation and LabelSpreading."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris, make_moons
from scipy import sparse
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import pairwise_distances
from sklearn.metrics.pairwise import cosine_similarity, rbf_kernel
from sklearn.semi_supervised import LabelPropagation, LabelSpreading
from sklearn.utils.estimator_checks import check_estimator

from localkit import RelaxationLabeling, local_mean
from localkit.models import semi_supervised


def partial_labels(y, n_labelled, seed=0):
    rng = np.random.default_rng(seed)
    y_partial = np.full_like(y, -1)
    # at least one labelled sample per class, then random ones
    idx = np.concatenate([np.flatnonzero(y == c)[:1] for c in np.unique(y)])
    idx = np.unique(np.concatenate([idx, rng.choice(len(y), n_labelled - len(idx), replace=False)]))
    y_partial[idx] = y[idx]
    return y_partial


@pytest.fixture(scope="module")
def moons():
    X, y = make_moons(300, noise=0.1, random_state=0)
    return X, y, partial_labels(y, 10)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y, partial_labels(y, 15)


def assert_same(ours, ref, X):
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours.transduction_, ref.transduction_)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.predict_proba(X + 0.05), ref.predict_proba(X + 0.05), rtol=0, atol=1e-6)


@pytest.mark.parametrize("data, h", [("moons", 0.3), ("moons", 0.15), ("iris", 0.5)])
def test_clamped_gaussian_reproduces_label_propagation_rbf(data, h, request):
    X, _, y_partial = request.getfixturevalue(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LabelPropagation(kernel="rbf", gamma=1 / (2 * h * h), max_iter=1000, tol=1e-3).fit(X, y_partial)
        ours = RelaxationLabeling(kernel="gaussian", bandwidth=h, max_iter=1000, tol=1e-3).fit(X, y_partial)
    assert_same(ours, ref, X)


def test_uniform_knn_kernel_reproduces_label_propagation_knn(moons):
    X, _, y_partial = moons
    ref = LabelPropagation(kernel="knn", n_neighbors=7, max_iter=2000).fit(X, y_partial)
    ours = RelaxationLabeling(kernel="uniform", n_neighbors=7, max_iter=2000).fit(X, y_partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-6)
    assert ours.n_iter_ == ref.n_iter_
    Q = X[::5] + 0.013  # off the samples: no distance ties between neighbours
    np.testing.assert_allclose(ours.predict_proba(Q), ref.predict_proba(Q), rtol=0, atol=1e-6)


def test_permuting_the_samples_permutes_the_label_distributions(moons):
    X, _, y_partial = moons
    perm = np.random.default_rng(3).permutation(len(X))
    a = RelaxationLabeling(bandwidth=0.3).fit(X, y_partial)
    b = RelaxationLabeling(bandwidth=0.3).fit(X[perm], y_partial[perm])
    np.testing.assert_allclose(b.label_distributions_, a.label_distributions_[perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.2, 0.8])
def test_symmetric_soft_clamping_reproduces_label_spreading(moons, iris, alpha):
    for X, _, y_partial in (moons, iris):
        ref = LabelSpreading(kernel="rbf", gamma=1 / (2 * 0.3 ** 2), alpha=alpha).fit(X, y_partial)
        ours = RelaxationLabeling(bandwidth=0.3, alpha=alpha, normalization="symmetric").fit(X, y_partial)
        np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-6)
        assert ours.n_iter_ == ref.n_iter_


def test_default_max_iter_follows_the_reference_of_the_clamping(iris):
    # LabelPropagation's default max_iter is 1000 (here it converges after 460 > 30 iterations),
    # LabelSpreading's 30 (alpha=0.99 is far from converged there); the rest at both libraries'
    # defaults, gamma=20 being bandwidth=sqrt(1/40)
    X, _, y_partial = iris
    h = np.sqrt(1 / 40)
    ref = LabelPropagation().fit(X, y_partial)
    ours = RelaxationLabeling(bandwidth=h).fit(X, y_partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-12)
    assert ours.n_iter_ == ref.n_iter_ > 30
    with pytest.warns(ConvergenceWarning):
        ref = LabelSpreading(alpha=0.99).fit(X, y_partial)
    with pytest.warns(ConvergenceWarning, match="30"):
        ours = RelaxationLabeling(bandwidth=h, alpha=0.99, normalization="symmetric").fit(X, y_partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-12)
    assert ours.n_iter_ == ref.n_iter_ == 30 and ours.max_iter is None


def test_points_no_label_reaches_warn_and_agree_with_label_propagation():
    # a 3-NN graph on iris with 15% labelled: some components hold no label
    X, y = load_iris(return_X_y=True)
    y_partial = partial_labels(y, 22)
    ref = LabelPropagation(kernel="knn", n_neighbors=3).fit(X, y_partial)
    n_empty = int(np.sum(ref.label_distributions_.sum(axis=1) == 0))
    assert n_empty > 0
    with pytest.warns(UserWarning, match="some training samples received no label mass") as record:
        ours = RelaxationLabeling(kernel="uniform", n_neighbors=3).fit(X, y_partial)
    assert len(record) == 1 and "classes_[0] = 0" in str(record[0].message)
    empty_rows = np.flatnonzero(ref.label_distributions_.sum(axis=1) == 0)
    assert (record[0].message.n_empty, record[0].message.n_queries) == (n_empty, 150)
    np.testing.assert_array_equal(record[0].message.rows, empty_rows)
    np.testing.assert_array_equal(ours.label_distributions_, ref.label_distributions_)
    np.testing.assert_array_equal(ours.transduction_, ref.transduction_)

    Q = X[::7] + 0.013  # off the samples: no distance ties between neighbours
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scikit-learn's 0 / 0
        ref_proba, ref_pred = ref.predict_proba(Q), ref.predict(Q)
    nan_rows = np.flatnonzero(np.isnan(ref_proba).any(axis=1))
    assert 0 < len(nan_rows) < len(Q)
    with pytest.warns(UserWarning, match="some queries received no label mass.*NaN") as record:
        proba = ours.predict_proba(Q)
    assert len(record) == 1 and (record[0].message.n_empty, record[0].message.n_queries) == (len(nan_rows), len(Q))
    np.testing.assert_array_equal(record[0].message.rows, nan_rows)
    np.testing.assert_allclose(proba, ref_proba, rtol=0, atol=1e-12)  # NaN where scikit-learn's are
    with pytest.warns(UserWarning, match="queries received no label mass"):
        np.testing.assert_array_equal(ours.predict(Q), ref_pred)


def test_dask_queries_warn_once_per_chunk_naming_the_chunk_and_the_rows_of_the_array():
    da = pytest.importorskip("dask.array")
    X, y = load_iris(return_X_y=True)
    with pytest.warns(UserWarning, match="training samples received no label mass"):
        model = RelaxationLabeling(kernel="uniform", n_neighbors=3).fit(X, partial_labels(y, 22))
    Q = X[::7] + 0.013
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model.predict_proba(Q)
    empty = np.isnan(expected).any(axis=1)
    chunks = [(0, 8), (8, 16), (16, 22)]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lazy = model.predict_proba(da.from_array(Q, chunks=8))
        assert not record  # building the graph computes nothing the user asked for
        proba = lazy.compute(scheduler="synchronous")
    np.testing.assert_array_equal(np.isnan(proba), np.isnan(expected))
    np.testing.assert_allclose(proba, expected, rtol=0, atol=1e-15)
    expected = {(a, b): a + np.flatnonzero(empty[a:b]) for a, b in chunks if empty[a:b].any()}
    assert len(record) == len(expected) > 0
    got = {w.message.chunk: w.message.rows for w in record}  # the chunks run in any order
    assert got.keys() == expected.keys()
    for chunk, rows in expected.items():
        np.testing.assert_array_equal(got[chunk], rows)
    assert len({str(w.message) for w in record}) == 1  # one message: shown once under Python's default action


def test_no_warning_when_every_point_gets_label_mass(iris):
    X, _, y_partial = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = RelaxationLabeling(bandwidth=0.5).fit(X, y_partial).predict_proba(X + 0.05)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_one_step_is_the_local_mean_then_clamping(moons):
    X, _, y_partial = moons
    with pytest.warns(ConvergenceWarning):
        one = RelaxationLabeling(bandwidth=0.3, max_iter=1).fit(X, y_partial)
    labelled = y_partial != -1
    Y = np.zeros((len(X), 2))
    Y[labelled, y_partial[labelled]] = 1
    m = local_mean(X, X, Y, "gaussian", 0.3)
    expected = np.where(labelled[:, None], Y, m / m.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(one.label_distributions_, expected, rtol=0, atol=1e-12)


def test_soft_clamping_with_the_local_mean_labels_the_moons(moons):
    X, y, y_partial = moons
    model = RelaxationLabeling(bandwidth=0.3, alpha=0.2).fit(X, y_partial)
    assert (model.transduction_ == y).mean() > 0.95
    np.testing.assert_allclose(model.label_distributions_.sum(axis=1), 1.0)


def test_compatibility_update_is_rosenfeld_hummel_zucker(moons):
    X, y, y_partial = moons
    r = np.array([[1.0, -1.0], [-1.0, 1.0]])
    with pytest.warns(ConvergenceWarning):
        one = RelaxationLabeling(bandwidth=0.3, compatibility=r, max_iter=1).fit(X, y_partial)
    labelled = y_partial != -1
    P = np.full((len(X), 2), 0.5)
    P[labelled] = 0
    P[labelled, y_partial[labelled]] = 1
    q = local_mean(X, X, P, "gaussian", 0.3) @ r.T
    new = P * (1 + q)
    new /= new.sum(axis=1, keepdims=True)
    expected = np.where(labelled[:, None], P, new)
    np.testing.assert_allclose(one.label_distributions_, expected, rtol=0, atol=1e-12)
    model = RelaxationLabeling(bandwidth=0.3, compatibility=r).fit(X, y_partial)
    assert (model.transduction_ == y).mean() > 0.95


def test_string_labels_and_predict(iris):
    X, y, y_partial = iris
    names = np.array(["setosa", "versicolor", "virginica"])
    model = RelaxationLabeling(bandwidth=0.5).fit(X, names[y])
    assert set(model.predict(X)) <= set(names)



# -- given weights: a callable kernel(A, B) and kernel="precomputed" ------------------------------

def rbf_affinity(A, B):
    return rbf_kernel(A, B, gamma=5.0)


def radius_graph(A, B):
    """A sparse symmetric affinity: Gaussian weights within distance 0.3 (0 beyond)."""
    D = pairwise_distances(A, B)
    return sparse.csr_matrix(np.where(D <= 0.3, np.exp(-D ** 2 / 0.05), 0.0))


def exp_cosine(A, B):
    """Not a function of the distance: exp(3 cos(a, b)), the data moved off the origin."""
    return np.exp(3 * cosine_similarity(A + 2, B + 2))


@pytest.mark.filterwarnings("ignore:.* received no label mass:UserWarning")  # radius graph, 5 iterations: as sklearn
@pytest.mark.parametrize("affinity", [rbf_affinity, radius_graph, exp_cosine], ids=lambda f: f.__name__)
@pytest.mark.parametrize("alpha", [None, 0.2, 0.8])
def test_callable_kernel_reproduces_scikit_learn(moons, affinity, alpha):
    """The same callable in both: LabelPropagation (alpha=None, the local mean) and LabelSpreading
    (the symmetric normalisation); measured: 7e-16 at most, same iterations and labels."""
    X, _, y_partial = moons
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if alpha is None:
            ref = LabelPropagation(kernel=affinity, max_iter=1000).fit(X, y_partial)
            ours = RelaxationLabeling(kernel=affinity, max_iter=1000).fit(X, y_partial)
        else:
            ref = LabelSpreading(kernel=affinity, alpha=alpha).fit(X, y_partial)
            ours = RelaxationLabeling(kernel=affinity, alpha=alpha, normalization="symmetric").fit(X, y_partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ours.transduction_, ref.transduction_)
    assert ours.n_iter_ == ref.n_iter_
    Q = X[::7] + 0.03
    np.testing.assert_allclose(ours.predict_proba(Q), ref.predict_proba(Q), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ours.predict(Q), ref.predict(Q))
    assert ours.kernel_ is affinity


@pytest.mark.parametrize("affinity", [rbf_affinity, radius_graph], ids=lambda f: f.__name__)
@pytest.mark.parametrize("params", [{}, {"alpha": 0.5, "normalization": "symmetric"},
                                    {"compatibility": [[1.0, -1.0], [-1.0, 1.0]]}])
def test_precomputed_affinities_equal_the_callable(moons, affinity, params):
    X, _, y_partial = moons
    Q = X[::7] + 0.03
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = RelaxationLabeling(kernel=affinity, **params).fit(X, y_partial)
        ours = RelaxationLabeling(kernel="precomputed", **params).fit(affinity(X, X), y_partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, rtol=0, atol=1e-14)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.predict_proba(affinity(Q, X)), ref.predict_proba(Q), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(ours.predict(affinity(Q, X)), ref.predict(Q))


def test_given_gaussian_affinities_equal_the_gaussian_profile(iris):
    X, _, y_partial = iris
    h = 0.5
    profile = RelaxationLabeling(bandwidth=h).fit(X, y_partial)
    given = RelaxationLabeling(kernel=lambda A, B: rbf_kernel(A, B, gamma=1 / (2 * h * h))).fit(X, y_partial)
    np.testing.assert_allclose(given.label_distributions_, profile.label_distributions_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(given.predict_proba(X + 0.05), profile.predict_proba(X + 0.05), rtol=0, atol=1e-12)


def test_given_affinities_bad_input(monkeypatch, moons):
    X, _, y_partial = moons
    A = rbf_affinity(X, X)
    with pytest.raises(ValueError, match=r"kernel='precomputed' takes X as the \(n_samples, n_samples\)"):
        RelaxationLabeling(kernel="precomputed").fit(X, y_partial)
    with pytest.raises(ValueError, match="X \\(kernel='precomputed'\\) gave negative affinities"):
        RelaxationLabeling(kernel="precomputed").fit(A - 0.5, y_partial)
    with pytest.raises(ValueError, match="kernel \\(the callable\\) gave affinities that are NaN"):
        RelaxationLabeling(kernel=lambda a, b: np.full((len(a), len(b)), np.nan)).fit(X, y_partial)
    with pytest.raises(ValueError, match=r"kernel \(the callable\) must give an affinity matrix of shape"):
        RelaxationLabeling(kernel=lambda a, b: np.ones((len(a), 3))).fit(X, y_partial)
    with pytest.raises(ValueError, match="n_neighbors must be None with kernel='precomputed'"):
        RelaxationLabeling(kernel="precomputed", n_neighbors=5).fit(A, y_partial)
    with pytest.raises(ValueError, match="'kernel' parameter .* must be a str among .* or a callable"):
        RelaxationLabeling(kernel="precomputed_distance").fit(X, y_partial)
    model = RelaxationLabeling(kernel="precomputed").fit(A, y_partial)
    with pytest.raises(ValueError, match="features"):
        model.predict(A[:4, :10])
    # sparse X: an affinity graph (precomputed), samples for a compact profile (the neighbour path), or
    # made dense for the Gaussian (which weighs every pair) where the dense X fits the memory budget
    monkeypatch.setattr(semi_supervised, "DEFAULT_MEMORY_BUDGET", X.size * X.itemsize - 1)
    with pytest.raises(ValueError, match="X is a sparse matrix.*kernel='gaussian' gives every sample a weight"):
        RelaxationLabeling().fit(sparse.csr_matrix(X), y_partial)
    monkeypatch.undo()
    with pytest.raises(TypeError, match="[Ss]parse"):  # a callable kernel takes dense X
        RelaxationLabeling(kernel=lambda a, b: a @ b.T).fit(sparse.csr_matrix(X), y_partial)


@pytest.mark.parametrize("params, error, match", [
    (dict(bandwidth=0.0), ValueError, "bandwidth"),
    (dict(bandwidth=-0.3), ValueError, "bandwidth"),
    (dict(kernel="boxcar"), ValueError, "kernel"),
    (dict(alpha=1.0), ValueError, "alpha"),
    (dict(alpha=0.0), ValueError, "alpha"),
    (dict(normalization="laplacian"), ValueError, "normalization"),
    (dict(max_iter=0), ValueError, "max_iter"),
    (dict(tol=-1.0), ValueError, "tol"),
    (dict(n_neighbors=0), ValueError, "n_neighbors"),
    (dict(n_neighbors=1000), ValueError, "n_neighbors"),
    (dict(compatibility=np.eye(3)), ValueError, "compatibility must have shape"),
    (dict(compatibility=2 * np.eye(2)), ValueError, r"\[-1, 1\]"),
    (dict(compatibility=[[np.nan, 0], [0, 1]]), ValueError, "compatibility"),
])
def test_bad_parameters(moons, params, error, match):
    X, _, y_partial = moons
    with pytest.raises(error, match=match):
        RelaxationLabeling(**params).fit(X, y_partial)


def test_bad_data(moons):
    X, _, y_partial = moons
    with pytest.raises(ValueError, match="no labelled sample"):
        RelaxationLabeling().fit(X, np.full(len(X), -1))
    with pytest.raises(ValueError, match="NaN|infinity"):
        RelaxationLabeling().fit(np.where(np.arange(len(X))[:, None] == 3, np.nan, X), y_partial)
    with pytest.raises(ValueError):
        RelaxationLabeling().fit(X, y_partial[:-1])
    model = RelaxationLabeling(bandwidth=0.3).fit(X, y_partial)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((2, 3)))


@pytest.mark.parametrize("kernel", ["gaussian", rbf_affinity], ids=["profile", "callable"])
def test_check_estimator(kernel):
    # check_classifiers_classes fits labels {-1, 1}; -1 marks unlabelled samples in the
    # semi-supervised API, so classes_ is [1]. scikit-learn exempts LabelPropagation and
    # LabelSpreading from the same check by name (_choose_check_classifiers_labels).
    reason = "-1 means 'unlabelled' in the semi-supervised API"
    check_estimator(RelaxationLabeling(kernel=kernel), expected_failed_checks={"check_classifiers_classes": reason})


@pytest.mark.parametrize("params", [dict(bandwidth=0.3), dict(bandwidth=0.3, alpha=0.2),
                                    dict(bandwidth=0.3, alpha=0.2, normalization="symmetric"),
                                    dict(bandwidth=0.3, compatibility=[[1.0, -1.0], [-1.0, 1.0]]),
                                    dict(kernel="uniform", n_neighbors=7)])
def test_float32_in_float32_out(moons, params):
    """float32 data keep float32 label distributions and probabilities (they were float64: a float64
    one-hot start promoted the engine's float32 local means), equal to the float64 fit to float32's
    accuracy. scikit-learn's LabelPropagation returns float64 here; ours keep the input's precision."""
    X, _, y_partial = moons
    X32 = X.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m32 = RelaxationLabeling(**params).fit(X32, y_partial)
        m64 = RelaxationLabeling(**params).fit(X, y_partial)
    assert m32.label_distributions_.dtype == np.float32
    proba = m32.predict_proba(X32[:50] + np.float32(0.05))
    assert proba.dtype == np.float32
    np.testing.assert_allclose(m32.label_distributions_, m64.label_distributions_, rtol=0, atol=1e-5)
    np.testing.assert_allclose(proba, m64.predict_proba(X[:50] + 0.05), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(m32.transduction_, m64.transduction_)
    assert m32.n_iter_ == m64.n_iter_


@pytest.mark.parametrize("convert", [sparse.csr_matrix, sparse.csc_matrix, sparse.coo_matrix, sparse.lil_matrix])
@pytest.mark.parametrize("normalization", ["mean", "symmetric"])
def test_sparse_input_with_the_gaussian_kernel_equals_scikit_learn(convert, normalization):
    """scikit-learn's label propagation takes sparse X with its rbf kernel (its test_sparse_input_types;
    non-regression test of scikit-learn #17085): so do we, the same distributions as on dense X."""
    from sklearn.datasets import load_iris
    from sklearn.semi_supervised import LabelPropagation, LabelSpreading

    X = [[1.0, 0.0], [0.0, 2.0], [1.0, 3.0]]
    est = RelaxationLabeling(kernel="gaussian", bandwidth=1.0, normalization=normalization,
                             alpha=None if normalization == "mean" else 0.2).fit(convert(X), [0, 1, -1])
    np.testing.assert_array_equal(est.predict([[0.5, 2.5]]), [1])
    np.testing.assert_array_equal(est.predict(sparse.csr_matrix([[0.5, 2.5]])), [1])
    iris, y = load_iris(return_X_y=True)
    partial = np.where(np.arange(len(y)) % 5 == 0, y, -1)
    gamma = 2.0
    ours = RelaxationLabeling(kernel="gaussian", bandwidth=np.sqrt(0.5 / gamma), normalization=normalization,
                              alpha=None if normalization == "mean" else 0.2).fit(convert(iris), partial)
    ref = (LabelPropagation(gamma=gamma, max_iter=1000) if normalization == "mean"
           else LabelSpreading(gamma=gamma, alpha=0.2)).fit(convert(iris), partial)
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, atol=1e-10)
    np.testing.assert_allclose(ours.predict_proba(sparse.csr_matrix(iris[:7])), ref.predict_proba(iris[:7]), atol=1e-10)
