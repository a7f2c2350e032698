"""Local polynomial regression: LOWESS and KernelReg(reg_type='ll') as references, a hand-written
weighted least squares for higher degrees, near-singular designs, bad input."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_diabetes
from sklearn.utils.estimator_checks import check_estimator
from statsmodels.nonparametric.kernel_regression import KernelReg
from statsmodels.nonparametric.smoothers_lowess import lowess

from localkit import Kernel, LocalMeanRegressor, LocalPolynomialRegressor
from localkit.engine import local_covariance, local_polynomial
from localkit.engine.local_models.polynomial import monomial_exponents
from localkit.kernels import PROFILES


@pytest.fixture(scope="module")
def sine():
    """Cleveland's classic: a noisy sine with heavy-tailed noise, x without ties."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 2 * np.pi, 400)
    y = np.sin(x) + 0.3 * rng.standard_t(2, size=len(x))
    assert len(np.unique(x)) == len(x)
    return x, y


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:160, [0, 2, 3, 8]], y[:160]


@pytest.mark.parametrize("frac", [0.05, 0.3, 2 / 3])
@pytest.mark.parametrize("it", [0, 2])
def test_equals_statsmodels_lowess(sine, frac, it):
    x, y = sine
    ref = lowess(y, x, frac=frac, it=it, delta=0, return_sorted=False)
    model = LocalPolynomialRegressor(frac=frac, robust_iters=it).fit(x[:, None], y)
    np.testing.assert_allclose(model.predict(x[:, None]), ref, rtol=0, atol=1e-8)
    # the engine-moments path (kNN kernel through the local sums of the design) gives the same fit
    dense = LocalPolynomialRegressor(frac=frac, robust_iters=it, algorithm="dense").fit(x[:, None], y)
    np.testing.assert_allclose(dense.predict(x[:, None]), ref, rtol=0, atol=1e-8)
    # and at new points (lowess' xvals), with the robustness weights of the training fit
    xv = np.linspace(0.1, 6.1, 97)
    ref = lowess(y, x, frac=frac, it=it, delta=0, xvals=xv)
    np.testing.assert_allclose(model.predict(xv[:, None]), ref, rtol=0, atol=1e-8)


def test_equals_kernelreg_local_linear(diabetes):
    X, y = diabetes
    bw = 0.8 * X.std(axis=0)
    kr = KernelReg(y, X, var_type="cccc", reg_type="ll", bw=bw, rng=0)
    Xq = X[:40] + 0.3 * bw
    model = LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw).fit(X, y)
    np.testing.assert_allclose(model.predict(X), kr.fit()[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.predict(Xq), kr.fit(Xq)[0], rtol=0, atol=1e-6)


def test_degree_zero_is_the_local_mean(diabetes):
    X, y = diabetes
    for kw in [dict(kernel="gaussian", bandwidth=0.05), dict(kernel="tricube", n_neighbors=30)]:
        got = LocalPolynomialRegressor(degree=0, **kw).fit(X, y).predict(X[:50])
        ref = LocalMeanRegressor(**kw).fit(X, y).predict(X[:50])
        np.testing.assert_allclose(got, ref, rtol=1e-10)


def hand_wls(Xq, X, y, degree, K):
    """Weighted least squares at each query, one lstsq per query, on (x - x*)."""
    E = monomial_exponents(X.shape[1], degree)
    out = []
    for q, w in zip(Xq, K):
        Z = X - q
        Psi = np.prod(Z[:, None, :] ** E[None], axis=2)
        root = np.sqrt(w)
        out.append(np.linalg.lstsq(Psi * root[:, None], y * root, rcond=None)[0][0])
    return np.array(out)


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_higher_degrees_equal_weighted_least_squares(diabetes, degree):
    X, y = diabetes
    X = X[:, :2] / X[:, :2].std(axis=0)
    Xq = X[:25] + 0.1
    # Gaussian kernel (engine moments, moved to the query) and a tricube span (gathered design)
    model = LocalPolynomialRegressor(degree=degree, kernel="gaussian", bandwidth=0.8).fit(X, y)
    np.testing.assert_allclose(model.predict(Xq), hand_wls(Xq, X, y, degree, Kernel("gaussian", 0.8)(Xq, X)),
                               rtol=1e-7)
    model = LocalPolynomialRegressor(degree=degree, n_neighbors=60).fit(X, y)
    K = Kernel("tricube", n_neighbors=60)(Xq, X)
    np.testing.assert_allclose(model.predict(Xq), hand_wls(Xq, X, y, degree, K), rtol=1e-9)


def test_loo_predict_is_a_refit_without_the_sample(sine):
    x, y = sine
    X = x[:120, None]
    y = y[:120]
    for kw in [dict(n_neighbors=15), dict(kernel="gaussian", bandwidth=0.3), dict(degree=2, n_neighbors=20)]:
        loo = LocalPolynomialRegressor(**kw).fit(X, y).loo_predict()
        for i in [0, 7, 60, 119]:
            keep = np.arange(len(X)) != i
            refit = LocalPolynomialRegressor(**kw).fit(X[keep], y[keep]).predict(X[i:i + 1])
            np.testing.assert_allclose(loo[i], refit[0], rtol=1e-10)


def test_near_singular_design_falls_back_with_a_warning():
    # collinear samples in 2-D: the slope across the line is not identified
    t = np.linspace(0, 1, 50)
    X = np.c_[t, 2 * t]
    y = np.sin(3 * t)
    Xq = np.c_[t[:10], 2 * t[:10] + 0.01]
    with pytest.warns(RuntimeWarning, match="near-singular"):
        got = LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.2).fit(X, y).predict(Xq)
    mean = LocalMeanRegressor(bandwidth=0.2).fit(X, y).predict(Xq)
    np.testing.assert_allclose(got, mean, rtol=1e-10)  # the documented fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ridge makes the design regular: no fallback
        ridged = LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.2, ridge=1e-3).fit(X, y).predict(Xq)
    assert np.all(np.isfinite(ridged)) and np.abs(ridged - np.sin(3 * t[:10])).max() < 0.05
    # too few neighbours for a quadratic in 1-D: three points, one of weight zero
    with pytest.warns(RuntimeWarning, match="near-singular"):
        got = LocalPolynomialRegressor(degree=2, n_neighbors=3).fit(t[:, None], y).predict([[0.5]])
    assert np.isfinite(got).all()


