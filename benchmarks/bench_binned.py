"""The binned pass (``algorithm="binned"``: linear binning, FFT convolution, multilinear
interpolation) on the issue's bars:

* a Gaussian density of 1,000,000 samples on 8,192 grid points, against KDEpy's ``FFTKDE`` where
  it is installed, else statsmodels' ``KDEUnivariate(fft=True)``, each on its own grid; the error
  of each against the exact density (the dense pass) at every 64th grid point where the density
  exceeds 1e-3 of its peak;
* a Gaussian density of 1,000,000 samples in 2-D on a 256 x 256 grid against KDEpy's ``FFTKDE``
  (``evaluate((256, 256))``), the error against the exact density at 300 of its grid points;
* the error at arbitrary queries of every profile in 1, 2 and 3 features (diabetes, iris, wine,
  as ``tests/test_binned.py``, which pins it below the documented bound): at as many queries as
  samples, drawn in the data's box, the weight sum's error relative to itself (where it exceeds
  1e-3 of its largest) and relative to its largest, on the default grid (1-D, 2-D) and a
  40 x 48 x 56 grid (3-D);
* a local linear regression of 1,000,000 samples on 401 grid points (binned moments) against R's
  ``KernSmooth::locpoly(x, y, degree = 1, bandwidth = h, gridsize = 401)``, timed inside R with
  ``system.time`` (medians of repeats; no process start-up or transfer), on KernSmooth's grid
  ``seq(min(x), max(x), length = 401)``; the error of each against the exact local linear fit
  (the dense path) at those 401 points. localkit runs on its default grid (2^16 points) and on
  KernSmooth's 401; KernSmooth truncates its Gaussian at 4 standard deviations, localkit keeps
  the tail to ``2^-52``.
"""

import os
import sys
from pathlib import Path

import numpy as np
from localkit._timing import interleaved

TITLE = "Binned pass: 1-D and 2-D Gaussian KDE at FFT speed against KDEpy / statsmodels"


def _peer(x, h, m):
    """``(name, fit, grid_of)``: the peer's density on its own grid of ``m`` points."""
    try:
        from KDEpy import FFTKDE

        def fit():
            return FFTKDE(kernel="gaussian", bw=h).fit(x).evaluate(m)

        return "KDEpy FFTKDE", fit, lambda out: out
    except ImportError:
        import statsmodels.api as sm

        def fit():
            kde = sm.nonparametric.KDEUnivariate(x)
            kde.fit(kernel="gau", fft=True, bw=h, gridsize=m)
            return kde.support, kde.density

        return "statsmodels KDEUnivariate(fft=True)", fit, lambda out: out


