"""Every tabular transformer is pipeline-complete: get_feature_names_out and
set_output(transform="pandas"); LocalPCA.transform against scikit-learn's PCA.

(NonLocalMeans transforms one image, not a table of samples, so it has no column names.)"""
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from localkit import (HierarchicalAutoencoder, LazyAutoencoder, LocallyLinearEmbedding, LocalMeanDenoiser,
                      LocalMeanTransformer, LocalPCA, MetricLearningKernelRegressor)

# (estimator, expected output names for iris' 4 features); names follow scikit-learn's mixins:
# a one-to-one transformer keeps the input names, the others are "<classname><i>"
TRANSFORMERS = [
    (LocallyLinearEmbedding(n_neighbors=10, n_components=2, eigen_solver="dense"),
     ["locallylinearembedding0", "locallylinearembedding1"]),
    (LocalPCA(n_components=2, bandwidth=1.0), ["localpca0", "localpca1"]),
    (LocalMeanDenoiser(noise_std=0.3), None),
    (LocalMeanTransformer(), None),
    (LazyAutoencoder(n_components=1, max_iter=5), ["lazyautoencoder0"]),
    (HierarchicalAutoencoder(n_components=(2, 1), max_iter=5), ["hierarchicalautoencoder0"]),
    (MetricLearningKernelRegressor(form="diagonal", max_iter=3), [f"metriclearningkernelregressor{i}" for i in range(4)]),
]


@pytest.fixture(scope="module")
def iris_frame():
    data = load_iris(as_frame=True)
    return data.data.iloc[::3], data.target.iloc[::3].astype(float)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # short fits on purpose
@pytest.mark.parametrize("est, names", TRANSFORMERS, ids=lambda v: type(v).__name__ if not isinstance(v, list) else "")
def test_pandas_output_and_feature_names(iris_frame, est, names):
    X, y = iris_frame
    names = list(X.columns) if names is None else names
    plain = est.fit(X, y).transform(X)
    out = est.set_output(transform="pandas").fit(X, y).transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == names == list(est.get_feature_names_out())
    assert list(out.index) == list(X.index)
    np.testing.assert_allclose(out.to_numpy(), plain, rtol=0, atol=1e-12)
    est.set_output(transform="default")


def test_pandas_output_through_a_pipeline(iris_frame):
    X, _ = iris_frame
    pipe = make_pipeline(StandardScaler(), LocalPCA(n_components=2, bandwidth=2.0)).set_output(transform="pandas")
    out = pipe.fit_transform(X)
    assert list(out.columns) == ["localpca0", "localpca1"]


def test_local_pca_transform_is_pca_when_the_kernel_covers_everything():
    # a uniform kernel wider than the data weighs every sample 1: the local PCA at every point is
    # the global PCA, and transform is PCA.transform up to the sign of each axis
    X = load_iris().data
    ours = LocalPCA(n_components=3, kernel="uniform", bandwidth=100.0).fit(X).transform(X)
    ref = PCA(n_components=3).fit(X).transform(X)
    signs = np.sign(np.sum(ours * ref, axis=0))
    np.testing.assert_allclose(ours, ref * signs, rtol=0, atol=1e-10)


def test_local_pca_transform_projects_onto_local_axes():
    # on a circle with a small bandwidth the first local axis is the tangent: a point on the
    # circle projects onto it near 0, and the radial offset sits on the second axis
    t = np.linspace(0, 2 * np.pi, 400, endpoint=False)
    X = np.c_[np.cos(t), np.sin(t)]
    lpca = LocalPCA(n_components=2, bandwidth=0.05).fit(X)
    Q = np.array([[0.0, 1.02], [-1.02, 0.0]])
    local = lpca.local_pca(Q)
    Z = lpca.transform(Q)
    np.testing.assert_allclose(Z, np.einsum("qkd,qd->qk", local.components, Q - local.mean), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.abs(local.components[:, 0]), [[1.0, 0.0], [0.0, 1.0]], atol=1e-3)
    assert np.all(np.abs(Z[:, 0]) < 1e-6)
    assert np.all(np.abs(Z[:, 1]) > 0.015)


def test_local_pca_transform_validates_input():
    lpca = LocalPCA(n_components=1).fit(np.random.default_rng(0).normal(size=(20, 3)))
    with pytest.raises(ValueError, match="features"):
        lpca.transform(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="NaN"):
        lpca.transform([[np.nan, 0.0, 0.0]])
