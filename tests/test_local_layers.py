"""LocalMeanTransformer: one local-mean layer for scikit-learn pipelines."""
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from localkit import LocalMeanTransformer, LocalPolynomialRegressor


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _gaussian_mean(Q, X, V, h, drop_self=False):
    K = np.exp(-0.5 * ((Q[:, None] - X[None]) ** 2).sum(-1) / h**2)
    if drop_self:
        np.fill_diagonal(K, 0.0)
    return K @ V / K.sum(1, keepdims=True)


@pytest.mark.parametrize("values", ["inputs", "targets"])
def test_knn_layer_is_scikit_learns_knn_average(diabetes, values):
    X, y = diabetes
    layer = LocalMeanTransformer(kernel="uniform", n_neighbors=7, values=values).fit(X[:300], y[:300])
    ref = KNeighborsRegressor(7).fit(X[:300], X[:300] if values == "inputs" else y[:300]).predict(X[300:])
    np.testing.assert_allclose(layer.transform(X[300:]), ref.reshape(len(ref), -1), rtol=0, atol=1e-9)


@pytest.mark.parametrize("values", ["inputs", "targets"])
def test_gaussian_layer_and_its_leave_one_out_training_rows(diabetes, values):
    X, y = diabetes[0][:200], diabetes[1][:200]
    V = X if values == "inputs" else y[:, None]
    layer = LocalMeanTransformer(bandwidth=2.0, values=values)
    np.testing.assert_allclose(layer.fit_transform(X, y), _gaussian_mean(X, X, V, 2.0, drop_self=True),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(layer.transform(X[:20]), _gaussian_mean(X[:20], X, V, 2.0), rtol=1e-10, atol=1e-10)
    plain = LocalMeanTransformer(bandwidth=2.0, values=values, leave_one_out=False)
    np.testing.assert_allclose(plain.fit_transform(X, y), plain.fit(X, y).transform(X), rtol=0, atol=0)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no fallback: the local linear fits are real
def test_stacked_pipeline_is_the_composition_of_its_layers(diabetes):
    X, y = diabetes
    train, test = slice(0, 300), slice(300, None)
    pipe = make_pipeline(LocalMeanTransformer(bandwidth=1.0), LocalMeanTransformer(bandwidth=0.8),
                         LocalPolynomialRegressor(kernel="gaussian", bandwidth=3.0)).fit(X[train], y[train])
    # by hand: the training rows leave themselves out at every layer; new rows see every sample
    h1 = _gaussian_mean(X[train], X[train], X[train], 1.0, drop_self=True)
    h2 = _gaussian_mean(h1, h1, h1, 0.8, drop_self=True)
    t1 = _gaussian_mean(X[test], X[train], X[train], 1.0)
    t2 = _gaussian_mean(t1, h1, h1, 0.8)
    ref = LocalPolynomialRegressor(kernel="gaussian", bandwidth=3.0).fit(h2, y[train]).predict(t2)
    np.testing.assert_allclose(pipe.predict(X[test]), ref, rtol=1e-8, atol=1e-8)


def test_feature_names_and_set_output(diabetes):
    X, y = diabetes
    frame = pd.DataFrame(X[:50], columns=[f"f{i}" for i in range(10)])
    out = LocalMeanTransformer().set_output(transform="pandas").fit(frame).transform(frame)
    assert list(out.columns) == list(frame.columns)
    out = LocalMeanTransformer(values="targets").set_output(transform="pandas").fit_transform(frame, y[:50])
    assert list(out.columns) == ["localmeantransformer_y0"]
    two = LocalMeanTransformer(values="targets").fit(X[:50], np.c_[y[:50], -y[:50]])
    assert list(two.get_feature_names_out()) == ["localmeantransformer_y0", "localmeantransformer_y1"]


@pytest.mark.parametrize("params, error, match", [
    ({"values": "outputs"}, ValueError, "values"), ({"leave_one_out": "yes"}, TypeError, "leave_one_out"),
    ({"bandwidth": -1.0}, ValueError, "bandwidth"), ({"bandwidth": np.nan}, ValueError, "bandwidth"),
    ({"kernel": "nope"}, ValueError, "kernel|profile"), ({"n_neighbors": 0}, ValueError, "n_neighbors"),
])
def test_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        LocalMeanTransformer(**params).fit(np.random.default_rng(0).normal(size=(10, 2)))


def test_bad_data():
    with pytest.raises(ValueError, match="NaN"):
        LocalMeanTransformer().fit([[0.0, np.nan], [1.0, 2.0]])
    with pytest.raises(ValueError, match="needs y"):
        LocalMeanTransformer(values="targets").fit(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="0 sample"):
        LocalMeanTransformer().fit(np.zeros((0, 2)))
    layer = LocalMeanTransformer().fit(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="features"):
        layer.transform(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="infinity|NaN"):
        layer.transform([[np.inf, 0.0]])


def test_check_estimator():
    loo = "fit_transform leaves each training row out by design (leave_one_out=True), like TargetEncoder"
    check_estimator(LocalMeanTransformer(), expected_failed_checks={
        "check_transformer_general": loo, "check_transformer_data_not_an_array": loo})
    check_estimator(LocalMeanTransformer(leave_one_out=False))
    check_estimator(LocalMeanTransformer(values="targets"))
