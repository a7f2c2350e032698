"""Kernel profiles ``k(u)`` of a scaled distance ``u = d(x*, x) / h``, in log-space.

Every profile is stored as ``log k`` so that the engine can stream weights with an online
log-sum-exp. Compact profiles vanish outside ``u <= 1`` (``log k = -inf``); the uniform profile
includes its boundary (``u <= 1``), so that a kNN bandwidth keeps the k-th neighbour.

=============  ===========================  =========
name           k(u)                          support
=============  ===========================  =========
gaussian       exp(-u^2 / 2)                 all u
epanechnikov   1 - u^2                       u <= 1
tricube        (1 - u^3)^3                   u <= 1
biweight       (1 - u^2)^2                   u <= 1
triweight      (1 - u^2)^3                   u <= 1
triangular     1 - u                         u <= 1
uniform        1                             u <= 1
cosine         cos(pi u / 2)                 u <= 1
laplacian      exp(-u)                       all u
cauchy         1 / (1 + u^2)                 all u
=============  ===========================  =========

The ``softmax`` kernel ``exp(<x*, x> / h)`` is not a profile of a distance; it is handled by
:class:`localkit.Kernel` directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import integrate, special


def _log_poly(a, b):
    """log of ``(1 - u^a)^b`` on ``u <= 1``, from ``u2 = u^2``."""

    def log_k(u2):
        with np.errstate(divide="ignore", invalid="ignore"):
            ua = u2 if a == 2 else np.sqrt(u2) ** a
            inside = u2 <= 1.0
            return np.where(inside, b * np.log1p(-np.minimum(ua, 1.0)), -np.inf)

    return log_k


def _log_uniform(u2):
    return np.where(u2 <= 1.0, 0.0, -np.inf)


def _log_gaussian(u2):
    return -0.5 * u2


def _log_cosine(u2):
    with np.errstate(divide="ignore"):
        u = np.sqrt(np.minimum(u2, 1.0))
        return np.where(u2 <= 1.0, np.log(np.cos(0.5 * np.pi * u)), -np.inf)


def _log_laplacian(u2):
    return -np.sqrt(u2)


def _log_cauchy(u2):
    return -np.log1p(u2)


@dataclass(frozen=True)
class Profile:
    """A radial profile: ``log_k(u2)`` takes the squared scaled distance ``u^2``."""

    name: str
    log_k: Callable[[np.ndarray], np.ndarray]
    compact: bool
    radial_moment: Callable[[int], float]  # int_0^inf k(r) r^(d-1) dr, inf if divergent
    # True for profiles with a kink at u = 0 (linear in u there): the matrix-product form of
    # |q - x|^2 carries an absolute error ~1e-16 |x|^2 whose square root (~1e-8) they would show
    exact_distance: bool = False
    # ``(a, b)`` for the profiles of the form ``(1 - u^a)^b`` (uniform: b = 0), so that compiled
    # kernels evaluate them from this one statement of the formula
    poly: tuple | None = None

    def log_normalizer(self, d):
        """``log c_d`` with ``c_d = int_{R^d} k(|u|) du``, the density normaliser in d dims."""
        moment = self.radial_moment(d)
        if not np.isfinite(moment):
            raise ValueError(
                f"the {self.name!r} profile is not integrable in {d} dimensions, so it has "
                "no normalised density there; choose another kernel"
            )
        log_sphere = np.log(2.0) + 0.5 * d * np.log(np.pi) - special.gammaln(0.5 * d)
        return float(log_sphere + np.log(moment))

    def __reduce__(self):  # pickle by name: the functions are module-level registry entries
        return get_profile, (self.name,)

    def __call__(self, u):
        """``k(u)`` for plotting and checks."""
        u = np.asarray(u, dtype=float)
        return np.exp(self.log_k(u * u))


def _poly_moment(a, b):
    # int_0^1 (1 - r^a)^b r^(d-1) dr = B(d/a, b+1) / a
    return lambda d: float(special.beta(d / a, b + 1) / a)


def _poly_profile(name, a, b, **kwargs):
    log_k = _log_uniform if b == 0 else _log_poly(a, b)
    return Profile(name, log_k, True, _poly_moment(a, b), poly=(a, b), **kwargs)


def _cosine_moment(d):
    return integrate.quad(lambda r: np.cos(0.5 * np.pi * r) * r ** (d - 1), 0.0, 1.0)[0]


def _cauchy_moment(d):
    return 0.5 * np.pi if d == 1 else np.inf


PROFILES = {
    p.name: p
    for p in [
        Profile("gaussian", _log_gaussian, False, lambda d: 2 ** (0.5 * d - 1) * special.gamma(0.5 * d)),
        _poly_profile("epanechnikov", 2, 1),
        _poly_profile("tricube", 3, 3),
        _poly_profile("biweight", 2, 2),
        _poly_profile("triweight", 2, 3),
        _poly_profile("triangular", 1, 1, exact_distance=True),
        _poly_profile("uniform", 2, 0),
        Profile("cosine", _log_cosine, True, _cosine_moment),
        Profile("laplacian", _log_laplacian, False, lambda d: special.gamma(d), exact_distance=True),
        Profile("cauchy", _log_cauchy, False, _cauchy_moment),
    ]
}

#: Aliases accepted for scikit-learn's kernel names.
ALIASES = {"tophat": "uniform", "flat": "uniform", "exponential": "laplacian", "linear": "triangular",
           "quartic": "biweight", "rbf": "gaussian"}

KERNEL_NAMES = tuple(PROFILES) + ("softmax",)


def get_profile(name):
    """The :class:`Profile` called ``name`` (aliases such as ``"tophat"`` accepted)."""
    if not isinstance(name, str):
        raise TypeError(f"kernel must be a string naming a profile, got {name!r}")
    key = ALIASES.get(name, name)
    if key not in PROFILES:
        raise ValueError(
            f"kernel must be one of {sorted(KERNEL_NAMES)} (or an alias {sorted(ALIASES)}), got {name!r}"
        )
    return PROFILES[key]
