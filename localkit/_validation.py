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
    if type(x) is np.ndarray and x.dtype in FLOAT_DTYPES and (dtype is None or x.dtype == dtype):
        arr = x  # already a float array (a fitted estimator's checked queries): nothing to convert
    else:
        arr = as_numbers(x, name)
        if np.iscomplexobj(arr):
            raise ValueError(f"{name} must be real, got a complex array")
        if dtype is None:
            dtype = arr.dtype if arr.dtype in FLOAT_DTYPES else np.float64
        arr = np.asarray(arr, dtype=dtype)
    if arr.ndim not in ndim:
        raise ValueError(wrong_ndim(name, ndim, arr.shape))
    if not allow_empty and arr.size == 0:
        raise ValueError(empty_input(name, arr.shape))
    if finite and not all_finite(arr):
        raise ValueError(not_finite(name))
    return arr


def all_finite(arr):
    """Whether a float array holds no NaN or infinity: its sum is finite only then, or it
    overflowed (checked element by element then); one vectorised read, no boolean array (a
    million values: ~0.3 ms against ~1.5 ms)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.sum(arr))) or bool(np.all(np.isfinite(arr)))


# The messages of the array checks, worded once for NumPy arrays, arrays on a device
# (localkit.engine.checks.as_floats) and dask chunks (localkit.engine.backends.dask).
def wrong_ndim(name, ndim, shape):
    return f"{name} must be {' or '.join(f'{d}-D' for d in ndim)}, got an array of shape {tuple(shape)}"


def empty_input(name, shape):
    return f"{name} is empty (shape {tuple(shape)}); at least one value is needed"


def not_finite(name):
    return f"{name} contains NaN or infinity; all values must be finite"


def wrong_features(name, got, expected):
    return f"{name} has {got} features, but {expected} were expected"


def not_numbers(name, dtype):
    return f"{name} must hold numbers, got dtype {dtype}"


def as_numbers(x, name):
    """``x`` as a NumPy array of numbers (bool included), or an error that says what ``x`` is and
    what to pass instead.

    Converted: object arrays whose every element is a number, and pandas columns of a nullable
    dtype (``Int64``, ``Float64``, ``boolean``) without NA. Refused with advice: scipy sparse
    matrices (dense arrays only: ``x.toarray()``), pandas NA, objects that are not numbers.
    """
    if x is None:
        raise ValueError(f"{name} must be an array, got None")
    refuse_sparse(x, name)
    if _masked_dtypes(x):
        if np.asarray(x.isna()).any():
            raise ValueError(f"{name} contains pandas NA (a missing value in a nullable column); "
                             "missing values are not allowed: drop or impute them first")
        x = x.to_numpy(dtype=np.result_type(*(t.numpy_dtype for t in _masked_dtypes(x))))
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object:
        others = {type(v).__name__ if v is not None else "None" for v in arr.flat
                  if not isinstance(v, numbers.Real)}
        if others:
            raise ValueError(f"{name} must hold numbers, got an object array holding {', '.join(sorted(others))}; "
                             "pass an array of numbers (float64 or float32)")
        arr = arr.astype(np.float64)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(not_numbers(name, arr.dtype))
    return arr


def refuse_text_columns(x, name):
    """Raise where a column of ``x`` (a pandas DataFrame, or a 2-D object or string array) holds
    strings (a pandas ``Categorical`` or ``string`` column of them included), naming the
    columns and the fix: localkit computes with numbers, and a categorical factor
    (``aitchison_aitken``, ``wang_ryzin``) compares integer codes, which must be the same at fit and
    at predict. scikit-learn's own message ("could not convert string to float") names neither."""
    if hasattr(x, "columns") and hasattr(x, "dtypes"):  # only the columns of a dtype that is not numeric
        picked = [j for j, t in enumerate(x.dtypes) if getattr(t, "kind", "O") not in "biufc"]
        labels = [x.columns[j] for j in picked]
        columns = [np.asarray(x.iloc[:, j].astype(object)) for j in picked]
    else:
        arr = x if isinstance(x, np.ndarray) else None
        if arr is None or arr.ndim != 2 or arr.dtype.kind not in "OUS":
            return
        picked = labels = list(range(arr.shape[1]))
        columns = [arr[:, j] for j in range(arr.shape[1])]
    bad = []
    for j, label, col in zip(picked, labels, columns):
        if col.dtype.kind in "US" or (col.dtype == object and any(isinstance(v, (str, bytes)) for v in col)):
            levels = sorted({str(v) for v in col})
            bad.append((j, label, levels))
    if not bad:
        return
    where = "; ".join(f"column {j}" + (f" ({label!r})" if label != j else "") + " holds "
                      + ", ".join(repr(v) for v in levels[:3]) + (", ..." if len(levels) > 3 else "")
                      for j, label, levels in bad)
    raise ValueError(f"{name} must hold numbers: {where}. A categorical factor (Kernel('aitchison_aitken' or "
                     "'wang_ryzin', features=[...])) compares integer codes: encode such columns first, with the "
                     "same codes at fit and predict, e.g. sklearn.preprocessing.OrdinalEncoder, or "
                     "X[col] = pd.Categorical(X[col], categories=levels).codes")


