"""Engine options, stated once: what every engine call accepts besides the kernel and the data."""
from __future__ import annotations

import functools
from dataclasses import InitVar, dataclass, fields
from numbers import Integral, Real

from .blocks import DEFAULT_MEMORY_BUDGET, resolve_n_jobs

EMPTY_POLICIES = ("nearest", "nan", "raise")
#: the policy of engine callers that apply the public one themselves (a dask chunk, whose merge
#: decides): empty rows are flagged in ``LocalSums.empty``, their means left NaN, nothing warned
DEFERRED = "defer"
ALGORITHMS = ("auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate")
#: the paths of local polynomials (binned through binned moments; no streamed form) and of local
#: covariances (exact paths only)
POLYNOMIAL_ALGORITHMS = ("auto", "dense", "neighbors", "compiled", "binned")
EXACT_ALGORITHMS = POLYNOMIAL_ALGORITHMS[:-1]


@functools.cache
def constraints():
    """Each option's allowed values, declared once with scikit-learn's constraints: :class:`EngineOptions`
    checks them, and the estimators' ``_parameter_constraints`` take theirs from here
    (:mod:`localkit._params`). A tuple of block sizes or grid points is checked entry by entry after.
    Built on first use, so that ``import localkit.nn`` (whose planner table reads this module) does
    not import scikit-learn."""
    from sklearn.utils._param_validation import Hidden, StrOptions

    from .._constraints import Number, positive

    return {
        "empty": [StrOptions(set(EMPTY_POLICIES)), Hidden(StrOptions({DEFERRED}))],
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "block_size": [Number(Integral, 1, None, closed="left"), tuple, None],
        "memory_budget": positive() + [None],
        "n_jobs": [Number(Integral, None, -1, closed="right"), Number(Integral, 1, None, closed="left"), None],
        "exact_edge": ["boolean"],
        "grid_size": [Number(Integral, 2, None, closed="left"), tuple, None],
        "tolerance": [Number(Real, 0, 1, closed="neither"), None],
    }


