"""The binned pass (``algorithm="binned"``: linear binning, FFT convolution, multilinear
interpolation) on the issue's 1-D bars:

* a Gaussian density of 1,000,000 samples on 8,192 grid points, against KDEpy's ``FFTKDE`` where
  it is installed, else statsmodels' ``KDEUnivariate(fft=True)``, each on its own grid; the error
  of each against the exact density (the dense pass) at every 64th grid point where the density
  exceeds 1e-3 of its peak;
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

TITLE = "Binned pass: 1-D Gaussian KDE at FFT speed against KDEpy / statsmodels"


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
        return ["Local linear against KernSmooth: not run (needs Rscript with KernSmooth: "
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

    (t_ours, t_peer), (f_ours, peer_out) = interleaved([ours, peer_fit], repeat, warmup=True)
    f_peer = grid_of(peer_out)[1]
    rows = np.arange(0, m, 64)
    exact = kernel_density(grid[rows, None], x[:, None], bandwidth=h, algorithm="dense")
    body = exact > 1e-3 * exact.max()
    err_ours = np.max(np.abs(f_ours[rows][body] / exact[body] - 1))
    err_peer = np.max(np.abs(f_peer[rows][body] / exact[body] - 1))
    return "\n".join([
        f"n = {n:,} samples (a two-Gaussian mixture), Gaussian kernel, h = {h:.4g} (Silverman), {m:,} grid "
        f"points (the peer's own grid; localkit evaluates at its points, default grid_size 2^16); medians of "
        f"{repeat} interleaved calls, each including the peer's fit. Relative error against the exact density "
        f"(the dense pass) at {body.sum()} of every 64th grid point where it exceeds 1e-3 of its peak. "
        f"2 shared cores (load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        "| job | localkit binned | peer | peer time | localkit / peer | localkit error | peer error |",
        "|---|---|---|---|---|---|---|",
        f"| 1-D Gaussian KDE, {n:,} samples, {m:,} points | {t_ours * 1e3:.1f} ms | {name} | {t_peer * 1e3:.1f} ms "
        f"| {t_ours / t_peer:.2f} | {err_ours:.1e} | {err_peer:.1e} |",
        *_local_linear(quick),
    ])
