"""A bandwidth far beyond the data's spread is said so where the fit becomes the global one, and
where it is the estimator's default (a local model silently turned global, issue 41); never with
n_neighbors (the bandwidth is then unused), and the warning never calls a rule the default where
it is not."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_score

from localkit import Localized, LocalMeanRegressor, LocalMeanTransformer, LocalPCA
from localkit.exceptions import BandwidthWarning


@pytest.fixture(scope="module")
def diabetes():
    return load_diabetes(return_X_y=True)


def test_localized_default_is_the_global_model_and_says_so(diabetes):
    X, y = diabetes
    with pytest.warns(BandwidthWarning, match=r"\(the default\).*global model \(LinearRegression"):
        local = cross_val_score(Localized(LinearRegression()), X, y, cv=3).mean()
    plain = cross_val_score(LinearRegression(), X, y, cv=3).mean()
    assert abs(local - plain) < 2e-3  # what the warning is about: the global model's score
    with warnings.catch_warnings():  # a bandwidth on the data's scale is a local model: no warning
        warnings.simplefilter("error", BandwidthWarning)
        Localized(LinearRegression(), bandwidth=0.1).fit(X, y)


def test_local_pca_default_says_it_is_the_global_pca(diabetes):
    X, _ = diabetes
    with pytest.warns(BandwidthWarning, match=r"\(the default\).*global model") as record:
        lpca = LocalPCA(n_components=1).fit(X)
    assert record[0].message.spread == pytest.approx(np.sqrt(np.sum(X.var(axis=0, ddof=1))), rel=1e-12)
    assert lpca.bandwidth_ == 1.0
    # a chosen wide bandwidth is the caller's global PCA: a sound fit, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", BandwidthWarning)
        LocalPCA(n_components=1, bandwidth=5.0).fit(X)


def test_no_warning_with_n_neighbors_and_no_false_default(diabetes):
    X, y = diabetes
    with warnings.catch_warnings():
        warnings.simplefilter("error", BandwidthWarning)
        LocalMeanRegressor(bandwidth=1.0, n_neighbors=5).fit(X, y)  # the span is the 5th neighbour's distance
        LocalMeanTransformer(n_neighbors=5).fit(X, y)
    with pytest.warns(BandwidthWarning) as record:
        LocalMeanRegressor(bandwidth=1.0).fit(X, y)  # the caller's choice ("scott" is the default here)
    text = str(record[0].message)
    assert "(the default)" not in text and "global mean" in text and "'scott' (the default)" not in text
    with pytest.warns(BandwidthWarning, match=r"bandwidth=1.0 \(the default\)"):
        LocalMeanTransformer().fit(X, y)
