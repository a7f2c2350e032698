"""Localization kernels: profiles, bandwidth rules, and the :class:`Kernel` that turns blocks of
queries and samples into log-weights. Pure numpy."""
from .bandwidth import RULES, resolve_bandwidth
from .kernel import METRICS, Kernel
from .profiles import KERNEL_NAMES, PROFILES, get_profile

__all__ = ["Kernel", "KERNEL_NAMES", "PROFILES", "METRICS", "RULES", "get_profile", "resolve_bandwidth"]
