"""LOWESS's ``delta`` (exact fits at anchors, linear interpolation between them) and
``missing="drop"`` against R's ``lowess`` and statsmodels' ``lowess``, and the measured agreement
of the robustness iterations, on the motorcycle data (``MASS::mcycle``) that statsmodels' own
tests ship, with R's outputs."""
import os
import warnings

import numpy as np
import pytest
import statsmodels
from statsmodels.nonparametric.smoothers_lowess import lowess

from localkit import LocalPolynomialRegressor
from localkit.models.polynomial import delta_anchors
from r_reference import have_r, r_lowess

needs_r = pytest.mark.skipif(not have_r(), reason="Rscript (R's stats::lowess) is not installed")

#: statsmodels' copy of MASS::mcycle with R's lowess outputs (made by test_lowess_r_outputs.R beside it):
#: out_0 = lowess(mcycle, f = 0.1, delta = 0), out_Rdef = lowess(mcycle, f = 0.1) (delta = 0.01 * range),
#: out_1 = lowess(mcycle, f = 0.1, delta = 1); R's default iter = 3
MCYCLE = os.path.join(os.path.dirname(statsmodels.__file__), "nonparametric", "tests", "results",
                      "test_lowess_delta.csv")


@pytest.fixture(scope="module")
def mcycle():
    # ships inside statsmodels' wheel (a test extra): a missing file fails here, it does not skip
    assert os.path.exists(MCYCLE), f"statsmodels' test data {MCYCLE} is missing"
    data = np.genfromtxt(MCYCLE, delimiter=",", names=True)
    return {name: np.asarray(data[name], dtype=np.float64) for name in data.dtype.names}


