"""The validation layer: parameters declared once (``_parameter_constraints``, ``validate_params``)
and checked by scikit-learn, n_jobs as scikit-learn counts it, and the failures of issue 14 that
were fixed at their root, each pinned by the input that showed it."""
from __future__ import annotations

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.base import is_classifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.utils._param_validation import InvalidParameterError

import localkit
from localkit import (ConditionalModeClassifier, Kernel, LearnedKernelClassifier, Localized, LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor,
                      MetricLearningKernelRegressor, RelaxationLabeling, TSKFuzzyClassifier, TSKFuzzyRegressor,
                      kernel_density, local_mean)
from localkit._validation import check_n_neighbors
from localkit.kernels.profiles import PROFILES
from localkit.engine.blocks import resolve_n_jobs


def _estimators():
    for name in localkit.__all__:
        cls = getattr(localkit, name)
        if isinstance(cls, type) and name != "Kernel":
            yield cls(LinearRegression()) if cls is Localized else cls()


@pytest.mark.parametrize("est", list(_estimators()), ids=lambda e: type(e).__name__)
def test_every_parameter_is_declared(est):
    """Each estimator states every parameter's allowed values once, for scikit-learn to check."""
    undeclared = set(est.get_params(deep=False)) - set(type(est)._parameter_constraints)
    assert not undeclared, f"{type(est).__name__} does not declare {sorted(undeclared)}"


@pytest.mark.parametrize("est", list(_estimators()), ids=lambda e: type(e).__name__)
def test_a_bad_value_is_scikit_learns_error_naming_the_parameter(est):
    X, y = load_iris(return_X_y=True)
    params = est.get_params(deep=False)
    name = next(p for p in ("kernel", "max_iter", "n_rules", "patch_size", "n_components", "kind") if p in params)
    est.set_params(**{name: "not-a-valid-value"})
    with pytest.raises(InvalidParameterError, match=f"The '{name}' parameter of {type(est).__name__} must be"):
        est.fit(X[:40], y[:40])


def test_n_jobs_as_scikit_learn_counts_it():
    assert resolve_n_jobs(None) == 1  # not all cores: no oversubscription inside GridSearchCV(n_jobs=-1)
    assert resolve_n_jobs(2) == 2
    assert resolve_n_jobs(-1) == joblib.cpu_count()
    with joblib.parallel_config(n_jobs=3):
        assert resolve_n_jobs(None) == 3
    for bad in (0, "two", 1.5, True, [1]):
        with pytest.raises(ValueError, match="n_jobs must be None or a non-zero integer"):
            resolve_n_jobs(bad)


@pytest.mark.parametrize("kwargs, name", [
    ({"metric": "cosine"}, "metric"),  # not a norm (manhattan used to be ignored; now honoured, see test_density_features)
    ({"n_neighbors": 3}, "n_neighbors"),  # idem
    ({"log": "yes"}, "log"),  # used to be accepted
    ({"n_jobs": 0}, "n_jobs"),
])
def test_kernel_density_refuses_what_it_cannot_honour(kwargs, name):
    X = load_iris().data[:, :2]
    with pytest.raises(InvalidParameterError, match=f"The '{name}' parameter of kernel_density must be"):
        kernel_density(X[:3], X, **kwargs)


@pytest.mark.parametrize("make", [
    lambda: LocalMeanRegressor(), lambda: LocalPolynomialRegressor(bandwidth=0.5),
    lambda: TSKFuzzyRegressor(n_rules=2, random_state=0), lambda: MetricLearningKernelRegressor(max_iter=2),
    lambda: Localized(LinearRegression()),
], ids=["LocalMeanRegressor", "LocalPolynomialRegressor", "TSKFuzzyRegressor", "MLKR", "Localized"])
def test_string_targets_are_refused_at_fit_by_name(make):
    """TSK and MLKR failed inside add.reduce, Localized only at predict."""
    X = load_iris().data[:30]
    with pytest.raises(ValueError, match="y must hold numbers .* got dtype <U"):
        make().fit(X, np.array(["a", "b", "c"] * 10))


def test_a_target_that_overflows_float32_is_named():
    X = load_iris().data[:30].astype(np.float32)
    with pytest.raises(ValueError, match="y contains NaN or infinity, or values too large for float32"):
        LocalMeanRegressor().fit(X, np.full(30, 1e300))


def test_tsk_regression_is_equivariant_to_the_scale_of_the_targets():
    """At 1e300 the leave-one-out errors overflowed and no alpha was chosen (a NoneType error);
    the fit is linear in the targets, so 1e300 y gives 1e300 times the predictions."""
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:120, :4], y[:120] / 100
    base = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(X, y)
    big = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(X, y * 1e300)
    assert big.alpha_ == base.alpha_
    np.testing.assert_allclose(big.predict(X[:20]) / 1e300, base.predict(X[:20]), rtol=1e-9)


