"""localkit's warning classes, and where its warnings point.

Every warning that localkit itself raises is a :class:`LocalkitWarning`, so that one filter
silences or escalates them all, and each kind has its own class, so that a filter can pick one::

    import warnings
    from localkit.exceptions import LocalkitWarning, NearSingularDesignWarning

    warnings.simplefilter("error", LocalkitWarning)            # every localkit warning is an error
    warnings.simplefilter("ignore", NearSingularDesignWarning)  # but this one is expected here

The classes also derive from the category the warning had before it had a class of its own
(``RuntimeWarning`` for numerical events, scikit-learn's
:class:`~sklearn.exceptions.ConvergenceWarning` for iteration limits), so that filters written
for those keep working.

A warning points at the user's line: the first frame of the call stack outside localkit and
scikit-learn (and joblib), not at the file inside localkit that noticed the problem
(:func:`user_stacklevel`).

>>> import warnings
>>> from sklearn.exceptions import ConvergenceWarning
>>> issubclass(LocalkitConvergenceWarning, ConvergenceWarning), issubclass(NearSingularDesignWarning, RuntimeWarning)
(True, True)
"""
from __future__ import annotations

import os
import sys

from sklearn.exceptions import ConvergenceWarning

__all__ = ["BandwidthWarning", "EmptyNeighbourhoodWarning", "FallbackWarning", "LocalkitConvergenceWarning",
           "LocalkitWarning", "NearSingularDesignWarning"]


class LocalkitWarning(UserWarning):
    """The base of every warning that localkit raises."""


class BandwidthWarning(LocalkitWarning):
    """A bandwidth far wider than the data's spread: every sample weighs about the same, so the
    local model is close to the global one; or a ``"cv"`` bandwidth that stopped at the smallest
    of its search (the leave-one-out objective still improving as ``h -> 0``)."""


class NearSingularDesignWarning(LocalkitWarning, RuntimeWarning):
    """A local model's weighted design is (near) singular at some queries (too few neighbours or
    collinear points): those queries fall back to a simpler local model."""


class EmptyNeighbourhoodWarning(LocalkitWarning, RuntimeWarning):
    """Some queries have no sample of weight inside the kernel's support (a compact kernel, a
    ``min_weight``, a graph that no label reaches): they get the documented fallback answer."""


class LocalkitConvergenceWarning(LocalkitWarning, ConvergenceWarning):
    """An iteration (fixed point, optimiser) stopped at ``max_iter`` before its stopping rule held.
    A :class:`sklearn.exceptions.ConvergenceWarning`, so scikit-learn's filters apply."""


class FallbackWarning(LocalkitWarning, RuntimeWarning):
    """A faster path could not be used (a fused GPU kernel failed to compile, an interpolated
    surface beyond its dimension limit): an exact, slower path computed the answer instead."""


def _package_dir(name):
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) + os.sep if path else None


_LOCALKIT = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: packages whose frames are passed over on the way to the user's line: the estimator's own code,
#: and scikit-learn's and joblib's wrappers around it (``fit`` decorators, ``fit_transform``,
#: ``GridSearchCV``, ``cross_val_score``), so that a warning inside a search points at the search
_WRAPPERS = ("sklearn", "joblib")


def user_stacklevel():
    """The ``stacklevel`` for :func:`warnings.warn`, called in the function that warns, that makes
    the warning point at the user's line: the first caller outside localkit, scikit-learn and
    joblib (then the first outside localkit; then the function itself).

    A fixed ``stacklevel`` counts frames, which differ by entry point (``fit`` or
    ``fit_transform``, scikit-learn's ``fit`` decorator, a dask chunk), and landed in
    ``sklearn/base.py`` or in localkit's own files.
    """
    internal = [_LOCALKIT] + [d for d in map(_package_dir, _WRAPPERS) if d]
    frame, level = sys._getframe(1), 1
    first_outside_localkit = None
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_LOCALKIT):
            if first_outside_localkit is None:
                first_outside_localkit = level
            if not any(filename.startswith(d) for d in internal):
                return level
        frame, level = frame.f_back, level + 1
    return first_outside_localkit or 1