def fit(x, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tied times: a few near-singular local designs
        model = LocalPolynomialRegressor(**params).fit(x[:, None], y)
        return model, model.predict(x[:, None])


def test_robust_iterations_equal_r_and_measure_statsmodels(mcycle):
    x, y = mcycle["x"], mcycle["y"]
    _, ours = fit(x, y, frac=0.1, robust_iters=3)
    np.testing.assert_allclose(ours, mcycle["out_0"], rtol=0, atol=1e-12)  # R's lowess(delta = 0): 5.3e-13
    # statsmodels' lowess applies the bisquare unclipped (R sets weight 1 below u = 0.001 and 0
    # above 0.999): equal to round-off without iterations, 1.4e-6 apart with one (frac = 0.2), 3.0e-6 with three
    for it, measured in ((0, 1e-12), (1, 1.5e-6), (3, 3.1e-6)):
        _, ours = fit(x, y, frac=0.2, robust_iters=it)
        ref = lowess(y, x, frac=0.2, it=it, delta=0, return_sorted=False)
        assert np.abs(ours - ref).max() <= measured


@needs_r
@pytest.mark.parametrize("frac", [0.1, 0.2, 0.3, 2 / 3])
@pytest.mark.parametrize("it", [1, 3])
def test_robust_iterations_equal_live_r_lowess(mcycle, frac, it):
    x, y = mcycle["x"], mcycle["y"]
    _, ours = fit(x, y, frac=frac, robust_iters=it)
    np.testing.assert_allclose(ours, r_lowess(x, y, frac, it), rtol=0, atol=1e-12)  # measured <= 4.3e-13


def test_delta_equals_r_lowess(mcycle):
    x, y = mcycle["x"], mcycle["y"]
    for delta, column in ((0.01 * np.ptp(x), "out_Rdef"), (1.0, "out_1")):
        model, ours = fit(x, y, frac=0.1, robust_iters=3, delta=delta)
        np.testing.assert_allclose(ours, mcycle[column], rtol=0, atol=1e-12)  # measured 6.3e-13, 5.5e-13
        assert len(model.anchors_) < len(np.unique(x))
    # R 4.2.2: library(MASS); options(digits = 17); lowess(mcycle, f = 0.1)$y[c(1, 2, 40, 80, 132, 133)]
    r_default = [-1.0552790539898971, -1.1219153861106963, -50.1677807351438076, -24.6578896358069990,
                 3.1498733994458474, 7.2322447987199112]
    # lowess(mcycle, f = 0.3, iter = 2, delta = 5)$y[c(1, 60, 131, 132, 133)]
    r_wide = [-0.85806956852310656, -90.39146214821751357, -1.41170593246667853, -1.48136098904479963,
              -1.86446380022446778]
    _, ours = fit(x, y, frac=0.1, robust_iters=3, delta=0.01 * np.ptp(x))
    np.testing.assert_allclose(ours[[0, 1, 39, 79, 131, 132]], r_default, rtol=0, atol=1e-12)
    _, ours = fit(x, y, frac=0.3, robust_iters=2, delta=5.0)
    np.testing.assert_allclose(ours[[0, 59, 130, 131, 132]], r_wide, rtol=0, atol=1e-12)


@needs_r
@pytest.mark.parametrize("frac, it, delta", [(0.3, 0, 2.0), (0.3, 2, 5.0), (2 / 3, 3, 0.552), (0.2, 1, 3.0),
                                             (0.5, 3, 20.0), (0.1, 3, None)])
def test_delta_equals_live_r_lowess(mcycle, frac, it, delta):
    x, y = mcycle["x"], mcycle["y"]
    _, ours = fit(x, y, frac=frac, robust_iters=it, delta=0.01 * np.ptp(x) if delta is None else delta)
    np.testing.assert_allclose(ours, r_lowess(x, y, frac, it, delta), rtol=0, atol=1e-12)  # measured <= 3.4e-13


def test_delta_against_statsmodels(mcycle):
    x, y = mcycle["x"], mcycle["y"]
    delta = 0.01 * np.ptp(x)
    _, ours = fit(x, y, frac=0.1, robust_iters=3, delta=delta)
    ref = lowess(y, x, frac=0.1, it=3, delta=delta, return_sorted=False)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)  # measured 8.1e-13
    # where every sample after an anchor lies within delta, statsmodels also fits the last-but-one
    # sample (R interpolates to the last): without iterations the fits differ only after R's
    # last-but-one anchor
    model, ours = fit(x, y, frac=0.3, delta=5.0)
    ref = lowess(y, x, frac=0.3, it=0, delta=5.0, return_sorted=False)
    tail = x > model.anchors_[-2]
    np.testing.assert_allclose(ours[~tail], ref[~tail], rtol=0, atol=1e-12)
    assert np.abs(ours[tail] - ref[tail]).max() > 1e-3


def test_delta_anchor_rule():
    x = np.array([0.0, 0.1, 0.1, 0.25, 0.3, 1.0, 1.05, 3.0])
    # after 0: the last sample within 0.3 is 0.3; after 0.3: none in (0.3, 0.6], so the next (1.0);
    # after 1.0: 1.05; after 1.05: none within, so 3.0
    np.testing.assert_array_equal(delta_anchors(x, 0.3), [0.0, 0.3, 1.0, 1.05, 3.0])
    np.testing.assert_array_equal(delta_anchors(x, 0.0), np.unique(x))  # every distinct sample
    np.testing.assert_array_equal(delta_anchors(x, 10.0), [0.0, 3.0])
    np.testing.assert_array_equal(delta_anchors(np.ones(4), 1.0), [1.0])


