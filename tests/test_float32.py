"""float32 in, float32 out: every estimator's floating outputs keep the input's precision."""
from contextlib import nullcontext

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LinearRegression, LogisticRegression

import localkit
from localkit.exceptions import LocalkitConvergenceWarning

Xi, yi = load_iris(return_X_y=True)
Xi = Xi.astype(np.float32)
Xd, yd = load_diabetes(return_X_y=True)
Xd, yd = (Xd / Xd.std(0)).astype(np.float32)[:150], yd[:150].astype(np.float32)

CASES = {
    "LocalMeanRegressor": (lambda: localkit.LocalMeanRegressor(bandwidth=1.0), Xd, yd),
    "LocalMeanClassifier": (lambda: localkit.LocalMeanClassifier(bandwidth=1.0), Xi, yi),
    # h = 3 (h = 2 leaves the local linear designs in 10-D near-singular, and warns, in float64 too)
    "LocalPolynomialRegressor": (lambda: localkit.LocalPolynomialRegressor(bandwidth=3.0), Xd, yd),
    "Localized(LinearRegression)": (lambda: localkit.Localized(LinearRegression(), bandwidth=2.0), Xd[:60], yd[:60]),
    "Localized(LogisticRegression)": (lambda: localkit.Localized(LogisticRegression(), bandwidth=2.0), Xi[::3],
                                      yi[::3]),
    "MetricLearningKernelRegressor": (lambda: localkit.MetricLearningKernelRegressor(max_iter=3), Xd[:80], yd[:80]),
    "RelaxationLabeling": (lambda: localkit.RelaxationLabeling(), Xi, np.where(np.arange(150) % 5 == 0, yi, -1)),
    "LocallyLinearEmbedding": (lambda: localkit.LocallyLinearEmbedding(n_neighbors=10), Xi, None),
    "LocalPCA": (lambda: localkit.LocalPCA(bandwidth=1.0), Xi, None),
    "TSKFuzzyRegressor": (lambda: localkit.TSKFuzzyRegressor(n_rules=3), Xd, yd),
    "TSKFuzzyClassifier": (lambda: localkit.TSKFuzzyClassifier(n_rules=3), Xi, yi),
    "LocalMeanDenoiser": (lambda: localkit.LocalMeanDenoiser(), Xi, None),
    "LazyAutoencoder": (lambda: localkit.LazyAutoencoder(n_components=2, max_iter=2), Xi[:60], None),
    "HopfieldNetwork": (lambda: localkit.HopfieldNetwork(), np.sign(Xi - Xi.mean(0)).astype(np.float32), None),
}


#: fits cut short to keep the test quick, which say so
STOPPED = {"MetricLearningKernelRegressor": "max_iter=3", "LazyAutoencoder": "max_iter=2"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_outputs_stay_float32(name):
    make, X, y = CASES[name]
    with pytest.warns(LocalkitConvergenceWarning, match=STOPPED[name]) if name in STOPPED else nullcontext():
        model = make().fit(X) if y is None else make().fit(X, y)
    checked = 0
    for method in ("predict", "predict_proba", "transform"):
        if hasattr(model, method):
            out = getattr(model, method)(X[:5])
            if np.issubdtype(out.dtype, np.floating):
                assert out.dtype == np.float32, f"{name}.{method} returned {out.dtype}"
                checked += 1
    assert checked
