"""Bandwidth rules: fixed, per-feature, Scott, Silverman, and the plug-in rules ISJ and SJ.

The normal-reference rules give a per-feature bandwidth ``h_k = factor * sigma_k`` from the sample
standard deviations ``sigma_k`` (ddof=1), with the factors of ``scipy.stats.gaussian_kde``:

* Scott:      ``factor = n ** (-1 / (d + 4))``
* Silverman:  ``factor = (n * (d + 2) / 4) ** (-1 / (d + 4))``

(scikit-learn's ``KernelDensity(bandwidth="scott")`` uses the factor alone, without ``sigma``;
ours is the scale-aware rule of scipy and statsmodels.) With sample weights ``w`` both follow
``gaussian_kde(weights=w)``: ``n`` becomes the effective size ``(sum w)^2 / sum w^2`` and
``sigma_k^2 = sum_i w_i (x_ik - m_k)^2 / (sum w - sum w^2 / sum w)`` about the weighted mean
``m_k`` (numpy's ``cov(aweights=w)``; both reduce to the unweighted ones for equal weights).

The plug-in rules estimate the density's roughness ``||f''||^2`` on a grid of bins and are 1-D
selectors (:mod:`localkit.kernels.plugin`), applied to each feature on its own:

* ``"isj"``: the improved Sheather-Jones rule (Botev, Grotowski & Kroese, 2010), equal to KDEpy's
  ``bw="ISJ"``; weighted as KDEpy weighs it.
* ``"sj"``: the Sheather-Jones solve-the-equation rule, equal to R's ``bw.SJ`` (method "ste").
  R's has no weights: equal weights (zeros dropped) are accepted, unequal ones refused.

Every rule returns the standard deviation of a Gaussian kernel; with another profile it is
used as that profile's ``h`` unchanged, as scipy and scikit-learn use their rules.
"""
from __future__ import annotations

import numbers

import numpy as np

#: the normal-reference rules (from the spread) and the plug-in rules (1-D, per feature)
NORMAL_RULES = ("scott", "silverman")
PLUGIN_RULES = ("isj", "sj")
RULES = NORMAL_RULES + PLUGIN_RULES


def rule_factor(rule, n, d):
    if rule == "scott":
        return n ** (-1.0 / (d + 4))
    if rule == "silverman":
        return (n * (d + 2) / 4.0) ** (-1.0 / (d + 4))
    raise ValueError(f"bandwidth rule must be one of {NORMAL_RULES}, got {rule!r}")


def spread(samples, weight=None, xp=np):
    """Per-feature standard deviations (ddof=1; weighted as in the module docstring) of
    ``samples``, an array of the namespace ``xp`` (NumPy, an array-API library, dask.array).

    Computed scale-free: the mean on ``x / max |x|``, the deviations on ``(x - m) / max |x - m|``
    (recentred there, as ``std`` does), so that data near the float limits (1e155, 1e-162)
    neither overflow nor underflow in the squares; beyond the float range the result is inf.
    """
    w = None if weight is None else weight / xp.max(weight)
    total = samples.shape[0] if w is None else xp.sum(w)

    def mean(a):
        return (xp.sum(a, axis=0) if w is None else xp.sum(w[:, None] * a, axis=0)) / total

    def nonzero(a):
        return xp.where(a > 0, a, xp.ones_like(a))

    top = nonzero(xp.max(xp.abs(samples), axis=0))
    centred = samples - mean(samples / top) * top
    scale = xp.max(xp.abs(centred), axis=0)
    unit = centred / nonzero(scale)
    unit = unit - mean(unit)
    dof = total - 1 if w is None else total - xp.sum(w * w) / total
    return xp.sqrt(mean(unit * unit) * (total / dof)) * scale


def effective_size(n, weight=None, xp=np):
    """``n``, or with sample weights ``(sum w)^2 / sum w^2`` (Kish's effective sample size)."""
    if weight is None:
        return n
    w = weight / xp.max(weight)
    return float(xp.sum(w)) ** 2 / float(xp.sum(w * w))


#: rows per slice of :func:`safe_mean` on large C-ordered arrays
MEAN_SLICE = 65536
#: :func:`column_extremes` reads a C-ordered array with fewer columns than this as wider rows
NARROW = 16


