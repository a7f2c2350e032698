"""The fixed-point driver: feed a step its own output until the change falls below a tolerance.

Feeding a local mean its own output gives mean shift (the points), relaxation labeling (label
distributions), Hopfield retrieval (stored patterns) and iterated denoising. They share this loop:

    x_{t+1} = step(x_t)        until  change(x_{t+1}, x_t) < tol  or  t = max_iter

Two modes:

* **global** (``per_row=False``): the whole state moves, one ``change`` for all of it (relaxation
  labeling stops on the sum of absolute changes of every label distribution).
* **per row** (``per_row=True``): each row (a mean-shift seed, a Hopfield probe) stops on its own
  change; the rows that converged are frozen and the step is called only on the rows still moving,
  all at once (one engine pass per iteration, never one per row).

The driver counts ``n_iter`` (updates performed; per row, the largest count), warns with
scikit-learn's :class:`~sklearn.exceptions.ConvergenceWarning` when ``max_iter`` stops it early,
keeps an optional ``history`` of states for plots, and shows a progress bar (:mod:`localkit._progress`).
BLAS is held to one thread once for the whole loop (:func:`~localkit.engine.blocks.one_blas_thread`), not
once per step.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._progress import ConvergenceWarning, check_verbose, progress as progress_bar, warn_max_iter
from .blocks import one_blas_thread

__all__ = ["ConvergenceWarning", "FixedPoint", "iterate", "max_abs_change", "row_max_abs_change",
           "row_norm_change", "sum_abs_change"]


def max_abs_change(new, old):
    """``max |new - old|`` over the whole state."""
    return float(np.max(np.abs(new - old))) if new.size else 0.0


def sum_abs_change(new, old):
    """``sum |new - old|`` over the whole state (scikit-learn's label propagation rule)."""
    return float(np.abs(new - old).sum())


def row_norm_change(new, old):
    """Euclidean length of each row's move (scikit-learn's mean-shift rule)."""
    return np.linalg.norm((new - old).reshape(len(new), -1), axis=1)


def row_max_abs_change(new, old):
    """``max |new - old|`` of each row."""
    return np.abs(new - old).reshape(len(new), -1).max(axis=1, initial=0.0)


@dataclass
class FixedPoint:
    """What :func:`iterate` returns.

    state : the last state.
    n_iter : updates performed (per row: the most any row took).
    converged : bool, or a bool array per row with ``per_row=True``.
    row_iter : updates per row (``per_row=True``), else None.
    history : list of states ``[x_0, x_1, ...]`` with ``history=True``, else None.
    """

    state: np.ndarray
    n_iter: int
    converged: bool | np.ndarray
    row_iter: np.ndarray | None = None
    history: list | None = None


def _check_params(tol, max_iter, progress):
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not math.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    check_verbose(progress, "progress")


def iterate(step: Callable, state, *, tol, max_iter, change: Callable | None = None, per_row=False,
            inclusive=False, history=False, progress=None, warn=True, name="fixed-point iteration"):
    """Iterate ``state <- step(state)`` to a fixed point.

    Parameters
    ----------
    step : callable
        ``step(state) -> new_state`` (global mode) or ``step(rows_state, rows) -> new_rows_state``
        (per-row mode: ``rows`` are the indices of the rows still moving, ``rows_state`` their
        current values). One call should be one engine pass over all of them.
    state : array
        The start ``x_0`` (copied, never modified).
    tol : float >= 0
        Stop when the change is below ``tol`` (``<= tol`` with ``inclusive=True``).
    max_iter : int >= 1
        At most this many updates; reaching it without convergence warns.
    change : callable, optional
        ``change(new, old)``: a float (global) or one float per row (per row). Defaults to
        :func:`max_abs_change` and :func:`row_max_abs_change`.
    per_row : bool, default=False
        Rows converge and freeze independently.
    history : bool, default=False
        Keep a copy of every state, ``x_0`` first.
    progress : None, bool or int >= 0, default=None
        A progress bar on stderr (:func:`localkit._progress.progress`): True shows it, False
        never, None on a terminal for runs longer than 2 s. Estimators pass their ``verbose``.
    warn : bool, default=True
        Emit a ``ConvergenceWarning`` when ``max_iter`` is reached first.
    name : str
        Used in the progress line and the warning.

    Returns
    -------
    FixedPoint

    Examples
    --------
    >>> import numpy as np
    >>> from localkit.engine.iteration import iterate
    >>> out = iterate(lambda x: 0.5 * (x + 2 / x), np.array([1.0]), tol=1e-12, max_iter=50)
    >>> round(float(out.state[0]), 12), out.converged
    (1.414213562373, True)
    """
    _check_params(tol, max_iter, progress)
    x = np.array(state, copy=True)
    below = np.less_equal if inclusive else np.less
    trail = [x.copy()] if history else None
    with one_blas_thread(), progress_bar(max_iter, name, progress, name="progress") as bar:
        if per_row:
            out = _iterate_rows(step, x, tol, max_iter, change or row_max_abs_change, below, trail, bar)
        else:
            out = _iterate_global(step, x, tol, max_iter, change or max_abs_change, below, trail, bar)
    if warn and not np.all(out.converged):
        if per_row:
            warn_max_iter(name, max_iter, int(np.sum(~out.converged)), len(x))
        else:
            warn_max_iter(name, max_iter)
    return out


def _iterate_global(step, x, tol, max_iter, change, below, trail, bar):
    converged = False
    n_iter = 0
    while n_iter < max_iter and not converged:
        new = step(x)
        n_iter += 1
        delta = change(new, x)
        converged = bool(below(delta, tol))
        x = new
        if trail is not None:
            trail.append(np.array(x, copy=True))
        bar.update()
        if not bar.disable:
            bar.set_postfix(change=f"{delta:.3g}", refresh=False)
    return FixedPoint(x, n_iter, converged, None, trail)


def _iterate_rows(step, x, tol, max_iter, change, below, trail, bar):
    # the bookkeeping of the rows that stop runs only on the steps where some do (a small fixed
    # point's step is ~20 us: six fancy-indexing operations a step were a third of it)
    n = len(x)
    moving = np.arange(n)
    row_iter = np.zeros(n, dtype=np.intp)
    done = np.zeros(n, dtype=bool)
    n_iter = 0
    while n_iter < max_iter and len(moving):
        everyone = len(moving) == n
        old = x if everyone else x[moving]
        new = step(old, moving)
        n_iter += 1
        delta = np.asarray(change(new, old))
        stopped = below(delta, tol)
        if everyone:
            x[...] = new
        else:
            x[moving] = new
        if stopped.any():
            rows = moving[stopped]
            row_iter[rows] = n_iter
            done[rows] = True
            moving = moving[~stopped]
        if trail is not None:
            trail.append(x.copy())
        bar.update()
        if not bar.disable:  # (formatting it cost a small fixed point's step a tenth of its time)
            bar.set_postfix(change=f"{float(delta.max(initial=0.0)):.3g}", moving=len(moving), refresh=False)
    row_iter[moving] = n_iter
    return FixedPoint(x, n_iter, done, row_iter, trail)
