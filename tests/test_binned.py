"""The binned pass (localkit.engine.passes.binned) against the exact one, statsmodels' FFT density, and
the inputs it refuses."""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris, load_wine

from localkit import KernelDensity, LocalMeanRegressor, LocalPolynomialRegressor, kernel_density, local_sums
from localkit.engine import BoundKernel, EngineOptions
from localkit.engine.passes.binned import Grid
from localkit.kernels import Kernel
from localkit.kernels.profiles import PROFILES

#: a kink or a jump inside the support (triangular and laplacian at 0, uniform at its edge): error O(delta / h)
ROUGH = {"triangular", "laplacian", "uniform"}


def _data(d):
    """Real data in 1, 2, 3 features (diabetes' bmi; iris' petals; wine's alcohol, colour, proline)
    and a value to average."""
    if d == 1:
        data = load_diabetes()
        return data.data[:, [2]], data.target
    if d == 2:
        data = load_iris()
        return data.data[:, [2, 3]], data.data[:, 0]
    data = load_wine()
    return data.data[:, [0, 9, 12]], data.target.astype(float)


def _bound(profile, spacing, dtype):
    """The documented bound (localkit.engine.passes.binned): relative error ``8 (delta/h)^2`` for a
    profile smooth inside its support, ``4 delta/h`` for a rough one; float32 adds its round-off."""
    bound = 4 * spacing if profile in ROUGH else 8 * spacing**2
    return bound + (2e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_binned_equals_exact_to_the_bound(d, profile):
    """The documented bound ``B`` (localkit.engine.passes.binned), with sample weights, in float64 and
    float32: at the samples, the weight sum's relative error and the local mean's (relative to the
    values' range) where the weight sum exceeds 1e-3 of its largest; at as many queries drawn anywhere
    in the data's box (and half a bandwidth beyond), the weight sum's error relative to its largest
    and the mean's error times its weight sum relative to the largest (relative to itself for the
    smooth profiles, gaussian and cauchy; the uniform profile's jump has no bound off the samples)."""
    X, y = _data(d)
    h = 0.5 * X.std(axis=0)  # per-feature bandwidths
    grid = {1: None, 2: (256, 300), 3: (40, 48, 56)}[d]  # the default grid in 1-D; coarser ones keep this quick
    rng = np.random.default_rng(0)
    c = rng.uniform(0.5, 2.0, len(X))
    Q = np.concatenate([X, rng.uniform(X.min(axis=0) - h / 2, X.max(axis=0) + h / 2, X.shape)])
    spacing = float(np.max(Grid(X, Q, h, PROFILES[profile], grid).spacing))  # delta / h of the grid used
    for dtype in (np.float64, np.float32):
        Xd, Qd = X.astype(dtype), Q.astype(dtype)
        got = local_sums(Qd, Xd, y, profile, h, sample_weight=c, algorithm="binned", grid_size=grid)
        ref = local_sums(Qd, Xd, y, profile, h, sample_weight=c, algorithm="dense")
        assert got.mean.dtype == dtype and got.log_weight_sum.dtype == dtype
        W, Wb = ref.weight_sum.astype(float), got.weight_sum.astype(float)
        bound = _bound(profile, spacing, dtype)
        on, off = slice(0, len(X)), slice(len(X), None)
        body = W[on] > 1e-3 * W[on].max()
        assert np.max(np.abs(Wb[on][body] / W[on][body] - 1)) <= bound, (profile, d, dtype)
        assert np.max(np.abs(got.mean[on][body] - ref.mean[on][body])) <= bound * np.ptp(y), (profile, d, dtype)
        if profile == "uniform":
            continue
        top = W[off].max()
        assert np.max(np.abs(Wb[off] - W[off])) <= bound * top, (profile, d, dtype)
        assert np.max(np.abs(got.mean[off] - ref.mean[off]) * W[off]) <= bound * top * np.ptp(y), (profile, d, dtype)
        if profile in ("gaussian", "cauchy"):
            body = W[off] > 1e-3 * top
            assert np.max(np.abs(Wb[off][body] / W[off][body] - 1)) <= bound, (profile, d, dtype)


def test_binned_at_queries_off_the_samples_and_beyond_reach():
    X, y = _data(2)
    h = 0.4 * X.std(axis=0)
    Q = np.array([[3.0, 1.0], [5.5, 2.1], [100.0, 1.0]])  # the last beyond every sample's reach
    with pytest.warns(RuntimeWarning, match="some queries have an empty neighbourhood") as rec:
        got = local_sums(Q, X, y, "biweight", h, algorithm="binned", empty="nan")
    with pytest.warns(RuntimeWarning, match="some queries have an empty neighbourhood") as rec_ref:
        ref = local_sums(Q, X, y, "biweight", h, algorithm="dense", empty="nan")
    assert rec[0].message.n_empty == rec_ref[0].message.n_empty == 1
    np.testing.assert_allclose(got.weight_sum[:2], ref.weight_sum[:2], rtol=1e-3)
    np.testing.assert_allclose(got.mean[:2], ref.mean[:2], rtol=1e-3)
    assert got.empty.tolist() == [False, False, True] and np.isnan(got.mean[2])


def test_binned_density_against_statsmodels_fft():
    """statsmodels' ``KDEUnivariate(fft=True)`` bins linearly as this pass does, then multiplies the
    bins' DFT by the Gaussian's continuous Fourier transform on a periodic grid 3 bandwidths
    beyond the data: that aliases its tails, by up to 1e-3 of the peak (measured 2e-4 to 8e-4 on
    diabetes and iris); the binned pass is within its bound of the exact density there (1e-4 on
    its default grid, 1e-6 when asked for)."""
    import statsmodels.api as sm
    for x in (load_diabetes().data[:, 2], load_iris().data[:, 0]):
        h = 0.3 * x.std()
        kde = sm.nonparametric.KDEUnivariate(x)
        kde.fit(kernel="gau", fft=True, bw=h, gridsize=2**12)
        ours = kernel_density(kde.support[:, None], x[:, None], bandwidth=h, algorithm="binned")
        assert np.max(np.abs(ours - kde.density)) <= 1e-3 * kde.density.max()
        exact = kernel_density(kde.support[::16, None], x[:, None], bandwidth=h, algorithm="dense")
        fine = kernel_density(kde.support[::16, None], x[:, None], bandwidth=h, algorithm="binned", tolerance=1e-6)
        np.testing.assert_allclose(fine, exact, rtol=1e-6)  # the tolerance asked for
        body = exact > 1e-3 * exact.max()
        bound = Grid(x[:, None], kde.support[:, None], h, PROFILES["gaussian"]).bound  # the default grid's
        assert np.max(np.abs(ours[::16][body] / exact[body] - 1)) <= bound


def test_binned_through_the_estimators():
    X, y = _data(1)
    h = 0.3 * X.std()
    Q = np.linspace(X.min(), X.max(), 25)[:, None]
    kd = KernelDensity(bandwidth=h, algorithm="binned").fit(X)
    np.testing.assert_allclose(kd.score_samples(Q), KernelDensity(bandwidth=h).fit(X).score_samples(Q), atol=1e-6)
    reg = LocalMeanRegressor(bandwidth=h, algorithm="binned").fit(X, y)
    np.testing.assert_allclose(reg.predict(Q), LocalMeanRegressor(bandwidth=h).fit(X, y).predict(Q), rtol=1e-6)
    lp = LocalPolynomialRegressor(kernel="gaussian", bandwidth=h, algorithm="binned").fit(X, y)  # binned moments
    ref = LocalPolynomialRegressor(kernel="gaussian", bandwidth=h).fit(X, y)
    np.testing.assert_allclose(lp.predict(Q), ref.predict(Q), rtol=1e-6)
    with pytest.raises(ValueError, match="frac"):  # a span is not a fixed bandwidth
        LocalPolynomialRegressor(frac=0.3, algorithm="binned").fit(X, y)


def test_binned_is_asked_for_only_and_explained():
    X, _ = _data(1)
    kern = Kernel("gaussian", bandwidth=0.01)
    assert BoundKernel(kern, X).explain().path == "dense"
    plan = BoundKernel(kern, X, options=EngineOptions(algorithm="binned")).explain()
    assert plan.path == "binned" and "binned" in str(plan)


@pytest.mark.parametrize("kwargs, word", [
    (dict(samples=np.random.default_rng(0).normal(size=(50, 4))), "n_features"),
    (dict(n_neighbors=5), "n_neighbors"),
    (dict(metric="manhattan"), "metric"),
    (dict(exclude_self=True), "exclude_self"),
    (dict(kernel="softmax"), "softmax"),
    (dict(query_scale=np.ones(150)), "query_scale"),
    (dict(sample_scale=np.ones(150)), "sample_scale"),
])
def test_binned_refusals_name_the_parameter(kwargs, word):
    args = dict(samples=load_iris().data[:, :1], kernel="gaussian", bandwidth=0.5) | kwargs
    samples = args.pop("samples")
    with pytest.raises(ValueError, match=word):
        local_sums(None, samples, algorithm="binned", **args)


@pytest.mark.parametrize("grid_size", [1, 2.5, (4, 0), True, ()])
def test_grid_size_is_checked(grid_size):
    with pytest.raises(ValueError, match="grid_size"):
        EngineOptions(grid_size=grid_size)


def test_grid_size_must_match_the_features():
    X, _ = _data(2)
    with pytest.raises(ValueError, match="grid_size"):
        local_sums(None, X, algorithm="binned", grid_size=(64, 64, 64))


def test_binned_on_dask_chunks():
    """Each sample chunk is binned on its own grid; the chunks' sums merge as the exact ones do."""
    import dask.array as da
    X, y = _data(1)
    h = 0.3 * X.std()
    got = local_sums(da.from_array(X[:50], chunks=25), da.from_array(X, chunks=150), da.from_array(y, chunks=150),
                     "gaussian", h, algorithm="binned")
    ref = local_sums(X[:50], X, y, "gaussian", h, algorithm="dense")
    np.testing.assert_allclose(np.asarray(got.mean.compute()), ref.mean, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got.log_weight_sum.compute()), ref.log_weight_sum, atol=1e-6)


