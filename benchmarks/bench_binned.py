"""The binned pass (``algorithm="binned"``: linear binning, FFT convolution, multilinear
interpolation) on the issue's 1-D bar: a Gaussian density of 1,000,000 samples on 8,192 grid
points, against KDEpy's ``FFTKDE`` where it is installed, else statsmodels'
``KDEUnivariate(fft=True)``, each on its own grid; the error of each against the exact density
(the dense pass) at every 64th grid point where the density exceeds 1e-3 of its peak."""

import os

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
    ])
