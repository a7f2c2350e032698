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

A warning's message is the same each time its cause recurs, and is shown once per line of the
user's code (Python's ``"default"`` action), also across the folds of a cross-validation or a
search: the figures that differ from one occurrence to the next (how many queries, which rows,
the data's spread in this fold) are attributes of the warning instance, listed by each class::

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptyNeighbourhoodWarning)
        model.predict(X)
    [(w.message.n_empty, w.message.n_queries) for w in caught]

>>> import warnings
>>> from sklearn.exceptions import ConvergenceWarning
>>> from localkit.exceptions import LocalkitConvergenceWarning
>>> issubclass(LocalkitConvergenceWarning, ConvergenceWarning), issubclass(NearSingularDesignWarning, RuntimeWarning)
(True, True)
>>> w = EmptyNeighbourhoodWarning("some queries have an empty neighbourhood", n_empty=3, n_queries=40)
>>> str(w), w.n_empty, w.n_queries, w.rows
('some queries have an empty neighbourhood', 3, 40, None)
"""
from __future__ import annotations

import os
import sys
import warnings

__all__ = ["BandwidthWarning", "EmptyNeighbourhoodWarning", "FallbackWarning", "LocalkitConvergenceWarning",
           "LocalkitWarning", "NearSingularDesignWarning"]


class LocalkitWarning(UserWarning):
    """The base of every warning that localkit raises.

    Attributes
    ----------
    chunk : tuple of int or None
        For a warning raised while computing one chunk of a dask array, the rows of that chunk,
        ``(start, stop)``; None otherwise.
    """

    chunk = None


class BandwidthWarning(LocalkitWarning):
    """A bandwidth far wider than the data's spread: every sample weighs about the same, so the
    local model is close to the global one; or a ``"cv"`` bandwidth that stopped at the smallest
    of its search (the leave-one-out objective still improving as ``h -> 0``).

    Attributes
    ----------
    spread : float or None
        The data's spread: the root mean square distance of the samples to their mean (None for
        a ``"cv"`` search that stopped at its smallest bandwidth).
    """

    def __init__(self, message="", *, spread=None):
        super().__init__(message)
        self.spread = spread


class NearSingularDesignWarning(LocalkitWarning, RuntimeWarning):
    """A local model's weighted design is (near) singular at some queries (too few neighbours or
    collinear points): those queries fall back to a simpler local model.

    Attributes
    ----------
    n_singular, n_queries : int or None
        How many queries fell back, out of how many.
    """

    def __init__(self, message="", *, n_singular=None, n_queries=None):
        super().__init__(message)
        self.n_singular, self.n_queries = n_singular, n_queries


class EmptyNeighbourhoodWarning(LocalkitWarning, RuntimeWarning):
    """Some queries have no sample of weight inside the kernel's support (a compact kernel, a
    ``min_weight``, a graph that no label reaches): they get the documented fallback answer.

    Attributes
    ----------
    n_empty, n_queries : int or None
        How many queries (or training samples) are empty, out of how many.
    rows : ndarray of int or None
        Which, where the estimator says so (relaxation labeling): their row indices in the call's
        input (in a dask array, counted from its first row).
    """

    def __init__(self, message="", *, n_empty=None, n_queries=None, rows=None):
        super().__init__(message)
        self.n_empty, self.n_queries, self.rows = n_empty, n_queries, rows


class FallbackWarning(LocalkitWarning, RuntimeWarning):
    """A faster path could not be used (a fused GPU kernel failed to compile, an interpolated
    surface beyond its dimension limit): an exact, slower path computed the answer instead."""


def __getattr__(name):
    # LocalkitConvergenceWarning derives from scikit-learn's ConvergenceWarning, defined on first use
    # so that importing this module (localkit.nn does) does not import scikit-learn (~4 s cold)
    if name != "LocalkitConvergenceWarning":
        raise AttributeError(f"module 'localkit.exceptions' has no attribute {name!r}")
    from sklearn.exceptions import ConvergenceWarning

    class LocalkitConvergenceWarning(LocalkitWarning, ConvergenceWarning):
        """An iteration (fixed point, optimiser) stopped at ``max_iter`` before its stopping rule held.
        A :class:`sklearn.exceptions.ConvergenceWarning`, so scikit-learn's filters apply.

        Attributes
        ----------
        n_unconverged, n_rows : int or None
            For an iteration of many rows (mean shift's seeds, per-row fixed points), how many were
            still moving, out of how many; None for one iteration as a whole.
        """

        def __init__(self, message="", *, n_unconverged=None, n_rows=None):
            super().__init__(message)
            self.n_unconverged, self.n_rows = n_unconverged, n_rows

    LocalkitConvergenceWarning.__qualname__ = name  # as if defined at the top level (pickle, docs)
    globals()[name] = LocalkitConvergenceWarning
    return LocalkitConvergenceWarning


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


#: the warnings that :func:`warn` showed under the "default" and "module" actions: the filters in
#: force, the class, the message and the user's file and line (0 for "module")
_SHOWN = set()


def _matches(pattern, value):
    """A filter's message or module pattern against a warning's (``warnings.warn_explicit``'s rule)."""
    return pattern is None or (pattern == value if isinstance(pattern, str) else bool(pattern.match(value)))


def _action(category, text, module, lineno):
    """The action of Python's warning filters on this warning (the first filter that matches, else
    ``warnings.defaultaction``), and the filters."""
    filters = tuple(warnings._get_filters() if hasattr(warnings, "_get_filters") else warnings.filters)
    for action, message, cat, mod, line in filters:
        if _matches(message, text) and issubclass(category, cat) and _matches(mod, module) and line in (0, lineno):
            return action, filters
    return warnings.defaultaction, filters


def warn(warning):
    """Emit ``warning``, a warning instance (of a localkit class, or a scikit-learn class that
    localkit mirrors), at the user's line (:func:`user_stacklevel`): under Python's ``"default"``
    action once per line of the user's code (``"module"``: once per file), even where the
    filters are set anew in between.

    Python forgets which warnings it has shown whenever the filters change, and scikit-learn's
    cross-validation and searches set them anew for every fold (to carry the caller's filters
    into each task): a warning showed once per fold, five times in a 5-fold
    ``cross_val_score``. Here a warning already shown at that line under the same filters is not
    shown again. Every other action (``"always"``, ``"error"``, ``"ignore"``, ``"once"``, and so
    ``pytest.warns``) is Python's own.
    """
    level = user_stacklevel()
    frame = sys._getframe(level - 1)  # level 1 is this function's frame
    category, text = type(warning), str(warning)
    action, filters = _action(category, text, frame.f_globals.get("__name__", "<string>"), frame.f_lineno)
    if action in ("default", "module"):
        key = (filters, category, text, frame.f_code.co_filename, frame.f_lineno if action == "default" else 0)
        if key in _SHOWN:
            return
        _SHOWN.add(key)
    warnings.warn(warning, stacklevel=level)
