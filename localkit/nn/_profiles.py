"""The kernel profiles of :mod:`localkit.kernels.profiles` as torch functions of ``u^2``.

Same names, same formulas (``log k(u)`` from the squared scaled distance ``u2``), written so that
gradients stay finite: outside a compact support and at ``u = 0`` the non-smooth branches get
safe inputs (the "double where"), so ``-inf`` log-weights never send NaN back.
"""
from __future__ import annotations

import math

import torch

from ..kernels.profiles import PROFILES


def _safe_sqrt(u2):
    """``sqrt(u2)`` with a zero (not infinite) gradient at ``u2 = 0``."""
    positive = u2 > 0
    return torch.where(positive, torch.where(positive, u2, 1.0).sqrt(), 0.0)


def _inside(u2, log_k, closed=False):
    """``log_k(u2)`` on the support ``u < 1`` (``u <= 1`` if ``closed``), ``-inf`` outside."""
    inside = u2 <= 1.0 if closed else u2 < 1.0
    return torch.where(inside, log_k(torch.where(inside, u2, 0.0)), -math.inf)


def _poly(a, b):
    """``log (1 - u^a)^b``."""
    power = (lambda u2: u2) if a == 2 else (lambda u2: _safe_sqrt(u2) ** a)
    return lambda u2: _inside(u2, lambda t: b * torch.log1p(-power(t)))


LOG_PROFILES = {
    "gaussian": lambda u2: -0.5 * u2,
    "epanechnikov": _poly(2, 1),
    "tricube": _poly(3, 3),
    "biweight": _poly(2, 2),
    "triweight": _poly(2, 3),
    "triangular": _poly(1, 1),
    "uniform": lambda u2: _inside(u2, torch.zeros_like, closed=True),
    "cosine": lambda u2: _inside(u2, lambda t: torch.log(torch.cos(0.5 * math.pi * _safe_sqrt(t)))),
    "laplacian": lambda u2: -_safe_sqrt(u2),
    "cauchy": lambda u2: -torch.log1p(u2),
}

if set(LOG_PROFILES) != set(PROFILES):  # one source of truth for the names
    raise ImportError(f"localkit.nn profiles {sorted(LOG_PROFILES)} differ from {sorted(PROFILES)}")