def test_softmax_kernel_takes_a_zero_d_array_temperature():
    X = load_iris().data[:20]
    y = np.arange(20.0)
    np.testing.assert_array_equal(local_mean(X, X, y, kernel="softmax", bandwidth=np.array(7.0)),
                                  local_mean(X, X, y, kernel="softmax", bandwidth=7.0))
    assert Kernel("softmax", bandwidth=np.array(2.0)).bandwidth == 2.0
    with pytest.raises(ValueError, match="temperature"):
        Kernel("softmax", bandwidth=np.array([1.0, 2.0]))


@pytest.mark.parametrize("kwargs, name", [({"d_model": 0, "nhead": 1}, "d_model"), ({"d_model": 4, "nhead": 0}, "nhead"),
                                          ({"d_model": 4, "nhead": 1, "dim_feedforward": 0}, "dim_feedforward")])
def test_transformer_layer_names_its_own_parameter(kwargs, name):
    from localkit.nn import LocalTransformerLayer

    with pytest.raises(ValueError, match=f"^{name} must be a positive integer"):
        LocalTransformerLayer(**kwargs)


VANISHING = sorted(name for name, profile in PROFILES.items() if profile(1.0) == 0.0)


def test_profiles_that_vanish_at_one_are_the_compact_ones_but_uniform():
    assert VANISHING == sorted(n for n, p in PROFILES.items() if p.compact and n != "uniform")


@pytest.mark.parametrize("kernel", VANISHING + ["linear", "quartic", Kernel("tricube", n_neighbors=1)])
def test_one_neighbour_with_a_profile_vanishing_at_one_is_refused(kernel):
    """The span is the distance to the only neighbour, whose weight is then k(1) = 0: every query
    fell back silently to its empty policy (the nearest sample)."""
    with pytest.raises(ValueError, match=r"n_neighbors=1 .* k\(1\) = 0 .* n_neighbors >= 2 .* kernel='uniform'"):
        check_n_neighbors(1, 10, kernel=kernel)
    assert check_n_neighbors(2, 10, kernel=kernel) == 2


@pytest.mark.parametrize("kernel", ["uniform", "tophat", "gaussian", "laplacian", "cauchy", "softmax", None])
def test_one_neighbour_is_allowed_where_it_keeps_weight(kernel):
    assert check_n_neighbors(1, 10, kernel=kernel) == 1  # uniform: 1-nearest-neighbour


def test_local_polynomial_refuses_one_vanishing_neighbour_and_keeps_one_nearest():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(60, 1)), rng.normal(size=60)  # no ties: one nearest sample per query
    for kernel in ("tricube", "epanechnikov"):
        with pytest.raises(ValueError, match="n_neighbors=1 with the"):
            LocalPolynomialRegressor(kernel=kernel, n_neighbors=1).fit(X, y)
    Q = rng.uniform(size=(10, 1))
    got = LocalPolynomialRegressor(degree=0, kernel="uniform", n_neighbors=1).fit(X, y).predict(Q)
    np.testing.assert_array_equal(got, y[np.abs(Q - X.T).argmin(axis=1)])
    # frac never gives k = 1: lowess' span is max(2, floor(frac n))
    assert LocalPolynomialRegressor(frac=1e-3).fit(X, y).n_neighbors_ == 2


@pytest.mark.parametrize("make", [LocalMeanRegressor, LocalMeanClassifier])
def test_local_means_refuse_one_vanishing_neighbour(make):
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="n_neighbors=1 with the 'tricube' kernel"):
        make(kernel="tricube", n_neighbors=1).fit(X, y)
    da = pytest.importorskip("dask.array")
    with pytest.raises(ValueError, match="n_neighbors=1 with the 'tricube' kernel"):
        make(kernel="tricube", n_neighbors=1).fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))
    make(kernel="uniform", n_neighbors=1).fit(X, y)  # 1-NN


# -- issue 26: what local_mean was given, and what to pass ------------------------------------------

def _local_mean_with(role, x):
    X = np.random.default_rng(0).normal(size=(10, 2))
    args = {"queries": X, "samples": X, "values": X[:, 0]} | {role: x}
    return local_mean(args["queries"], args["samples"], args["values"], bandwidth=1.0)


@pytest.mark.parametrize("role", ["queries", "samples", "values"])
def test_a_sparse_matrix_gets_dense_advice(role):
    import scipy.sparse

    x = np.random.default_rng(0).normal(size=(10, 2 if role != "values" else 1))
    for make in (scipy.sparse.csr_matrix, scipy.sparse.coo_array):
        with pytest.raises(TypeError, match=rf"{role} is a scipy sparse matrix .* pass {role}\.toarray\(\)"):
            _local_mean_with(role, make(x))


@pytest.mark.parametrize("role", ["queries", "samples", "values"])
def test_pandas_nullable_columns_are_numbers_and_their_na_is_named(role):
    import pandas as pd

    X = np.random.default_rng(0).normal(size=(10, 2))
    frame = pd.DataFrame({"a": pd.array(X[:, 0], dtype="Float64"), "b": pd.array(np.arange(10), dtype="Int64")})
    x = frame if role != "values" else frame["a"]
    plain = X[:, 0] if role == "values" else np.c_[X[:, 0], np.arange(10.0)]
    np.testing.assert_array_equal(_local_mean_with(role, x), _local_mean_with(role, plain))
    x = x.copy()
    x.iloc[3] = pd.NA
    with pytest.raises(ValueError, match=f"{role} contains pandas NA .* not allowed"):
        _local_mean_with(role, x)