def test_binned_refuses_tensors_under_array_api_dispatch(dispatch):
    import torch
    X, y = _data(1)
    with pytest.raises(ValueError, match="binned"):
        local_sums(torch.tensor(X), torch.tensor(X), torch.tensor(y), "gaussian", 0.01, algorithm="binned")


def test_grid_rule_is_the_fewest_points_that_meet_the_tolerance():
    from localkit.engine.passes.binned import GRID_LIMIT, error_bound, grid_shape
    for name in ("gaussian", "epanechnikov", "uniform"):
        profile = PROFILES[name]
        for extent, tol in ((2.0, 1e-4), (0.5, 1e-3)) + (((10.0, 1e-6),) if name == "gaussian" else ()):
            (n,) = grid_shape(None, [extent], profile, tol)
            assert error_bound(profile, extent / (n - 1)) <= tol < error_bound(profile, extent / (n - 2))
    (n, m) = grid_shape(None, [1e4, 2.0], PROFILES["gaussian"], 1e-4)  # a capped feature, one within the rule
    assert n == GRID_LIMIT[2] and error_bound(PROFILES["gaussian"], 2.0 / (m - 1)) <= 1e-4


def test_auto_takes_binned_only_under_a_tolerance_its_bound_meets():
    X = load_diabetes().data[:, [2]]
    h = 0.3 * X.std()
    kern = Kernel("gaussian", bandwidth=h)
    assert BoundKernel(kern, X).explain().path == "dense"  # no tolerance: exact
    plan = BoundKernel(kern, X, options=EngineOptions(tolerance=1e-6)).explain()
    assert plan.path == "binned" and "tolerance=1e-06" in str(plan)
    got = local_sums(X[:40], X, None, kern, tolerance=1e-6)
    ref = local_sums(X[:40], X, None, kern, algorithm="dense")
    np.testing.assert_allclose(got.weight_sum, ref.weight_sum, rtol=1e-6)
    # the triangular profile's bound, 4 delta / h, cannot reach 1e-9 within the grid's limit: exact
    plan = BoundKernel(Kernel("triangular", bandwidth=h), X, options=EngineOptions(tolerance=1e-9)).explain()
    assert plan.path != "binned" and "exceeds tolerance=1e-09" in plan.reasons["binned"]
    # ... and it meets 1e-2; the uniform's jump has no bound off the samples, a user's profile no
    # known shape: never taken by auto, whatever the tolerance
    assert BoundKernel(Kernel("triangular", bandwidth=h), X, options=EngineOptions(tolerance=1e-2)).explain().path \
        == "binned"
    user = Kernel(lambda u2, xp: -0.5 * u2, bandwidth=h)
    for other in (Kernel("uniform", bandwidth=h), user):
        plan = BoundKernel(other, X, options=EngineOptions(tolerance=1e-2)).explain()
        assert plan.path != "binned" and "no error bound off the samples" in plan.reasons["binned"]
    # where the binned pass cannot apply, the tolerance changes nothing
    assert BoundKernel(kern, load_iris().data, options=EngineOptions(tolerance=1e-2)).explain().path == "dense"