@pytest.mark.parametrize("params, match", [
    (dict(degree=-1), "degree"),
    (dict(degree=1.5), "degree"),
    (dict(frac=0.0), "frac"),
    (dict(frac=1.5), "frac"),
    (dict(robust_iters=-1), "robust_iters"),
    (dict(frac=0.5, bandwidth=1.0), "bandwidth and frac"),
    (dict(frac=0.5, n_neighbors=4), "frac and n_neighbors"),
    (dict(ridge=-1.0), "ridge"),
    (dict(bandwidth=-1.0), "bandwidth"),
    (dict(n_neighbors=0), "n_neighbors"),
    (dict(kernel="nope", bandwidth=1.0), "kernel"),
])
def test_bad_parameters(sine, params, match):
    x, y = sine
    with pytest.raises((ValueError, TypeError), match=match):
        LocalPolynomialRegressor(**params).fit(x[:, None], y)


def test_bad_data(sine):
    x, y = sine
    X = x[:, None]
    model = LocalPolynomialRegressor()
    with pytest.raises(ValueError, match="NaN"):
        model.fit(np.where(X > 3, np.nan, X), y)
    with pytest.raises(ValueError, match="inf"):
        model.fit(X, np.where(y > 0, np.inf, y))
    with pytest.raises(ValueError):
        model.fit(X[:0], y[:0])
    with pytest.raises(ValueError):
        model.fit(X, y[:-1])
    model.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.ones((3, 2)))


def test_check_estimator():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tiny random data: singular designs
        # the default span is measured in weight (sample_weight_type="frequency"): every check runs
        check_estimator(LocalPolynomialRegressor())
        check_estimator(LocalPolynomialRegressor(degree=2, kernel="gaussian", bandwidth=1.0))
        # R's prior weights: a span counts samples, not weight, so integer weights are not
        # repeated rows there; that is their definition, not a gap
        check_estimator(LocalPolynomialRegressor(sample_weight_type="prior"), expected_failed_checks={
            "check_sample_weight_equivalence_on_dense_data": "R's prior weights: a span counts samples"})


