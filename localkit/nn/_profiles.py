"""The kernel profiles of :mod:`localkit.kernels.profiles` as torch functions of ``u^2``.

Not a second copy: each is the profile's one statement re-bound to ``torch``
(:meth:`~localkit.kernels.profiles.Profile.log_k_for`), whose non-smooth branches already take
safe inputs (the "double where"), so ``-inf`` log-weights never send NaN back through autograd.
"""
from __future__ import annotations

import torch

from ..kernels.profiles import PROFILES

LOG_PROFILES = {name: profile.log_k_for(torch) for name, profile in PROFILES.items()}


def log_profile(kernel):
    """``log k`` on tensors of a resolved kernel: a profile's name, or a user profile
    (:class:`~localkit.kernels.profiles.UserProfile`, its callable handed ``torch``)."""
    return LOG_PROFILES[kernel] if isinstance(kernel, str) else kernel.log_k_for(torch)