@pytest.mark.parametrize("tolerance", [0, 1, -1e-3, True, "1e-4"])
def test_tolerance_is_checked(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        EngineOptions(tolerance=tolerance)


@pytest.mark.parametrize("d, profile", [(1, "gaussian"), (2, "gaussian"), (2, "biweight"), (3, "cauchy")])
def test_binned_fft_threads_change_nothing_beyond_round_off(d, profile):
    """``n_jobs`` gives the FFTs threads (scipy.fft's ``workers``); the inverse transform, one feature at a
    time, and the interpolation give the same sums on any number of them."""
    X, y = _data(d)
    h = 0.4 * X.std(axis=0)
    Q = np.random.default_rng(1).uniform(X.min(axis=0) - h, X.max(axis=0) + h, (200, d))
    grid = {1: None, 2: (200, 150), 3: (30, 40, 20)}[d]
    one = local_sums(Q, X, y, profile, h, algorithm="binned", grid_size=grid)
    two = local_sums(Q, X, y, profile, h, algorithm="binned", grid_size=grid, n_jobs=2)
    np.testing.assert_allclose(two.weight_sum, one.weight_sum, rtol=1e-12, atol=1e-12 * one.weight_sum.max())
    np.testing.assert_allclose(two.mean, one.mean, rtol=1e-12, atol=1e-12 * np.ptp(y))


def test_binned_pass_builds_no_column_of_ones():
    """The binned pass bins the weights itself: values prepared for it never build ``V_aug`` (for a
    million samples an 8 MB array), the other paths build it on first use."""
    X, y = _data(1)
    bound = BoundKernel(Kernel("gaussian", bandwidth=0.3 * X.std()), X, options=EngineOptions(algorithm="binned"))
    for values in (None, y):
        prepared = bound.prepare(values)
        bound.sums(X[:20], prepared)
        assert "V_aug" not in vars(prepared)
        dense = bound.using(EngineOptions(algorithm="dense")).sums(X[:20], prepared)
        np.testing.assert_allclose(prepared.V_aug[:, -1], 1.0)
        np.testing.assert_allclose(bound.sums(X[:20], prepared).log_weight_sum, dense.log_weight_sum, rtol=1e-4)


@pytest.mark.parametrize("profile, tolerance", [("gaussian", None), ("gaussian", 1e-6), ("cauchy", None),
                                                ("laplacian", None)])
@pytest.mark.parametrize("pairs", [None, 40, 3000])  # None: one block; 40: blocks and the dense pass
def test_far_queries_of_a_binned_pass_are_exact_to_the_tolerance(profile, tolerance, pairs, monkeypatch):
    """Queries the grid cannot resolve (far from every sample) are summed over the samples that
    carry them, the weight left out bounded: local means and log weight sums within the tolerance
    of the exact pass, however far (30 to 3,000 bandwidths)."""
    from localkit.engine import bind
    from localkit.engine.passes import neighbors

    if pairs is not None:
        monkeypatch.setattr(neighbors, "TRUNCATED_PAIRS", pairs)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 1))
    y = np.sin(3 * X[:, 0])
    Q = np.array([[-3.0], [1.2], [4.0], [-30.0]])  # 30 to 300 bandwidths beyond the samples
    kern = Kernel(profile, bandwidth=0.1)
    options = EngineOptions(algorithm="binned", tolerance=tolerance)
    binned = bind(kern, X, options=options).sums(Q, y)
    exact = bind(kern, X, options=EngineOptions(algorithm="dense")).sums(Q, y)
    tol = 1e-4 if tolerance is None else tolerance
    np.testing.assert_allclose(binned.mean, exact.mean, rtol=tol, atol=tol * np.abs(y).max())
    np.testing.assert_allclose(binned.log_weight_sum, exact.log_weight_sum, rtol=0, atol=tol)