def test_an_object_array_of_numbers_is_converted_and_one_of_others_is_named():
    X = np.random.default_rng(0).normal(size=(10, 2))
    np.testing.assert_array_equal(_local_mean_with("samples", X.astype(object)), _local_mean_with("samples", X))
    mixed = np.array([[1.0, "a"], [None, 2]] * 5, dtype=object)
    with pytest.raises(ValueError, match="samples must hold numbers, got an object array holding None, str; pass"):
        _local_mean_with("samples", mixed)


class _DaskFrame:
    """What ``local_mean`` meets of a dask DataFrame (``dask.dataframe`` itself needs pyarrow): a
    dask collection whose ``to_dask_array()`` has unknown lengths, known with ``lengths=True``."""

    def __init__(self, x):
        self.x = x

    def __dask_graph__(self):
        return self.x.__dask_graph__()

    def to_dask_array(self, lengths=False):
        return self.x if lengths else self.x[self.x[:, 0] < np.inf]


def test_a_dask_dataframe_gets_dataframe_advice():
    import dask.array as da

    X = np.random.default_rng(0).normal(size=(10, 2))
    frame = _DaskFrame(da.from_array(X, chunks=5))
    with pytest.raises(ValueError, match=r"samples has unknown chunk sizes; pass samples\.to_dask_array\(lengths=True\)"):
        local_mean(X, frame, X[:, 0])
    np.testing.assert_allclose(local_mean(X, frame.to_dask_array(lengths=True), X[:, 0]).compute(),
                               local_mean(X, X, X[:, 0]), rtol=1e-12)
    with pytest.raises(ValueError, match=r"queries has unknown chunk sizes; pass queries\.compute_chunk_sizes\(\)"):
        local_mean(frame.to_dask_array(), X, X[:, 0])


def test_a_real_dask_dataframe_gets_dataframe_advice():
    import dask.dataframe as dd  # needs pyarrow (a test extra)
    import pandas as pd

    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match=r"samples\.to_dask_array\(lengths=True\)"):
        local_mean(X, dd.from_pandas(pd.DataFrame(X), npartitions=2), X[:, 0])


CLASSIFIERS = {"LocalMeanClassifier": lambda: LocalMeanClassifier(), "RelaxationLabeling": lambda: RelaxationLabeling(),
               "TSKFuzzyClassifier": lambda: TSKFuzzyClassifier(n_rules=2, random_state=0),
               "Localized": lambda: Localized(LogisticRegression()),
               "ConditionalModeClassifier": lambda: ConditionalModeClassifier(),
               "LearnedKernelClassifier": lambda: LearnedKernelClassifier(max_epochs=2, n_ensembles=1, random_state=0)}


def test_every_classifier_is_listed():
    classifiers = {type(e).__name__ for e in _estimators() if is_classifier(e)} | {"Localized"}
    assert classifiers == set(CLASSIFIERS)


@pytest.mark.parametrize("make", CLASSIFIERS.values(), ids=CLASSIFIERS.keys())
@pytest.mark.parametrize("labels", [["a", None], ["a", 1], ["a", 2.5, None]])
def test_labels_mixing_strings_with_others_get_scikit_learns_message(make, labels):
    # KNeighborsClassifier().fit(X, ["a", None] * 30) leaks "'<' not supported between instances
    # of 'NoneType' and 'str'"; the message is scikit-learn's unique_labels' for such a mix
    X = np.random.default_rng(0).normal(size=(60, 2))
    y = np.array(labels * 30, dtype=object)[:60]
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\); y holds .*all strings or "
                                         r"all numbers") as info:
        make().fit(X, y)
    assert "NoneType" not in str(info.value)


@pytest.mark.parametrize("labels", [np.array([0, 2, 2, 1]), np.array([3, 3], dtype=np.uint8), np.array([True, False]),
                                    np.array(["b", "a", "b"]), np.array([[0], [1]]), np.array([0.0, 1.0, 1.0]),
                                    np.array([0.5, 1.0]), np.array([[0, 1], [1, 1]]), np.array([1e300, 0.0]),
                                    np.array([1, "a"], dtype=object)])
def test_class_labels_are_scikit_learns_classification_targets(labels):
    """The shortcut for one column of integers, booleans or strings accepts what scikit-learn's
    ``check_classification_targets`` accepts, and every other input still meets its check."""
    from sklearn.utils.multiclass import check_classification_targets

    from localkit._validation import check_class_labels

    try:
        with np.errstate(invalid="ignore"):
            check_classification_targets(labels)
    except ValueError:
        with pytest.raises(ValueError):
            check_class_labels(labels)
    else:
        check_class_labels(labels)