def test_delta_predicts_by_interpolating_the_anchors():
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 10, 300))
    y = np.sin(x) + 0.2 * rng.standard_normal(300)
    model = LocalPolynomialRegressor(frac=0.2, robust_iters=2, delta=0.5).fit(x[:, None], y)
    exact = LocalPolynomialRegressor(frac=0.2).fit(x[:, None], y)
    exact.robust_weights_ = model.robust_weights_  # the same final weights, fitted everywhere
    a, fa = model.anchors_, model.anchor_values_
    np.testing.assert_array_equal(model.predict(a[:, None]), fa)
    np.testing.assert_allclose(fa, exact.predict(a[:, None]), rtol=0, atol=1e-13)
    q = np.linspace(-1, 11, 241)
    inside = (q >= a[0]) & (q <= a[-1])
    np.testing.assert_allclose(model.predict(q[inside, None]), np.interp(q[inside], a, fa), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(model.predict(q[~inside, None]), exact.predict(q[~inside, None]))
    # linear interpolation over steps of up to 0.5 on a smooth of sin (|f''| <~ 1): about 0.5^2 / 8 = 0.031 (0.037)
    assert np.abs(model.predict(q[:, None]) - exact.predict(q[:, None])).max() < 0.05


@pytest.mark.parametrize("params, X, match", [
    (dict(delta=-1.0), None, "delta"),
    (dict(delta=np.inf), None, "delta"),
    (dict(delta=0.5), "2d", "delta=0.5 .* n_features=2"),
    (dict(delta=0.5, surface="interpolate", frac=0.5), None, "delta=0.5 .* surface='interpolate'"),
    (dict(missing="ignore"), None, "missing"),
])
def test_bad_delta_and_missing(params, X, match):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(40, 2 if X == "2d" else 1))
    with pytest.raises(ValueError, match=match):
        LocalPolynomialRegressor(**params).fit(x, x[:, 0])


def test_missing_drop_equals_statsmodels(mcycle):
    x, y = mcycle["x"].copy(), mcycle["y"].copy()
    x[[3, 50]], y[[10, 50, 90]] = np.nan, np.nan
    with pytest.raises(ValueError, match="NaN"):  # the default: NaN is an error
        LocalPolynomialRegressor(frac=0.3).fit(x[:, None], y)
    model, ours = fit(x, y, frac=0.3, robust_iters=2, missing="drop")
    ref = lowess(y, x, frac=0.3, it=2, missing="drop", return_sorted=False)  # NaN at the rows dropped
    keep = np.isfinite(x) & np.isfinite(y)
    assert np.isnan(ref[~keep]).all()
    np.testing.assert_allclose(ours[keep], ref[keep], rtol=0, atol=1e-12)  # measured 1.6e-13
    # predict: NaN where the query x is NaN; a row dropped for its y alone still has an x to fit at
    assert np.isnan(ours[[3, 50]]).all() and np.isfinite(ours[[10, 90]]).all()
    _, kept = fit(x[keep], y[keep], frac=0.3, robust_iters=2)
    np.testing.assert_array_equal(ours[keep], kept)
    assert model.X_fit_.shape == (keep.sum(), 1)
    # with sample weights: those of the rows kept
    w = np.linspace(0.5, 2.0, len(x))
    dropped = LocalPolynomialRegressor(frac=0.3, missing="drop").fit(x[:, None], y, sample_weight=w)
    plain = LocalPolynomialRegressor(frac=0.3).fit(x[keep, None], y[keep], sample_weight=w[keep])
    np.testing.assert_array_equal(dropped.predict(x[keep, None]), plain.predict(x[keep, None]))


def test_missing_drop_bad_input():
    x = np.linspace(0, 1, 20)
    with pytest.raises(ValueError, match="left no sample"):
        LocalPolynomialRegressor(missing="drop").fit(np.full((5, 1), np.nan), np.ones(5))
    with pytest.raises(ValueError, match="inf"):  # infinite values are bad input, not missing ones
        LocalPolynomialRegressor(missing="drop").fit(np.r_[x[:-1], np.inf][:, None], x)
    with pytest.raises(ValueError, match="inf"):
        LocalPolynomialRegressor(missing="drop").fit(x[:, None], np.r_[x[:-1], np.inf])
    model = LocalPolynomialRegressor(missing="drop").fit(x[:, None], x)
    with pytest.raises(ValueError, match="inf"):
        model.predict([[np.inf]])
    assert model.__sklearn_tags__().input_tags.allow_nan
    assert not LocalPolynomialRegressor().__sklearn_tags__().input_tags.allow_nan