@pytest.mark.parametrize("profile", ["gaussian"])  # (cauchy's far queries: the test above; its grid spans them)
@pytest.mark.parametrize("d", [1, 2])  # (3-D: radii of ~7 bandwidths span clusters: the tree, as before)
def test_far_queries_are_found_through_cells_without_a_tree_over_every_sample(profile, d):
    """The far queries' samples are found through coarse cells (no tree over every sample: its build
    cost 10x the binned pass at a million samples): queries beyond the samples, in a gap of 150
    bandwidths between two clusters, and just past an outlying sample, each within the tolerance
    of the exact sums."""
    from localkit.engine import bind
    from localkit.engine.passes.binned import FLOOR, TOLERANCE

    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(-10, 1, (2000, d)), rng.normal(10, 1, (2000, d)), np.full((1, d), 25.0)])
    y = np.cos(X[:, 0])
    along = np.array([-40.0, -14.5, 0.0, 3.3, 25.0 + 1e-9, 25.4, 60.0])
    Q = np.column_stack([along] + [np.full(len(along), 25.0 if f else 0.0) for f in range(d - 1)])
    Q[4:6, 1:] = 25.0  # beside the outlier in every feature
    kern = Kernel(profile, bandwidth={1: 0.1, 2: 0.5}[d])
    bound = bind(kern, X, options=EngineOptions(algorithm="binned"))
    binned = bound.sums(Q, y)
    assert not [key for key in bound.bound._cache if key[0] == "index"]  # no neighbour index built
    exact = bind(kern, X, options=EngineOptions(algorithm="dense")).sums(Q, y)
    # the far queries (unresolved by the grid: weight sums below FLOOR n / TOLERANCE) to the
    # tolerance; the others to the grid's own bound (2-D and 3-D grids are capped: coarser)
    far = exact.log_weight_sum < np.log(FLOOR * len(X) / TOLERANCE) - 1
    assert far.sum() >= 3
    bound_of_grid = Grid(X, Q, np.full(d, kern.bandwidth), kern.profile).bound
    for rows, tol in ((far, TOLERANCE), (~far, 2 * bound_of_grid)):
        np.testing.assert_allclose(binned.mean[rows], exact.mean[rows], rtol=tol, atol=tol * np.abs(y).max())
        np.testing.assert_allclose(binned.log_weight_sum[rows], exact.log_weight_sum[rows], rtol=0, atol=tol)


