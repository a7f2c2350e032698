"""A 1-D density's distribution function, quantiles and entropy (issue 41's bars):

* ``KernelDensity.cdf`` at 512 points and ``icdf`` at 5 probabilities on 1,000,000 samples (a
  two-component Gaussian mixture, Scott's rule), fitted once, against KDEpy's ``FFTKDE`` grid
  (2^14 points, the same bandwidth) integrated by SciPy's ``cumulative_trapezoid`` and
  interpolated (``np.interp``): the time of each (fit included on both sides: the first call
  builds localkit's grid) and the largest difference from the exact sums (``exact=True``) at 32 of
  the points;
* ``KernelDensity.entropy`` at n = 100,000 against statsmodels' ``KDEUnivariate.entropy``.

Medians of interleaved repeats in one process.
"""
import os

import numpy as np

from localkit._timing import interleaved

TITLE = "1-D density: cdf, quantiles and entropy on the binned grid against KDEpy + SciPy and statsmodels"


def _mixture(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(size=n // 2), rng.normal(3.0, 0.5, size=n - n // 2)]


def run(quick=False):
    from KDEpy import FFTKDE
    from scipy import integrate

    from localkit import KernelDensity

    n = 200_000 if quick else 1_000_000
    repeat = 3 if quick else 7
    x = _mixture(n)
    t = np.linspace(-4.0, 5.0, 512)
    q = np.array([0.01, 0.25, 0.5, 0.75, 0.99])
    h = float(KernelDensity(bandwidth="scott").fit(x[:, None]).bandwidth_)

    def ours():
        kde = KernelDensity(bandwidth=h).fit(x[:, None])
        return kde.cdf(t), kde.icdf(q), kde

    def peer():
        grid, density = FFTKDE(bw=h).fit(x).evaluate(2**14)
        F = integrate.cumulative_trapezoid(density, grid, initial=0.0)
        return np.interp(t, grid, F), np.interp(q, F, grid)

    (t_ours, t_peer), (mine, theirs) = interleaved([ours, peer], repeat, warmup=True)
    kde = mine[2]
    rows = slice(None, None, 16)
    exact = kde.cdf(t[rows], exact=True)
    err_ours, err_peer = np.abs(mine[0][rows] - exact).max(), np.abs(theirs[0][rows] - exact).max()
    q_ours = np.abs(kde.cdf(mine[1], exact=True) - q).max()
    q_peer = np.abs(kde.cdf(theirs[1], exact=True) - q).max()

    import statsmodels.api as sm

    m = 20_000 if quick else 100_000
    small = x[:: n // m]
    fitted = KernelDensity(bandwidth="scott").fit(small[:, None])

    def sm_entropy():
        ref = sm.nonparametric.KDEUnivariate(small)
        ref.fit(bw=float(fitted.bandwidth_))
        return ref.entropy

    def our_entropy():
        return KernelDensity(bandwidth=float(fitted.bandwidth_)).fit(small[:, None]).entropy()

    (e_ours, e_sm), (h_ours, h_sm) = interleaved([our_entropy, sm_entropy], 3, warmup=True)
    load = os.getloadavg()[0]
    lines = [
        f"n = {n:,} samples (cdf, quantiles), {len(small):,} (entropy); Gaussian kernel, h = {h:.4g}; medians of "
        f"{repeat} interleaved runs (entropy: 3), fit included; load average {load:.1f} at the end.",
        "",
        "| task | localkit | peer | localkit time / peer time | localkit's error | peer's error |",
        "|---|---|---|---|---|---|",
        f"| cdf at 512 points + 5 quantiles | {t_ours * 1e3:.1f} ms | KDEpy FFTKDE + SciPy {t_peer * 1e3:.1f} ms | "
        f"{t_ours / t_peer:.2f}x | cdf {err_ours:.1e}, quantiles {q_ours:.1e} | cdf {err_peer:.1e}, quantiles "
        f"{q_peer:.1e} |",
        f"| entropy | {e_ours * 1e3:.1f} ms | statsmodels KDEUnivariate {e_sm * 1e3:.1f} ms | {e_ours / e_sm:.2f}x | "
        f"{h_ours:.6f} | {h_sm:.6f} |",
        "",
        "Errors: the largest difference from the exact sums (`exact=True`) at every 16th of the 512 points, and "
        "of the exact F at the quantiles from their probabilities; the entropies themselves for the last row "
        "(statsmodels' is `quad` of `f log(f + 1e-12)` on its FFT grid).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