@dataclass(frozen=True)
class EngineOptions:
    """How an engine pass runs; none of these change the result beyond round-off.

    empty : {"nearest", "nan", "raise"}, default="nearest"
        Policy for a query whose neighbourhood is empty (outside every compact support, or all
        weights zero): "nearest" gives the value of the nearest sample (the limit of growing
        the bandwidth until one sample enters) with a weight sum of 0; "nan" gives NaN and a
        warning; "raise" raises a ``ValueError``. (Internally also ``DEFERRED``: the rows
        flagged and left NaN, for callers that apply the policy themselves.)
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        The path (see :mod:`localkit.engine.planner`); "auto" lets the planner choose, and takes
        "binned", the one path that approximates (:mod:`localkit.engine.passes.binned`), only
        where a ``tolerance`` is given and its error bound meets it. "streamed" is the pass written against the array API, the one that runs on a
        device, taken on NumPy arrays when asked for (the same code on every array library; on
        the host the dense path is its faster form). "approximate" (never taken by "auto") searches
        neighbours in k-means inverted lists built once with the bound kernel, the k nearest in
        the 12 lists of nearest centres (or the fewest meeting ``tolerance``) re-ranked exactly,
        its recall@k measured on a sample of its first queries
        (:mod:`localkit.engine.retrieval`): kNN kernels take its k nearest, compact profiles
        its radius searches (k doubled until the k-th distance passes the support), smooth profiles
        the truncated pass (clusters of samples, visited until the omitted weight meets ``tolerance``).
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (one int, or one per feature); by default the
        fewest whose error bound meets ``tolerance`` (:func:`localkit.engine.passes.binned.grid_shape`).
    tolerance : float, optional
        The relative error the caller accepts from the binned pass, against its documented bound
        (:mod:`localkit.engine.passes.binned`: ``8 (delta / h)^2``, ``4 delta / h`` for a profile with
        a kink or a jump). It sets the default grid (``1e-4`` when None); given, it also lets
        "auto" take the binned pass where it applies and its bound on the grid it would use is at
        most ``tolerance`` (never otherwise). It is also the guarantee of the truncated pass of a
        smooth profile (:func:`~localkit.engine.passes.neighbors.truncated_path`): the weight left
        out of each query's sums is at most ``tolerance`` of the weight kept, ``sum_(c left out)
        W_c k(max(0, |q - c| - r_c) / h) <= tolerance sum_(j kept) c_j k(d_j / h)`` over clusters of
        centre ``c``, radius ``r_c`` and weight ``W_c`` (default ``1e-6`` there). On the inverted
        lists of "approximate" (kNN kernels, compact profiles) it is the share of the true k nearest
        a search may miss: the lists probed are the fewest whose recall, measured on a sample of the
        first queries against the exact scan, less two standard errors, is at least ``1 - tolerance``
        (:class:`~localkit.engine.retrieval.ListIndex`; default: 12 lists, their recall measured and
        reported).
    block_size : int or (int, int), optional
        Query and sample block sizes; by default chosen from ``memory_budget``.
    memory_budget : float, optional
        Bytes that kernel blocks may occupy at once (default 128 MiB).
    n_jobs : int, optional
        Threads over query blocks (and the binned pass's FFTs, scipy.fft's ``workers``); ``None``
        means one unless a joblib context says otherwise, ``-1`` all cores (scikit-learn's convention).
    exact_edge : bool, default=False
        Decide the samples at distance exactly ``h`` of a compact support by
        ``|q - x|^2 <= h^2`` in the raw coordinates, the arithmetic of scikit-learn's radius
        queries: the planner then takes the compiled compact pass wherever it applies, at any
        number of features (mean shift, whose seeds land on such ties on gridded data).
    """

    empty: str = "nearest"
    algorithm: str = "auto"
    block_size: int | tuple | None = None
    memory_budget: float | None = None
    n_jobs: int | None = None
    exact_edge: bool = False
    grid_size: int | tuple | None = None
    tolerance: float | None = None

    #: not fields: who asks (named in the message of a value refused, as scikit-learn names a
    #: function) and the paths it has; :meth:`of` sets them for a public function's keywords
    caller: InitVar[str] = "EngineOptions"
    algorithms: InitVar[tuple] = ALGORITHMS

    def __post_init__(self, caller, algorithms):
        _check(self, caller, algorithms)

    @classmethod
    def of(cls, caller, keywords, allowed=None, algorithms=ALGORITHMS):
        """The options of a public call's engine keywords (``keywords``, a dict), each checked once here.

        ``allowed``: the fields ``caller`` takes (default: all); any other keyword is a ``TypeError``
        that names them, as Python names an unknown argument. ``algorithms``: the paths it has. A bad
        value is scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``) that
        names the option and ``caller``.
        """
        allowed = OPTIONS if allowed is None else allowed
        unknown = sorted(set(keywords) - set(allowed))
        if unknown:
            raise TypeError(f"{caller}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                            f"its engine options are {', '.join(allowed)} (see localkit.engine.EngineOptions)")
        return cls(**keywords, caller=caller, algorithms=algorithms)

    @property
    def threads(self):
        return resolve_n_jobs(self.n_jobs)

    @property
    def budget(self):
        """The bytes kernel blocks may occupy at once: ``memory_budget``, or the engine's default."""
        return DEFAULT_MEMORY_BUDGET if self.memory_budget is None else self.memory_budget


#: the options' names, in the order of their fields
OPTIONS = tuple(field.name for field in fields(EngineOptions))
#: the sets of values already checked, by their repr (2 and 2.0, 1 and True hash alike; reprs do not)
_CHECKED = set()


def _check(options, caller, algorithms):
    """Check ``options`` against :func:`constraints` (``algorithm`` among ``algorithms``) in the name of
    ``caller``; a set of values seen before is not checked again (estimators build their options on
    every call: scikit-learn's check costs ~15 us, a lookup ~2 us)."""
    values = tuple(getattr(options, name) for name in OPTIONS)
    key = (caller, algorithms, repr(values))
    if key not in _CHECKED:
        _check_values(values, caller, algorithms)
        if len(_CHECKED) < 4096:
            _CHECKED.add(key)


def _check_values(values, caller, algorithms):
    from sklearn.utils._param_validation import InvalidParameterError, StrOptions, validate_parameter_constraints

    options = dict(zip(OPTIONS, values))
    validate_parameter_constraints({**constraints(), "algorithm": [StrOptions(set(algorithms))]}, options, caller)
    for name, least, most in (("block_size", 1, 2), ("grid_size", 2, None)):
        sizes = options[name]
        if isinstance(sizes, tuple) and not (0 < len(sizes) <= (most or len(sizes)) and all(
                isinstance(b, Integral) and not isinstance(b, bool) and b >= least for b in sizes)):
            what = "a pair of them" if most == 2 else "a tuple of them, one per feature"
            raise InvalidParameterError(f"The {name!r} parameter of {caller} must be an int >= {least} or {what}. "
                                        f"Got {sizes!r} instead.")