def test_check_estimator_interpolated_surface():
    """check_estimator's 30-feature data gave 2^30 corners per cell (never finished): beyond
    INTERPOLATE_MAX_FEATURES the fit is direct, with a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tiny random data: singular designs
        warnings.simplefilter("ignore", UserWarning)  # the direct fallback beyond 4 features
        check_estimator(LocalPolynomialRegressor(surface="interpolate"))


def test_interpolated_surface_beyond_four_features_is_direct_with_a_warning():
    """50 x 16 built 557k vertex fits; now the direct fit, warned at the caller's line."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 16)), rng.normal(size=50)
    with pytest.warns(UserWarning, match=r"surface='interpolate' .* up to 4 features .* n_features=16") as rec:
        model = LocalPolynomialRegressor(surface="interpolate", frac=0.9).fit(X, y)
    assert rec[0].filename == __file__
    assert model.surface_ is None
    direct = LocalPolynomialRegressor(frac=0.9).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), direct.predict(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # 4 features: the surface, no warning
        assert LocalPolynomialRegressor(surface="interpolate", frac=0.9).fit(X[:, :4], y).surface_ is not None


@pytest.mark.parametrize("name", sorted(name for name, p in PROFILES.items() if p.poly is not None))
@pytest.mark.parametrize("degree", [0, 1, 2])
def test_fused_window_weights_equal_the_profiles(sine, name, degree):
    # the compiled 1-D window evaluates (1 - u^a)^b inline; the engine path uses Profile.log_k
    x, y = sine
    X = x[:, None]
    fused = LocalPolynomialRegressor(degree=degree, kernel=name, n_neighbors=40).fit(X, y).predict(X)
    dense = LocalPolynomialRegressor(degree=degree, kernel=name, n_neighbors=40, algorithm="dense").fit(X, y)
    np.testing.assert_allclose(fused, dense.predict(X), rtol=0, atol=1e-9)


def test_loo_in_several_dimensions(diabetes):
    X, y = diabetes
    X, y = X[:80, :2], y[:80]
    loo = LocalPolynomialRegressor(n_neighbors=20).fit(X, y).loo_predict()
    for i in [0, 41, 79]:
        keep = np.arange(len(X)) != i
        refit = LocalPolynomialRegressor(n_neighbors=20).fit(X[keep], y[keep]).predict(X[i:i + 1])
        np.testing.assert_allclose(loo[i], refit[0], rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), shift=st.floats(-1e3, 1e3), degree=st.integers(0, 2),
       span=st.sampled_from([dict(n_neighbors=12), dict(kernel="gaussian", bandwidth=0.7)]))
