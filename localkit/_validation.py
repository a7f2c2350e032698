"""Input checks shared by every public entry point.

Each check raises a ``ValueError`` (or ``TypeError``) that names the parameter and says what is
allowed, so that bad input never turns into a silently wrong answer.
"""
from __future__ import annotations

import argparse
import numbers

import numpy as np

FLOAT_DTYPES = (np.float64, np.float32)


def check_array(x, name, *, ndim=(1, 2), dtype=None, allow_empty=False, finite=True):
    """Return ``x`` as a float array (float32 kept, anything else float64), checked.

    ``ndim`` lists the accepted numbers of dimensions. ``dtype`` forces a float type.
    """
    if x is None:
        raise ValueError(f"{name} must be an array, got None")
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must be real, got a complex array")
    if dtype is None:
        dtype = arr.dtype if arr.dtype in FLOAT_DTYPES else np.float64
    arr = np.asarray(arr, dtype=dtype)
    if arr.ndim not in ndim:
        allowed = " or ".join(f"{d}-D" for d in ndim)
        raise ValueError(f"{name} must be {allowed}, got an array of shape {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); at least one value is needed")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity; all values must be finite")
    return arr


def check_points(x, name, *, n_features=None, dtype=None):
    """A 2-D ``(n, d)`` float array of points; 1-D input is read as ``n`` points in 1-D."""
    arr = check_array(x, name, ndim=(1, 2), dtype=dtype)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has no features (shape {arr.shape})")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(
            f"{name} has {arr.shape[1]} features, but {n_features} were expected"
        )
    return arr


def check_positive(value, name, *, allow_zero=False, integer=False):
    """A finite positive number (or integer)."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


def option_number(kind=float, allow_zero=False):
    """An argparse ``type`` for the command line: a finite number of ``kind`` (``float`` or ``int``)
    that is > 0, or >= 0 with ``allow_zero`` (:func:`check_positive`). Anything else is argparse's
    usage error naming the option as typed, ``argument --lr: must be a number > 0 (and finite),
    got 'nan'`` (exit status 2), before any work starts."""
    what = "an integer" if kind is int else "a number"

    def parse(text):
        try:
            return check_positive(kind(text), "value", allow_zero=allow_zero, integer=kind is int)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {what} {'>= 0' if allow_zero else '> 0'} (and finite), "
                                             f"got {text!r}") from None

    parse.__name__ = f"{'non-negative' if allow_zero else 'positive'} {kind.__name__}"
    return parse


def check_n_neighbors(n_neighbors, n_samples, name="n_neighbors", kernel=None):
    """``None`` or an integer in ``[1, n_samples]``.

    With ``kernel`` (a profile name or alias, or a :class:`~localkit.Kernel`) the count is the
    span of a kNN kernel, ``h(x*)`` = the distance to the k-th neighbour: a profile that vanishes
    at ``u = 1`` (every compact one but the uniform: ``k(1) = 0``) then gives the k-th neighbour
    weight 0, so ``k = 1`` would leave every query without weight (and falling back to its empty
    policy) whatever the data. It needs ``n_neighbors >= 2``; the uniform profile keeps its k-th
    neighbour, and ``k = 1`` with it is 1-nearest-neighbour.
    """
    if n_neighbors is None:
        return None
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, numbers.Integral):
        raise TypeError(f"{name} must be an integer or None, got {n_neighbors!r}")
    if n_neighbors < 1 or n_neighbors > n_samples:
        raise ValueError(
            f"{name} must be between 1 and n_samples={n_samples}, got {n_neighbors}"
        )
    if n_neighbors == 1 and kernel is not None:
        profile = _profile_of(kernel)
        if profile is not None and profile(1.0) == 0.0:
            raise ValueError(
                f"{name}=1 with the {profile.name!r} kernel gives every query weight 0: the span is the "
                f"distance to the nearest sample and k(1) = 0 for that profile, so the only neighbour "
                f"drops out. Use {name} >= 2 with a profile that vanishes at u = 1, or kernel='uniform' "
                "for 1-nearest-neighbour"
            )
    return int(n_neighbors)


def _profile_of(kernel):
    """The profile of a kernel name, alias or :class:`~localkit.Kernel` (None for softmax or a name
    that is not a profile: those are refused, by name, where the kernel is built)."""
    from .kernels.profiles import get_profile  # the kernels import this module

    if isinstance(kernel, str):
        try:
            return get_profile(kernel)
        except ValueError:
            return None
    return getattr(kernel, "profile", None)


def check_choice(value, name, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, got {value!r}")
    return value


def check_regression_target(y, dtype, name="y"):
    """Regression targets as finite ``dtype`` floats.

    scikit-learn's ``y_numeric`` converts object arrays but lets string arrays through; here
    strings are refused by name (they are class labels, not targets), and so are targets that
    overflow ``dtype`` (e.g. 1e300 in float32), which would otherwise surface as NaN deep inside.
    """
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numbers (regression targets), got dtype {y.dtype}; "
                         "class labels need a classifier")
    with np.errstate(over="ignore"):
        y = y.astype(dtype, copy=False)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinity, or values too large for {np.dtype(dtype).name}; "
                         "all targets must be finite")
    return y
