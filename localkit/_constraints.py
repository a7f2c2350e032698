"""Pieces of declarative parameter constraints (scikit-learn's ``validate_params``; see
:mod:`localkit._params`), apart from :mod:`localkit._validation` so that the engine can use them
without importing upwards, and :mod:`localkit.nn` can validate without importing scikit-learn."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval


class Number(Interval):
    """scikit-learn's ``Interval`` without bools: it admits ``True`` as the number 1, and a count or
    a tolerance given as ``True`` then fails far from where it was set."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


def positive(kind=Real):
    """A finite number (or integer, ``kind=Integral``) ``> 0``."""
    return [Number(kind, 0, None if kind is Integral else np.inf, closed="neither")]


def non_negative(kind=Real):
    """A finite number (or integer) ``>= 0``."""
    return [Number(kind, 0, None if kind is Integral else np.inf, closed="left")]
