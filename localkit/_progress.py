"""One progress facility for every iterative estimator, and the one ``max_iter`` warning.

A tqdm bar on stderr, governed by the estimator's ``verbose``:

* ``True`` (or an integer >= 1): always shown, and left on screen when the run ends;
* ``False`` / ``0``: never shown;
* ``None`` (automatic): shown only when stderr is a terminal and the run lasts longer than
  :data:`AUTO_DELAY` seconds, then cleared: long fits are not silent at a console, while logs,
  pipes and test runs stay clean.

Reaching ``max_iter`` before the stopping rule holds emits scikit-learn's
:class:`~sklearn.exceptions.ConvergenceWarning` (:func:`warn_max_iter`), so that
``warnings.simplefilter("error", ConvergenceWarning)`` and scikit-learn's own tooling treat our
estimators as theirs.
"""
from __future__ import annotations

import numbers
import sys

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from tqdm import tqdm

from .exceptions import LocalkitConvergenceWarning, warn

__all__ = ["AUTO_DELAY", "ConvergenceWarning", "check_verbose", "optimizer_progress", "progress",
           "warn_max_iter", "warn_optimizer"]

#: Seconds an automatic bar waits before it appears (short runs never show one).
AUTO_DELAY = 2.0


def check_verbose(verbose, name="verbose"):
    """``None``, a bool or an integer >= 0; anything else raises a ``ValueError`` naming ``name``."""
    if verbose is None or isinstance(verbose, (bool, np.bool_)):
        return verbose
    if isinstance(verbose, numbers.Integral) and verbose >= 0:
        return verbose
    raise ValueError(f"{name} must be None (automatic: on a terminal, after {AUTO_DELAY:g} s), True, False "
                     f"or an integer >= 0, got {verbose!r}")


def progress(total, desc, verbose=None, *, unit="it", name="verbose"):
    """A tqdm bar of ``total`` steps named ``desc``, shown as ``verbose`` says (see the module).

    Use it as a context manager and call ``bar.update()`` once per step; ``bar.set_postfix``
    shows the current change or loss.
    """
    check_verbose(verbose, name)
    auto = verbose is None
    if not verbose and not (auto and _on_terminal()):  # never shown: no bar to build (~10 us a call)
        return _HIDDEN
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                disable=False,
                delay=AUTO_DELAY if auto else 0.0, leave=not auto)


def _on_terminal():
    """Whether stderr is a terminal (where tqdm shows an automatic bar)."""
    isatty = getattr(sys.stderr, "isatty", None)
    return isatty is not None and isatty()


class _HiddenBar:
    """A bar that is never shown: the part of tqdm's interface the library calls, doing nothing."""

    disable = True
    n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _nothing(self, *args, **kwargs):
        pass

    update = set_postfix = set_postfix_str = clear = refresh = close = _nothing


_HIDDEN = _HiddenBar()


def optimizer_progress(desc, max_iter, verbose=None):
    """A bar and a ``scipy.optimize.minimize`` callback that advances it and shows the loss."""
    bar = progress(max_iter, desc, verbose)

    def callback(intermediate_result):  # scipy passes the OptimizeResult by this parameter name
        bar.update()
        bar.set_postfix(loss=f"{float(intermediate_result.fun):.4g}", refresh=False)

    return bar, callback


def warn_max_iter(name, max_iter, n_unconverged=None, n_rows=None, what="rows", tol=True):
    """``ConvergenceWarning``: ``name`` stopped at ``max_iter`` before its stopping rule held (with
    ``n_unconverged`` of its ``n_rows`` rows, or ``what``, still moving); ``tol``: the estimator
    has a ``tol`` to suggest."""
    still = "" if n_unconverged is None else f" (some {what} still moving: the warning's n_unconverged of n_rows)"
    warn(LocalkitConvergenceWarning(f"{name} did not converge within max_iter={max_iter} iterations{still}; "
                                    f"increase max_iter{' or tol' if tol else ''}", n_unconverged=n_unconverged,
                                    n_rows=n_rows))


def warn_optimizer(result, name, max_iter, tol=False):
    """Warn when a ``scipy.optimize`` result stopped on its iteration limit (L-BFGS-B's status 1)."""
    if not result.success and result.nit >= max_iter:
        warn_max_iter(name, max_iter, tol=tol)
