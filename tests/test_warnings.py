"""localkit's warning classes (``localkit.exceptions``) and where its warnings point."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import cross_val_score

import localkit
from localkit import LocalMeanRegressor, LocalPolynomialRegressor, MeanShift
from localkit.exceptions import (BandwidthWarning, EmptyNeighbourhoodWarning, FallbackWarning,
                                 LocalkitConvergenceWarning, LocalkitWarning, NearSingularDesignWarning)


def test_every_class_is_a_localkit_warning_and_keeps_its_former_category():
    for cls in (BandwidthWarning, EmptyNeighbourhoodWarning, FallbackWarning, LocalkitConvergenceWarning,
                NearSingularDesignWarning):
        assert issubclass(cls, LocalkitWarning) and issubclass(cls, UserWarning)
    assert issubclass(LocalkitConvergenceWarning, ConvergenceWarning)  # scikit-learn's filters apply
    for cls in (NearSingularDesignWarning, EmptyNeighbourhoodWarning, FallbackWarning):
        assert issubclass(cls, RuntimeWarning)
    assert localkit.exceptions.LocalkitWarning is LocalkitWarning


def test_a_warning_inside_cross_validation_points_at_the_users_line():
    X, y = load_diabetes(return_X_y=True)
    with pytest.warns(BandwidthWarning, match="more than 3 times the data's spread") as rec:
        cross_val_score(LocalMeanRegressor(bandwidth=1.0), X, y, cv=3)
    assert {r.filename for r in rec} == {__file__}


def test_a_convergence_warning_points_at_the_users_line():
    X, _ = make_blobs(200, centers=3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not converge within max_iter=1") as rec:
        MeanShift(bandwidth=1.0, max_iter=1).fit(X)
    assert rec[0].category is LocalkitConvergenceWarning and rec[0].filename == __file__


def test_a_near_singular_design_points_at_the_users_line_through_fit_predict():
    x = np.repeat(np.arange(5.0), 30)[:, None]  # ties: one distinct x in most windows
    t = np.sin(x[:, 0])
    with pytest.warns(NearSingularDesignWarning, match="near-singular local design") as rec:
        LocalPolynomialRegressor(n_neighbors=10).fit(x, t).predict(x)
    assert rec[0].filename == __file__


def test_one_filter_silences_them_all():
    X, y = load_diabetes(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", LocalkitWarning)
        LocalMeanRegressor(bandwidth=1.0).fit(X, y)


def test_a_warning_shows_once_per_line_across_the_folds_of_cross_validation():
    """Python's default action shows a warning once per line; scikit-learn sets the filters anew
    for each fold, which made Python forget it, and the fold's figures in the message made each
    fold's text differ. The 5 folds' spreads differ (the warning's ``spread``); the message does not."""
    X, y = load_diabetes(return_X_y=True)
    with warnings.catch_warnings(record=True) as every:
        warnings.simplefilter("always", BandwidthWarning)
        cross_val_score(LocalMeanRegressor(bandwidth=1.0), X, y, cv=5)
    assert len(every) == 5 and len({w.message.spread for w in every}) == 5 and len({str(w.message) for w in every}) == 1
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        for _ in range(2):  # the same line twice: still once
            cross_val_score(LocalMeanRegressor(bandwidth=1.0), X, y, cv=5)
        cross_val_score(LocalMeanRegressor(bandwidth=2.0), X, y, cv=5)  # another line, another message
    assert [(w.category, w.filename, w.lineno) for w in shown] == [
        (BandwidthWarning, __file__, shown[0].lineno), (BandwidthWarning, __file__, shown[0].lineno + 1)]
    assert "bandwidth=2.0" in str(shown[1].message)


def test_a_warning_shows_again_where_the_filters_change():
    X, y = load_diabetes(return_X_y=True)
    for action in ("default", "always"):
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter(action)
            for _ in range(2):
                cross_val_score(LocalMeanRegressor(bandwidth=1.0), X, y, cv=3)
        assert len(shown) == (1 if action == "default" else 6)
    with pytest.raises(BandwidthWarning):
        with warnings.catch_warnings():
            warnings.simplefilter("error", BandwidthWarning)
            cross_val_score(LocalMeanRegressor(bandwidth=1.0), X, y, cv=3, error_score="raise")