def column_extremes(X):
    """``(X.min(axis=0), X.max(axis=0))``, exactly.

    NumPy reduces a C-ordered array of few columns over its rows one row at a time (2,000,000 x 3:
    ~200 ms for the max, measured); viewed as rows of ``m`` consecutive samples (``m d`` numbers
    wide, no copy) the reduction runs along the wide rows (~40 ms), and the ``m`` partial extremes
    of each column (and the rows left over) are reduced once more: the same numbers, as min and
    max do not depend on the order."""
    if not (isinstance(X, np.ndarray) and X.ndim == 2 and X.flags.c_contiguous and 0 < X.shape[1] < NARROW
            and len(X) > MEAN_SLICE):
        return X.min(axis=0), X.max(axis=0)
    n, d = X.shape
    m = 64 // d
    head = n - n % m
    wide = X[:head].reshape(-1, m * d)
    lo = np.vstack([wide.min(axis=0).reshape(m, d), X[head:]]).min(axis=0)
    hi = np.vstack([wide.max(axis=0).reshape(m, d), X[head:]]).max(axis=0)
    return lo, hi


def safe_mean(X, extremes=None):
    """The column means, computed on ``X / max |X|`` so that the sum cannot overflow.

    A large C-ordered NumPy array is read in slices of ``MEAN_SLICE`` rows, never copied whole
    (1,000,000 x 32 samples: 488 MiB of temporaries before): ``max |X|`` from the columns'
    extremes (``extremes``: ``(X.min(axis=0), X.max(axis=0))`` where the caller has them), each
    slice's column sums read along wide rows as :func:`column_extremes` reads them (2,000,000 x 3:
    274 ms a row at a time, measured) and added up in float64, slice by slice."""
    sliced = isinstance(X, np.ndarray) and X.ndim == 2 and X.flags.c_contiguous and len(X) > MEAN_SLICE
    if extremes is not None or sliced:
        lo, hi = column_extremes(X) if extremes is None else extremes
        scale = np.maximum(np.abs(hi), np.abs(lo))
    else:
        scale = np.max(np.abs(X), axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    if not sliced:
        return (X / scale).mean(axis=0) * scale
    d = X.shape[1]
    m = 64 // d if 0 < d < NARROW else 1
    total = np.zeros(d)  # float64 partial sums, float32 samples too
    buffer = np.empty((MEAN_SLICE, d), dtype=np.result_type(X.dtype, scale.dtype))  # one, for every slice
    for a in range(0, len(X), MEAN_SLICE):
        rows = X[a:a + MEAN_SLICE]
        part = np.divide(rows, scale, out=buffer[:len(rows)])
        head = len(part) - len(part) % m
        total += part[:head].reshape(-1, m * d).sum(axis=0, dtype=np.float64).reshape(m, d).sum(axis=0)
        total += part[head:].sum(axis=0, dtype=np.float64)
    return (total / len(X) * scale).astype(np.result_type(X.dtype, scale.dtype))


def resolve_bandwidth(bandwidth, samples, name="bandwidth", sample_weight=None, *, xp=np, host=np.asarray):
    """Return a positive float or a float array of shape ``(d,)``.

    ``bandwidth`` is a positive number, a per-feature array (a diagonal metric
    ``u^2 = sum_k (dx_k / h_k)^2``) or a rule name ("scott", "silverman", "isj", "sj"; weighted
    by ``sample_weight``, non-negative and not all zero, if given; see the module docstring).
    ``samples`` and ``sample_weight`` may be arrays of another namespace ``xp`` (an array-API
    library on its device, ``dask.array`` on a cluster): for "scott" and "silverman" the spread
    is computed there and ``host`` brings its ``d`` numbers back; "isj" and "sj" are binned
    selectors that run on a host (NumPy) copy of the samples, which ``host`` brings over
    (``n x d`` numbers: on dask, every chunk is computed and gathered). The rules, their checks
    and their messages are these, for all.

    "isj" and "sj" are 1-D selectors: with ``d > 1`` features each feature gets the bandwidth
    its own column selects (KDEpy's ISJ and R's ``bw.SJ`` take one variable; this is what one
    does with them per coordinate, e.g. ``MASS::kde2d(h = c(width.SJ(x), width.SJ(y)))``). They
    optimise each marginal density, not the ``d``-dimensional one, so they tend to undersmooth
    in ``d > 1`` (Scott's and Silverman's ``n^(-1/(d+4))`` account for ``d``).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit.kernels import resolve_bandwidth
    >>> X = np.random.default_rng(0).normal(size=(500, 2)) * [1.0, 10.0]
    >>> resolve_bandwidth("sj", X).round(4)  # R: c(bw.SJ(X[, 1]), bw.SJ(X[, 2]))
    array([0.296, 2.947])
    """
    n, d = samples.shape
    if isinstance(bandwidth, str):
        if bandwidth == "cv":
            raise ValueError(
                f"{name}='cv' is chosen by an estimator's fit (leave-one-out); "
                "a bare kernel needs a number, a per-feature array or one of "
                f"{RULES}"
            )
        if bandwidth in ("hpi", "hscv"):
            raise ValueError(
                f"{name}={bandwidth!r} selects a full bandwidth matrix H (R's ks::{'Hpi' if bandwidth == 'hpi' else 'Hscv'}), "
                "which the estimators take (KernelDensity, LocalMeanRegressor, LocalMeanClassifier, ConditionalDensity, "
                "KernelQuantileRegressor, ConditionalModeClassifier) by mapping the samples with H^-1/2; a Kernel's "
                "bandwidth is a number or a per-feature array (localkit.kernels.bandwidth_matrix.hpi(X) gives H)"
            )
        if bandwidth not in RULES:
            raise ValueError(
                f"{name} must be a positive number, a per-feature array or one of {RULES}, "
                f"got {bandwidth!r}"
            )
        if n < 2:
            raise ValueError(f"{name}={bandwidth!r} needs at least 2 samples, got n_samples={n}")
        weight = None if sample_weight is None else (
            np.asarray(sample_weight, dtype=np.float64) if xp is np else sample_weight)
        carrying = n if weight is None else int(host(xp.sum(weight > 0)))
        if carrying < 2:
            raise ValueError(f"{name}={bandwidth!r} needs at least 2 samples of positive weight, got {carrying}")
        if bandwidth in PLUGIN_RULES:
            return _plugin_bandwidth(bandwidth, samples, weight, name, xp, host)
        with np.errstate(over="ignore"):  # beyond the float range: inf, refused below
            sigma = np.asarray(host(spread(samples, weight, xp)), dtype=np.float64)
        if np.any(sigma <= 0):
            raise ValueError(
                f"{name}={bandwidth!r}: feature(s) {np.flatnonzero(sigma <= 0).tolist()} have zero "
                "spread, so the rule gives a zero bandwidth; give the bandwidth explicitly"
            )
        h = rule_factor(bandwidth, effective_size(n, weight, xp), d) * sigma
        if not np.all(np.isfinite(h) & (h > 0)):
            raise ValueError(f"{name}={bandwidth!r} gave a bandwidth of {h.tolist()} for these samples, beyond the "
                             "float range; give the bandwidth explicitly")
        return float(h[0]) if d == 1 else h
    if isinstance(bandwidth, bool):
        raise TypeError(f"{name} must be a number, an array or a rule name, got {bandwidth!r}")
    if isinstance(bandwidth, numbers.Real):
        if not np.isfinite(bandwidth) or bandwidth <= 0:
            raise ValueError(f"{name} must be finite and > 0, got {bandwidth!r}")
        return float(bandwidth)
    try:
        h = np.asarray(bandwidth, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be a positive number, a per-feature array or one of {RULES}, got {bandwidth!r}"
        ) from exc
    if h.ndim == 0:
        return resolve_bandwidth(float(h), samples, name)
    if h.shape != (d,):
        raise ValueError(f"{name} as an array must have shape (n_features,) = ({d},), got {h.shape} (a full "
                         "bandwidth matrix (n_features, n_features) is taken by the density and local mean estimators, "
                         "not by a Kernel)")
    if not np.all(np.isfinite(h)) or np.any(h <= 0):
        raise ValueError(f"{name} must be finite and > 0 in every feature, got {h.tolist()}")
    return h


def _plugin_bandwidth(rule, samples, weight, name, xp, host):
    """A plug-in rule ("isj", "sj") feature by feature, on a host copy of the samples."""
    from .plugin import improved_sheather_jones, sheather_jones

    X = np.asarray(samples if xp is np else host(samples), dtype=np.float64)
    w = None if weight is None else np.asarray(weight if xp is np else host(weight), dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name}={rule!r} needs finite samples; these contain NaN or inf")
    if w is not None and rule == "sj":
        X, w = X[w > 0], w[w > 0]
        if np.max(w) > np.min(w):
            raise ValueError(f"{name}='sj' is R's bw.SJ, which takes no sample weights: unequal sample_weight "
                             "cannot be honoured; use 'isj' (weighted as KDEpy's ISJ), 'scott' or 'silverman'")
        w = None  # equal weights: the unweighted rule on the samples that carry them
    flat = np.flatnonzero(np.min(X, axis=0) == np.max(X, axis=0))
    if flat.size:
        raise ValueError(f"{name}={rule!r}: feature(s) {flat.tolist()} have zero spread, so there is no bandwidth "
                         "to select; give the bandwidth explicitly")
    h = np.empty(X.shape[1])
    for k in range(X.shape[1]):
        try:
            h[k] = (improved_sheather_jones(X[:, k], w, name=name) if rule == "isj"
                    else sheather_jones(X[:, k], name=name))
        except ValueError as exc:
            if X.shape[1] == 1:
                raise
            raise ValueError(f"{exc} (feature {k})") from None
    return float(h[0]) if X.shape[1] == 1 else h
