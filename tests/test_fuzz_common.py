"""The fuzzing suite's shared pieces: input strategies and the invariant every entry point keeps.

The invariant (issue 14): a call either raises a ``ValueError``/``TypeError`` whose message names
the argument at fault (or is scikit-learn's own message for the same input), or returns a finite
result of a floating dtype, which the caller then checks with a cheap oracle. Anything else (an
``IndexError``, ``ZeroDivisionError``, ``OverflowError``, a message with internal names, NaN in a
result) is a failure. The number of examples follows the hypothesis profile of
``tests/conftest.py`` ("ci" by default, ``HYPOTHESIS_PROFILE=long`` for a deep run).
"""
from __future__ import annotations

import contextlib
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localkit.exceptions import LocalkitWarning

DTYPES = ("float64", "float32", "float16", "int64", "bool", "object", "str")
#: powers of ten that the values are scaled by: from the bottom to the top of float64
SCALES = (-300, -150, -20, 0, 0, 0, 0, 20, 150, 300)
#: words of scikit-learn's own input-validation messages (they name the array by its role)
SKLEARN_WORDS = ("array", "Input", "sample", "feature", "dtype", "label", "class", "convert", "numeric")
#: internal names that must never reach a user (the failures issue 14 lists)
LEAKS = ("NoneType", "add.reduce", "not supported between", "values contains", "resolved dtypes",
         "object has no attribute", "out of range for", "index ")


def examples(fraction=1.0):
    """Examples for one fuzz test: a ``fraction`` of the active profile's budget (at least 2)."""
    return max(2, int(settings.default.max_examples * fraction))


@st.composite
def arrays(draw, rows=(0, 8), features=(0, 3), dtypes=DTYPES, scales=SCALES, bad=True, ndim=2):
    """An array of random shape, dtype and scale, sometimes with NaN or infinity in it."""
    n = draw(st.integers(*rows))
    d = draw(st.integers(*features)) if isinstance(features, tuple) else features
    dtype = draw(st.sampled_from(dtypes))
    scale = 10.0 ** draw(st.sampled_from(scales))
    x = np.random.default_rng(draw(st.integers(0, 2**16))).normal(size=(n, d)) * scale
    if bad and x.size and draw(st.integers(0, 3)) == 0:
        flat = x.reshape(-1)
        flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    if ndim == 1:
        x = x.reshape(-1)
    return cast(x, dtype)


@st.composite
def distinct_rows(draw, rows=(6, 14), features=(1, 3), scales=(-20, 0, 0, 20)):
    """Float64 data whose rows all differ, and a target: the input of a leave-one-out whose
    rows are then repeated."""
    n = draw(st.integers(*rows))
    d = draw(st.integers(*features))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    X = np.unique(rng.normal(size=(n, d)), axis=0) * 10.0 ** draw(st.sampled_from(scales))
    return X, rng.normal(size=len(X))