def test_auto_bins_many_samples_by_default_and_exact_is_one_argument_away():
    """Without a tolerance, "auto" takes the binned pass from AUTO_BINNED_SAMPLES samples where its
    grid costs less than the exact pass (the default tolerance met, and said), not below; the exact
    sums stay one argument away (algorithm='dense')."""
    from localkit.engine.planner import AUTO_BINNED_SAMPLES
    from localkit.engine.passes.binned import TOLERANCE

    rng = np.random.default_rng(0)
    X = rng.normal(size=(AUTO_BINNED_SAMPLES, 1))
    Q = np.linspace(-4, 4, 2000)[:, None]
    kern = Kernel("gaussian", bandwidth=0.05)
    plan = BoundKernel(kern, X).explain(Q)
    assert plan.path == "binned" and "the default" in plan.reasons["binned"]
    assert BoundKernel(kern, X[:AUTO_BINNED_SAMPLES - 1]).explain(Q).path != "binned"
    assert BoundKernel(kern, X).explain(Q[:1]).path != "binned"  # one query: the exact pass is cheaper
    approx = local_sums(Q, X, X[:, 0] ** 2, kern)
    exact = local_sums(Q, X, X[:, 0] ** 2, kern, algorithm="dense")
    np.testing.assert_allclose(approx.weight_sum, exact.weight_sum, rtol=0, atol=TOLERANCE * exact.weight_sum.max())
    assert not np.array_equal(approx.weight_sum, exact.weight_sum)