def test_invariant_to_permutation_and_translation(seed, shift, degree, span):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 2))
    y = X[:, 0] ** 2 + rng.normal(scale=0.1, size=40)
    Xq = rng.normal(size=(7, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        base = LocalPolynomialRegressor(degree=degree, **span).fit(X, y).predict(Xq)
        perm = rng.permutation(40)
        permuted = LocalPolynomialRegressor(degree=degree, **span).fit(X[perm], y[perm]).predict(Xq)
        moved = LocalPolynomialRegressor(degree=degree, **span).fit(X + shift, y).predict(Xq + shift)
    np.testing.assert_allclose(permuted, base, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(moved, base, rtol=1e-6, atol=1e-6)


def test_weighted_bandwidth_rule_is_the_local_means():
    """degree 0 with a rule and sample weights: the local mean's (weighted) rule and result."""
    from localkit import local_mean
    from localkit.engine.local_models.polynomial import local_polynomial

    X, y = load_diabetes(return_X_y=True)
    X = X[:, :3]
    w = np.random.default_rng(0).uniform(0, 2, len(X))
    w[:40] = 0.0
    fit = local_polynomial(X[:30], X, y, degree=0, kernel="gaussian", bandwidth="scott", sample_weight=w)
    np.testing.assert_allclose(fit.values[:, 0], local_mean(X[:30], X, y, "gaussian", "scott", sample_weight=w),
                               rtol=1e-10)
    est = LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth="silverman").fit(X, y, sample_weight=w)
    np.testing.assert_allclose(est.bandwidth_, LocalMeanRegressor(bandwidth="silverman").fit(
        X, y, sample_weight=w).bandwidth_, rtol=1e-12)


def test_thousands_of_features_need_no_recursion():
    """The monomials are listed without recursing over the features (d = 2,500 raised
    RecursionError): degree 0 is the local mean there, degree 1's exponents are 1 and each z_m."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(6, 2500)), rng.normal(size=6)
    E = monomial_exponents(2500, 1)
    np.testing.assert_array_equal(E, np.vstack([np.zeros(2500, dtype=np.intp), np.eye(2500, dtype=np.intp)]))
    fit = LocalPolynomialRegressor(degree=0, kernel="gaussian", bandwidth=60.0).fit(X, y)
    mean = LocalMeanRegressor(kernel="gaussian", bandwidth=60.0).fit(X, y)
    np.testing.assert_allclose(fit.predict(X[:3]), mean.predict(X[:3]), rtol=1e-12)
    with pytest.raises(ValueError, match="degree=1 with n_features=2500 has 2,501 monomials"):
        LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth=60.0).fit(X, y)


@pytest.mark.parametrize("kwargs", [dict(degree=-1), dict(degree=1.5), dict(degree=True), dict(ridge=-1.0),
                                    dict(ridge=np.nan), dict(rcond=-1.0), dict(algorithm="bogus"),
                                    dict(slopes="yes"), dict(exclude_self="yes"), dict(block_size=0)])
def test_bad_options_are_named_not_fitted(kwargs):
    """Declared constraints (``validate_params``): each used to give a silent answer (a negative
    degree the local mean, a negative ridge or rcond an unregularised fit, an unknown algorithm
    the dense path) or an error from deep inside."""
    X = np.random.default_rng(0).normal(size=(30, 2))
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"'{name}' parameter of local_polynomial"):
        local_polynomial(X[:3], X, X[:, 0], **kwargs)
    if name in ("exclude_self", "algorithm", "block_size"):
        with pytest.raises(ValueError, match=f"'{name}' parameter of local_covariance"):
            local_covariance(X[:3], X, **kwargs)


@pytest.mark.parametrize("fit", ["local_polynomial", "local_covariance", "kernel_density", "local_sums", "local_mean"])
def test_an_option_the_call_does_not_take_is_a_type_error_naming_those_it_does(fit):
    """Engine keywords travel as ``**options`` into one EngineOptions: a misspelt or foreign one
    (``empty`` means nothing to a local fit or a density) is refused by name, as Python refuses an
    unknown argument, never silently ignored."""
    from localkit import kernel_density, local_mean, local_sums

    X = np.random.default_rng(0).normal(size=(30, 2))
    call = {"local_polynomial": local_polynomial, "local_covariance": local_covariance,
            "kernel_density": kernel_density, "local_sums": local_sums, "local_mean": local_mean}[fit]
    args = (X[:3], X, X[:, 0]) if fit in ("local_polynomial", "local_mean") else (X[:3], X)
    with pytest.raises(TypeError, match=rf"{fit}\(\) got unexpected keyword argument\(s\) 'n_job'; "
                                        r"its engine options are .*n_jobs"):
        call(*args, n_job=2)
    if fit == "local_mean":  # its per-point keywords still reach local_sums
        np.testing.assert_array_equal(call(*args, query_scale=np.ones(3)), call(*args))
    if fit not in ("local_sums", "local_mean"):
        with pytest.raises(TypeError, match="unexpected keyword argument\\(s\\) 'empty'"):
            call(*args, empty="nan")
    with pytest.raises(ValueError, match=f"The 'memory_budget' parameter of {fit} must be a float"):
        call(*args, memory_budget=-1.0)


# -- issue 25: sample weights as scikit-learn means them (repeated rows) or as R's prior weights
def test_default_span_passes_scikit_learns_weight_equivalence_check():
    """scikit-learn's own check (integer weights, zeros included, against the repeated rows):
    a span counted in samples was 0.17 off; measured in weight it is the repeated rows' fit."""
    from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tiny random data: singular designs
        for est in (LocalPolynomialRegressor(), LocalPolynomialRegressor(frac=0.5, robust_iters=2),
                    LocalPolynomialRegressor(n_neighbors=9, degree=0)):
            check_sample_weight_equivalence_on_dense_data(type(est).__name__, est)
        with pytest.raises(AssertionError, match="not equivalent to fitting with removed or repeated"):
            check_sample_weight_equivalence_on_dense_data("prior", LocalPolynomialRegressor(sample_weight_type="prior"))


@pytest.mark.parametrize("params", [dict(), dict(frac=0.2), dict(n_neighbors=25), dict(frac=0.3, degree=2),
                                    dict(frac=0.4, robust_iters=3), dict(kernel="epanechnikov", frac=0.3),
                                    dict(frac=0.3, metric="manhattan")])
@pytest.mark.parametrize("d", [1, 3])
def test_frequency_weights_are_repeated_rows_for_every_span(params, d):
    """Diabetes, integer weights 0..3: the span in weight, the weighted median of the robustness
    iterations and leave-one-out (every copy of a row left out with it, as twins) equal the fit on
    the rows repeated."""
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:150, 2:2 + d], y[:150]
    c = np.random.default_rng(d).integers(0, 4, size=len(X))
    weighted = LocalPolynomialRegressor(**params).fit(X, y, sample_weight=c)
    repeated = LocalPolynomialRegressor(**params).fit(np.repeat(X, c, axis=0), np.repeat(y, c))
    Q = load_diabetes(return_X_y=True)[0][300:340, 2:2 + d]
    np.testing.assert_allclose(weighted.predict(Q), repeated.predict(Q), rtol=0, atol=1e-9 * np.abs(y).max())
    np.testing.assert_allclose(weighted.predict(X), repeated.predict(X), rtol=0, atol=1e-9 * np.abs(y).max())
    if params.get("robust_iters"):
        np.testing.assert_allclose(np.repeat(weighted.robust_weights_, c), repeated.robust_weights_, atol=1e-9)
    else:
        kept = c > 0
        np.testing.assert_allclose(weighted.loo_predict()[kept], repeated.loo_predict()[np.cumsum(c)[kept] - 1],
                                   rtol=0, atol=1e-9 * np.abs(y).max())
    # R's prior weights keep the span in samples: another fit (the one tests/test_loess_* pin to R)
    prior = LocalPolynomialRegressor(**params, sample_weight_type="prior").fit(X, y, sample_weight=c)
    assert np.abs(prior.predict(Q) - repeated.predict(Q)).max() > 1e-3 * np.abs(y).max()


def test_weighted_median_is_the_median_of_repeated_values():
    from localkit.models.polynomial import weighted_median

    rng = np.random.default_rng(0)
    for n in range(1, 12):
        for _ in range(20):
            a, c = rng.normal(size=n).round(1), rng.integers(0, 4, size=n)
            if c.sum():
                assert weighted_median(a, c) == np.median(np.repeat(a, c))


def test_sample_weight_type_bad_values(sine):
    x, y = sine
    X = x[:, None]
    with pytest.raises(ValueError, match="sample_weight_type"):
        LocalPolynomialRegressor(sample_weight_type="counts").fit(X, y)
    with pytest.raises(ValueError, match=r"span of 30 exceeds the total sample weight 20.*sample_weight_type='prior'"):
        LocalPolynomialRegressor(n_neighbors=30).fit(X[:40], y[:40], sample_weight=np.full(40, 0.5))
    # a span in samples has no such bound
    LocalPolynomialRegressor(n_neighbors=30, sample_weight_type="prior").fit(X[:40], y[:40],
                                                                            sample_weight=np.full(40, 0.5))


def test_per_sample_bandwidths_take_the_empty_rows_nearest_sample_in_the_kernels_metric():
    """With ``sample_scale`` the fit bound its own kernel and found an empty row's nearest sample in
    raw coordinates, where the fit without it (and every engine pass) finds it in the kernel's,
    each feature over its bandwidth: at bandwidths of 1e-4 and 0.1 on features of range 1 and 1000,
    unit scales gave other values than no scales at all."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 1, 200), rng.uniform(0, 1000, 200)])
    y = rng.normal(size=200)
    Q = np.column_stack([rng.uniform(0, 1, 40), rng.uniform(0, 1000, 40)])
    kernel = Kernel("epanechnikov", bandwidth=[1e-4, 0.1])
    plain = local_polynomial(Q, X, y, 0, kernel, algorithm="dense")
    scaled = local_polynomial(Q, X, y, 0, kernel, algorithm="dense", sample_scale=np.ones(200))
    assert plain.empty.all() and scaled.empty.all()
    u = ((Q[:, None, :] - X[None, :, :]) / np.array([1e-4, 0.1])) ** 2
    np.testing.assert_array_equal(scaled.values[:, 0], y[u.sum(axis=2).argmin(axis=1)])
    np.testing.assert_array_equal(scaled.values, plain.values)


def test_a_bound_kernel_must_carry_the_sample_scale_asked_for():
    """``bound`` serves the fit's weights: a binding without the per-sample bandwidths asked for
    (or with others) would give the weights of another fit, so it is refused by name."""
    from localkit.engine import BoundKernel

    X = np.random.default_rng(0).normal(size=(40, 2))
    kernel, scale = Kernel("gaussian", bandwidth=0.7), np.linspace(0.5, 2.0, 40)
    with pytest.raises(ValueError, match="bound must bind the samples with the sample_scale given here"):
        local_polynomial(X[:3], X, X[:, 0], 1, kernel, sample_scale=scale, bound=BoundKernel(kernel, X))
    with pytest.raises(ValueError, match="bound must bind the samples with the sample_scale given here"):
        local_polynomial(X[:3], X, X[:, 0], 1, kernel, bound=BoundKernel(kernel, X, sample_scale=scale))
    bound = BoundKernel(kernel, X, sample_scale=scale)
    kept = local_polynomial(X[:3], X, X[:, 0], 1, kernel, sample_scale=scale, bound=bound)
    fresh = local_polynomial(X[:3], X, X[:, 0], 1, kernel, sample_scale=scale)
    np.testing.assert_array_equal(kept.values, fresh.values)