def _local_linear(quick):
    """The 1-D local linear bar against KernSmooth's locpoly (markdown lines, or a line saying why not)."""
    from localkit.engine import local_polynomial
    from localkit._timing import median_time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # R's reference lives with the tests
    from r_reference import have_kernsmooth, r_locpoly

    if not have_kernsmooth():
        return ["", "Local linear against KernSmooth: not run (needs Rscript with KernSmooth: "
                "apt-get install r-cran-kernsmooth)."]
    n = 100_000 if quick else 1_000_000
    repeat = 3 if quick else 7
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 1.0, n)
    y = np.sin(6.0 * x) + 0.5 * x + rng.normal(0.0, 0.3, n)
    h = 0.02
    grid, ks, t_ks, version = r_locpoly(x, y, drv=0, degree=1, bandwidth=h, gridsize=401, repeats=repeat)
    X, G = x[:, None], grid[:, None]
    rows = []
    exact = local_polynomial(G, X, y, 1, "gaussian", h, algorithm="dense").values[:, 0]
    err_ks = np.max(np.abs(ks - exact))
    for size, label in ((None, "default grid 2^16"), (401, "grid 401")):
        def ours():
            return local_polynomial(G, X, y, 1, "gaussian", h, algorithm="binned", grid_size=size).values[:, 0]
        ours()
        f, t = median_time(ours, repeat)
        err = np.max(np.abs(f - exact))
        rows.append(f"| local linear, {n:,} samples, 401 points | localkit binned ({label}) | {t * 1e3:.1f} ms "
                    f"| {t_ks * 1e3:.1f} ms | {t / t_ks:.2f} | {err:.1e} | {err_ks:.1e} | {err / err_ks:.2g} |")
    return [
        "",
        f"Local linear regression: y = sin(6x) + x/2 + N(0, 0.3^2), x uniform on [0, 1], Gaussian kernel h = {h} "
        f"(standard deviation), KernSmooth's 401 grid points over range(x). KernSmooth: {version}, "
        f"`locpoly(x, y, degree = 1, bandwidth = {h}, gridsize = 401)` timed by `system.time` inside R, median "
        f"of {repeat}; localkit: `local_polynomial(grid, x, y, 1, 'gaussian', {h}, algorithm='binned')`, median "
        f"of {repeat} after one warm-up. Errors: max |fit - exact local linear fit| (the dense path) over the "
        "401 points (the bar: at most twice KernSmooth's).",
        "",
        "| job | localkit | localkit time | KernSmooth time | localkit / KernSmooth | localkit error "
        "| KernSmooth error | error ratio |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def _two_d(quick):
    """The 2-D bar against KDEpy (markdown lines, or a line saying why not)."""
    from localkit import kernel_density
    from localkit._timing import interleaved

    try:
        from KDEpy import FFTKDE
    except ImportError:
        return ["2-D density against KDEpy: not run (KDEpy is not installed)."]
    n = 100_000 if quick else 1_000_000
    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0.0, 1.0, (n - n // 4, 2)), rng.normal([2.5, 1.0], [0.5, 0.8], (n // 4, 2))])
    h = X.std() * n ** (-1 / 6)  # Scott's rule, one bandwidth for both features (KDEpy's convention)

    def peer():
        return FFTKDE(kernel="gaussian", bw=h).fit(X).evaluate((256, 256))

    grid, _ = peer()

    def ours():
        return kernel_density(grid, X, bandwidth=h, algorithm="binned")

    (t_ours, t_peer), (f_ours, (_, f_peer)) = interleaved([ours, peer], repeat, warmup=True)
    rows = np.random.default_rng(1).choice(len(grid), 100 if quick else 300, replace=False)
    exact = kernel_density(grid[rows], X, bandwidth=h, algorithm="dense")
    body = exact > 1e-3 * exact.max()
    err_ours = np.max(np.abs(f_ours[rows][body] / exact[body] - 1))
    err_peer = np.max(np.abs(f_peer[rows][body] / exact[body] - 1))
    return [
        "",
        f"2-D: n = {n:,} samples (a two-Gaussian mixture), Gaussian kernel, h = {h:.4g} in both features, KDEpy's "
        f"256 x 256 grid (localkit evaluates at its points, default grid 1,536 x 1,536); medians of {repeat} "
        f"interleaved calls. Relative error against the exact density at {body.sum()} of 300 random grid points "
        f"where it exceeds 1e-3 of its peak (load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        "| job | localkit binned | peer | peer time | localkit / peer | localkit error | peer error |",
        "|---|---|---|---|---|---|---|",
        f"| 2-D Gaussian KDE, {n:,} samples, 256 x 256 points | {t_ours * 1e3:.0f} ms | KDEpy FFTKDE "
        f"| {t_peer * 1e3:.0f} ms | {t_ours / t_peer:.2f} | {err_ours:.1e} | {err_peer:.1e} |",
    ]


def _profiles():
    """The error at arbitrary queries, per profile and number of features (markdown lines)."""
    from sklearn.datasets import load_diabetes, load_iris, load_wine

    from localkit import local_sums
    from localkit.engine.passes.binned import Grid
    from localkit.kernels.profiles import PROFILES

    data = {1: load_diabetes().data[:, [2]], 2: load_iris().data[:, [2, 3]], 3: load_wine().data[:, [0, 9, 12]]}
    rows = []
    for d, X in data.items():
        h = 0.5 * X.std(axis=0)
        grid = (40, 48, 56) if d == 3 else None
        rng = np.random.default_rng(0)
        c = rng.uniform(0.5, 2.0, len(X))
        Q = rng.uniform(X.min(axis=0) - h / 2, X.max(axis=0) + h / 2, X.shape)
        for name in sorted(PROFILES):
            g = Grid(X, Q, h, PROFILES[name], grid)
            W = local_sums(Q, X, None, name, h, sample_weight=c, algorithm="dense").weight_sum
            Wb = local_sums(Q, X, None, name, h, sample_weight=c, algorithm="binned", grid_size=grid).weight_sum
            body = W > 1e-3 * W.max()
            rel = np.max(np.abs(Wb[body] / W[body] - 1))
            top = np.max(np.abs(Wb - W)) / W.max()
            rows.append(f"| {d} | {name} | {' x '.join(map(str, g.shape))} | {np.max(g.spacing):.1e} | {g.bound:.1e} "
                        f"| {rel:.1e} | {top:.1e} |")
    return [
        "",
        "Error at arbitrary queries (as many as samples, uniform in the data's box and half a bandwidth beyond; "
        "h = std / 2 per feature; sample weights uniform in [0.5, 2]): the weight sum's relative error where it "
        "exceeds 1e-3 of its largest, and its error relative to the largest; the documented bound B "
        "(`localkit.engine.passes.binned`) holds for the latter (all but uniform) and, for gaussian and cauchy, "
        "for the former.",
        "",
        "| features | profile | grid | delta / h | bound B | relative error | error / largest |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def run(quick=False):
    from localkit import kernel_density

    n, m = (100_000, 8_192) if quick else (1_000_000, 8_192)
    repeat = 3 if quick else 7
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.0, 1.0, n - n // 4), rng.normal(3.0, 0.5, n // 4)])
    h = 1.06 * x.std() * n ** -0.2  # Silverman's rule, fixed for both
    name, peer_fit, grid_of = _peer(x, h, m)
    grid, _ = grid_of(peer_fit())

    def ours():
        return kernel_density(grid[:, None], x[:, None], bandwidth=h, algorithm="binned")

    def ours_by_default():  # algorithm="auto": the planner bins by default (its far queries summed exactly)
        return kernel_density(grid[:, None], x[:, None], bandwidth=h)

    (t_ours, t_auto, t_peer), (f_ours, f_auto, peer_out) = interleaved([ours, ours_by_default, peer_fit], repeat,
                                                                       warmup=True)
    f_peer = grid_of(peer_out)[1]
    rows = np.arange(0, m, 64)
    exact = kernel_density(grid[rows, None], x[:, None], bandwidth=h, algorithm="dense")
    body = exact > 1e-3 * exact.max()
    err_ours = np.max(np.abs(f_ours[rows][body] / exact[body] - 1))
    err_auto = np.max(np.abs(f_auto[rows][body] / exact[body] - 1))
    err_peer = np.max(np.abs(f_peer[rows][body] / exact[body] - 1))
    return "\n".join([
        f"n = {n:,} samples (a two-Gaussian mixture), Gaussian kernel, h = {h:.4g} (Silverman), {m:,} grid "
        f"points (the peer's own grid; localkit evaluates at its points, on its default grid); medians of "
        f"{repeat} interleaved calls, each including the peer's fit. Relative error against the exact density "
        f"(the dense pass) at {body.sum()} of every 64th grid point where it exceeds 1e-3 of its peak. "
        f"2 shared cores (load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        "| job | localkit binned | peer | peer time | localkit / peer | localkit error | peer error |",
        "|---|---|---|---|---|---|---|",
        f"| 1-D Gaussian KDE, {n:,} samples, {m:,} points | {t_ours * 1e3:.1f} ms | {name} | {t_peer * 1e3:.1f} ms "
        f"| {t_ours / t_peer:.2f} | {err_ours:.1e} | {err_peer:.1e} |",
        f"| the same, `algorithm` at its default (\"auto\") | {t_auto * 1e3:.1f} ms | {name} | {t_peer * 1e3:.1f} ms "
        f"| {t_auto / t_peer:.2f} | {err_auto:.1e} | {err_peer:.1e} |",
        *_two_d(quick),
        *_profiles(),
        *_local_linear(quick),
    ])