def cast(x, dtype):
    """``x`` as ``dtype``, the way a user would hand it over (overflow to inf included)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "int64":
            return np.where(np.isfinite(x) & (np.abs(x) < 2**62), x, 0).astype(np.int64)
        if dtype == "bool":
            return x > 0
        if dtype == "object":
            return x.astype(object)
        if dtype == "str":
            return x.astype(str)
        return x.astype(dtype)


#: memory layouts of a tensor (torch) other than the contiguous one, as users hand them over: see
#: :func:`as_layout`
LAYOUTS = ("contiguous", "transposed", "strided", "rows", "batch-expanded", "feature-expanded")


def as_layout(t, layout):
    """A view of ``t`` (a tensor of >= 3 dimensions) in ``layout``, not contiguous but for
    "contiguous": "transposed" (stored as ``(..., d, L)``: the last dimension has stride ``L``),
    "strided" (every other column of a twice wider tensor, from an offset: stride 2), "rows"
    (every other row), which keep ``t``'s values; "batch-expanded" (the first batch element
    broadcast, stride 0: keys shared by heads) and "feature-expanded" (the first column broadcast
    over the last dimension, stride 0), which change them: compare against ``view.contiguous()``."""
    if layout == "transposed":
        return t.transpose(-2, -1).contiguous().transpose(-2, -1)
    if layout == "strided":
        return t.repeat_interleave(2, dim=-1)[..., 1::2]
    if layout == "rows":
        return t.repeat_interleave(2, dim=-2)[..., 1::2, :]
    if layout == "batch-expanded":
        return t[:1].expand(t.shape)
    if layout == "feature-expanded":
        return t[..., :1].expand(t.shape)
    assert layout == "contiguous", layout
    return t


#: NumPy's floating-point warnings (``np.errstate``)
FLOATING_POINT = r"(invalid value|overflow|divide by zero|underflow) encountered"


@contextlib.contextmanager
def fallbacks_allowed():
    """Random inputs meet localkit's documented fallbacks (a near-singular local design, an empty
    neighbourhood, ``max_iter`` reached by the deliberately small settings): their
    :class:`~localkit.exceptions.LocalkitWarning` is allowed here, and only it; any other warning
    stays an error (the suite's ``filterwarnings``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LocalkitWarning)
        yield


def outcome(call, names):
    """Run ``call``; return ``(True, result)``, or ``(False, exc)`` for a ValueError/TypeError that
    names one of ``names`` (arguments or parameters) or is scikit-learn's validation message.
    A NumPy floating-point warning is allowed on the way to that error (scikit-learn's input
    check sums the input before it names the infinity it finds), never in a call that returns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", FLOATING_POINT, RuntimeWarning)
        try:
            result = call()
        except (ValueError, TypeError) as exc:
            check_message(exc, names)
            return False, exc
    stray = [str(w.message) for w in caught if not issubclass(w.category, LocalkitWarning)]
    assert not stray, f"a call that returned warned {stray}"
    return True, result


def check_message(exc, names):
    msg = str(exc)
    leaked = [w for w in LEAKS if w in msg and not any(w.strip() in n for n in names)]
    assert not leaked, f"{type(exc).__name__} leaks internal names {leaked}: {msg}"
    named = any(re.search(rf"(?<![A-Za-z_]){re.escape(w)}(?![A-Za-z_])", msg) for w in names)
    assert named or any(w in msg for w in SKLEARN_WORDS), (
        f"{type(exc).__name__} names none of {sorted(names)}: {msg}")


def check_floats(result, shape=None, name="result"):
    """A finite array of a floating dtype (and of ``shape``, if given)."""
    result = np.asarray(result)
    assert np.issubdtype(result.dtype, np.floating), f"{name} has dtype {result.dtype}"
    assert np.all(np.isfinite(result)), f"{name} is not finite: {result}"
    if shape is not None:
        assert result.shape == shape, f"{name} has shape {result.shape}, expected {shape}"
    return result


def within(result, values, rtol=1e-6):
    """A local mean is a convex combination: it lies between the smallest and largest value."""
    lo, hi = np.min(values, axis=0), np.max(values, axis=0)
    slack = rtol * np.maximum(np.abs(lo), np.abs(hi)) + 1e-300
    assert np.all(result >= lo - slack) and np.all(result <= hi + slack), (result, lo, hi)


# -- the helpers themselves can fail ---------------------------------------------------------------

@settings(max_examples=examples())
@given(arrays())
def test_arrays_have_the_shapes_and_dtypes_drawn(x):
    assert x.ndim == 2 and x.shape[0] <= 8 and x.shape[1] <= 3
    assert x.dtype.kind in "fiboU"


def test_outcome_rejects_an_unclear_message():
    with pytest.raises(AssertionError, match="names none"):
        outcome(lambda: (_ for _ in ()).throw(ValueError("something went wrong")), ["bandwidth"])
    with pytest.raises(AssertionError, match="leaks"):
        outcome(lambda: (_ for _ in ()).throw(TypeError("unsupported operand for 'NoneType' and bandwidth")),
                ["bandwidth"])
    ok, exc = outcome(lambda: (_ for _ in ()).throw(ValueError("bandwidth must be > 0")), ["bandwidth"])
    assert not ok and "bandwidth" in str(exc)


def test_other_exception_types_propagate():
    with pytest.raises(ZeroDivisionError):
        outcome(lambda: 1 / 0, ["x"])


def test_layouts_are_views_of_the_stated_kind():
    import torch

    t = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    for layout in LAYOUTS:
        view = as_layout(t, layout)
        assert view.shape == t.shape and view.is_contiguous() == (layout == "contiguous"), layout
        if layout in ("contiguous", "transposed", "strided", "rows"):
            assert torch.equal(view, t), layout
    assert as_layout(t, "transposed").stride(-1) == 3 and as_layout(t, "strided").stride(-1) == 2
    assert as_layout(t, "batch-expanded").stride(0) == 0 and as_layout(t, "feature-expanded").stride(-1) == 0


def test_check_floats_and_within_fail_on_bad_results():
    with pytest.raises(AssertionError):
        check_floats(np.array([1.0, np.nan]))
    with pytest.raises(AssertionError):
        check_floats(np.array([1, 2]))
    with pytest.raises(AssertionError):
        within(np.array([2.5]), np.array([0.0, 1.0, 2.0]))
    within(np.array([0.5]), np.array([0.0, 1.0]))