def refuse_sparse(x, name):
    """The ``TypeError`` of entry points that take dense arrays only, for a scipy sparse ``x``."""
    import scipy.sparse  # here: localkit.nn validates without it (~0.8 s to import)

    if scipy.sparse.issparse(x):
        raise TypeError(f"{name} is a scipy sparse matrix ({type(x).__name__}); localkit takes dense arrays: "
                        f"pass {name}.toarray()")


def check_sparse_points(x, name, *, n_features=None, dtype=None):
    """A 2-D ``(n, d)`` CSR matrix of points, its stored values finite floats (float32 kept,
    anything else float64, or ``dtype``), not empty: the samples and queries of the neighbour
    path on sparse input (:mod:`localkit.engine.passes.neighbors`). Other sparse formats are
    converted to CSR (a copy of the stored values, never a dense array); dense points (queries
    beside sparse samples) are checked as :func:`check_points` checks them, then stored as CSR.
    The matrix is returned in canonical form (each row's column indices sorted, none repeated):
    scikit-learn's sparse distances (the neighbour search) read unsorted or repeated indices as
    other points ('manhattan': wrong neighbours, silently), so a non-canonical matrix is copied
    and put in that form; the caller's is not modified."""
    import scipy.sparse

    if not scipy.sparse.issparse(x):
        return scipy.sparse.csr_matrix(check_points(x, name, n_features=n_features, dtype=dtype))
    X = x.tocsr()
    if np.iscomplexobj(X.data):
        raise ValueError(f"{name} must be real, got a complex sparse matrix")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(not_numbers(name, X.dtype))
    if dtype is None:
        dtype = X.dtype if X.dtype in FLOAT_DTYPES else np.float64
    X = X.astype(dtype, copy=False)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(empty_input(name, X.shape))
    if not np.all(np.isfinite(X.data)):
        raise ValueError(not_finite(name))
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(wrong_features(name, X.shape[1], n_features))
    if not X.has_canonical_format:  # a copy in canonical form: the caller's matrix is left as it is
        X = X.copy() if X is x else X
        X.sum_duplicates()  # sorts each row's column indices and sums repeated ones
    return X


def _masked_dtypes(x):
    """The dtypes of a pandas Series/DataFrame when it has a nullable (masked) one, else ``[]``."""
    dtypes = list(getattr(x, "dtypes", [])) if hasattr(x, "columns") else [getattr(x, "dtype", None)]
    masked = type(x).__module__.startswith("pandas") and any(hasattr(t, "numpy_dtype") for t in dtypes)
    return dtypes if masked and all(hasattr(t, "numpy_dtype") for t in dtypes) else []


def check_points(x, name, *, n_features=None, dtype=None, finite=True):
    """A 2-D ``(n, d)`` float array of points; 1-D input is read as ``n`` points in 1-D
    (``finite=False``: the values are not scanned for NaN or infinity)."""
    arr = check_array(x, name, ndim=(1, 2), dtype=dtype, finite=finite)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has no features (shape {arr.shape})")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(wrong_features(name, arr.shape[1], n_features))
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


def check_class_labels(y, name="y"):
    """scikit-learn's ``check_classification_targets``, after refusing labels that mix strings
    with other objects (``["a", None]``), which its sorting meets with "'<' not supported between
    instances of 'NoneType' and 'str'"; the message is its ``unique_labels``' for such a mix."""
    from sklearn.utils.multiclass import check_classification_targets

    labels = np.asarray(y)
    if labels.ndim == 1 and labels.dtype.kind in "iubU":
        return  # one column of integers, booleans or strings: always "binary" or "multiclass" to it (0.2 ms)
    if labels.dtype == object:
        kinds = {"None" if v is None else type(v).__name__ for v in labels.flat}
        if "str" in kinds and len(kinds) > 1:
            raise ValueError(f"Mix of label input types (string and number); {name} holds {', '.join(sorted(kinds))}; "
                             "class labels must be all strings or all numbers")
    with np.errstate(invalid="ignore"):  # its integer test casts floats beyond int64 (1e300): a RuntimeWarning
        check_classification_targets(y)  # before its own "Unknown label type" error
