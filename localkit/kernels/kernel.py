"""The localization kernel: a profile of a scaled distance, or the softmax similarity kernel.

``K(x*, x) = k(u)`` with ``u = d(x*, x) / h`` for a profile ``k`` (see
:mod:`localkit.kernels.profiles`), or ``K(x*, x) = exp(<x*, x> / h)`` for ``name="softmax"``
(the kernel of attention and of modern Hopfield networks, ``h`` the temperature).

A kernel produces *log-weights* for a block of queries against a block of samples; the engine
streams those blocks. ``Kernel(...)(X, Y)`` gives the dense matrix for small inputs and plots.

Kernels form an algebra: ``Kernel(..., features=[...])`` looks at a group of columns only, the
categorical kernels ``"aitchison_aitken"`` and ``"wang_ryzin"`` compare levels
(:mod:`localkit.kernels.categorical`), and ``K1 * K2`` is the product kernel
(:class:`ProductKernel`), ``log K = log K1 + log K2``, each factor on its own columns;
``w1 * K1 + w2 * K2`` is a sum with fixed weights ``w_k >= 0`` (:class:`SumKernel`).
"""
from __future__ import annotations

import numbers

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from .._validation import check_points
from .bandwidth import resolve_bandwidth
from .categorical import CATEGORICAL_PROFILES, check_smoothing
from .distances import rescale, row_sq, sq_distances
from .profiles import get_profile

#: Norms of ``x* - x`` (translation invariant, homogeneous: the engine centres and scales by ``h``)
NORM_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski")
#: Also accepted (besides a callable ``metric(a, b) -> float``): distances the engine takes as
#: they are, ``u = d(x*, x) / h`` with a scalar ``h`` ("precomputed": the inputs are distances)
METRICS = NORM_METRICS + ("cosine", "precomputed")
#: Metrics that are the euclidean norm of a linear map of ``x* - x`` (scikit-learn's names, their
#: matrices in ``metric_params``): the estimators map the coordinates once, at fit, and measure
#: euclidean distances there (:func:`metric_map`), so that every path of the engine takes them
LINEAR_METRICS = ("seuclidean", "mahalanobis")


class Kernel:
    """A localization kernel ``K(x*, x) = k(d(x*, x) / h)``.

    Parameters
    ----------
    name : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", \
            "softmax", "aitchison_aitken", "wang_ryzin"} or callable, default="gaussian"
        A profile ``k(u)`` of ``u = d / h``: "gaussian" ``exp(-u^2 / 2)``, "laplacian" ``exp(-u)``,
        "cauchy" ``1 / (1 + u^2)``, and, zero for ``u > 1``, "epanechnikov" ``1 - u^2``, "tricube"
        ``(1 - u^3)^3``, "biweight" ``(1 - u^2)^2``, "triweight" ``(1 - u^2)^3``, "triangular"
        ``1 - u``, "uniform" 1, "cosine" ``cos(pi u / 2)`` (up to their normalising constants);
        scikit-learn's names "rbf", "tophat", "flat", "exponential", "linear" and "quartic" are
        accepted for "gaussian", "uniform", "uniform", "laplacian", "triangular" and "biweight".
        ``"softmax"`` is ``exp(<x*, x> / h)``; "aitchison_aitken" and "wang_ryzin" are categorical
        (below). A callable ``log_k(u2, xp)`` is a profile of your own: ``log k`` of the squared
        scaled distance ``u2 = u^2`` (an array), written against the array namespace ``xp`` it is
        handed (NumPy, or torch on tensors), elementwise, ``-inf`` for a zero weight, e.g.
        ``lambda u2, xp: xp.log1p(-u2)`` with ``support=1.0`` (the Epanechnikov profile). It runs on
        the dense, neighbour, binned and streamed paths, on dask arrays and on tensors, and in
        :func:`localkit.nn.kernel_attention` (autograd differentiates it); the compiled compact pass,
        FlexAttention and the Triton attention kernel need a compiled form and refuse it. ``log k``
        is taken up to a constant: it is evaluated as ``log k(u2) - log k(0)`` (so ``1000 - u2 / 2``
        is the Gaussian), and a NaN it returns at run time raises a ValueError. It is computed as
        the profile it states, never taken for a built-in one (finite at ``u = 1``, it is not the
        uniform kernel).
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``. An array gives a diagonal metric ``u^2 = sum_k (dx_k / h_k)^2``; a rule name
        is resolved on the samples: the normal-reference
        rules "scott" and "silverman", the plug-in rules "isj" (KDEpy's improved Sheather-Jones)
        and "sj" (R's ``bw.SJ``), the last two per feature. For the Gaussian
        profile ``h`` is the standard deviation. Ignored when ``n_neighbors`` is set.
    n_neighbors : int or None, default=None
        Adaptive (balloon) bandwidth: ``h(x*)`` is the distance from ``x*`` to its k-th
        nearest sample. With the uniform profile this is exactly k-nearest-neighbours.
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski", "cosine", "precomputed"} or callable, \
            default="euclidean"
        The distance ``d``. Norms (the first four; "minkowski" with ``p``) take any bandwidth;
        "cosine" (``1 - cos`` of the angle), a callable ``metric(a, b) -> float`` and
        "precomputed" (queries and samples given as distances to the samples, as in
        scikit-learn) take a scalar bandwidth, or ``n_neighbors``.
    p : float, default=2
        The power of the "minkowski" metric, ``d = (sum_k |dx_k|^p)^(1/p)``, ``p >= 1``;
        ``p=inf`` is its limit ``max_k |dx_k|``, the "chebyshev" metric (``metric`` becomes that).
    features : sequence of int or str, or None, default=None
        The columns the kernel looks at (indices; names where an estimator is fitted on a
        DataFrame): ``K(x*, x) = k(d(x*_F, x_F) / h)`` on the columns ``F`` only, a bandwidth
        rule resolved on them. None: every column. ``K1 * K2`` multiplies kernels on disjoint
        groups of columns (a product kernel); a norm metric. With ``n_neighbors``, ``h(x*)`` is
        the distance to the k-th nearest sample in those columns, as the kNN kernel of those
        columns alone computes it.
    support : None or 1.0, default=None
        With a callable ``name`` only: ``1.0`` when the profile vanishes for ``u > 1`` (compact: the
        callable is then only asked inside, and the engine's compact paths and policies apply),
        None when it has no bound.

    Notes
    -----
    Categorical profiles compare integer codes, column by column, with ``bandwidth`` the smoothing
    ``0 <= lam <= 1`` (one, or one per column): ``"aitchison_aitken"`` (unordered levels) weighs
    ``1 - lam`` at the query's level and ``lam / (c - 1)`` at the others, ``c`` the number of levels
    seen in the samples; ``"wang_ryzin"`` (ordered levels) ``1 - lam`` and
    ``(1 - lam) / 2 * lam^|x* - x|``.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import Kernel
    >>> K = Kernel("epanechnikov", bandwidth=2.0)
    >>> K(np.zeros((1, 1)), np.array([[0.0], [1.0], [3.0]])).round(3)
    array([[1.  , 0.75, 0.  ]])
    >>> Kernel("gaussian", bandwidth=0.5, features=[0, 1]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[2])
    Kernel('gaussian', bandwidth=0.5, features=[0, 1]) * Kernel('aitchison_aitken', bandwidth=0.2, features=[2])
    """

    #: defaults for kernels pickled before the algebra (issue 23)
    features = None
    is_categorical = False
    support = None
    #: a categorical kernel's levels, fixed by :meth:`with_levels` (one array of codes per column);
    #: None: those the samples it is bound to show
    level_codes = None

    def __init__(self, name: str = "gaussian", bandwidth: float | str | np.ndarray = 1.0,
                 n_neighbors: int | None = None, metric: str | Callable = "euclidean", p: float = 2,
                 features=None, support=None):
        self.name = name
        self.support = support
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.p = p
        self.features = features
        self._validate()

    # -- description ---------------------------------------------------------------------
    def _validate(self):
        self.features = _check_features(self.features)
        if self.support is not None and isinstance(self.name, str):
            raise ValueError(f"support is given with a user profile (a callable log_k(u2, xp)) only; the kernel "
                             f"{self.name!r} states its own, got support={self.support!r}")
        self.is_categorical = isinstance(self.name, str) and self.name in CATEGORICAL_PROFILES
        if self.is_categorical:
            self._validate_categorical()
            return
        self.is_softmax = self.name == "softmax"
        self.profile = None if self.is_softmax else get_profile(self.name, self.support)
        if not callable(self.metric) and self.metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)} or a callable, got {self.metric!r}")
        if isinstance(self.p, bool) or not isinstance(self.p, numbers.Real) or not (1 <= self.p <= np.inf):
            raise ValueError(f"p (the power of the minkowski metric) must be a number >= 1 (inf: chebyshev), "
                             f"got {self.p!r}")
        if self.metric == "minkowski" and self.p == np.inf:  # the limit p -> inf, by its own name (one path)
            self.metric = "chebyshev"
        if not self.norm_metric and not isinstance(self.bandwidth, numbers.Real) and self.n_neighbors is None:
            raise ValueError(f"metric={self.metric!r} takes a scalar bandwidth (distances are not scaled per "
                             f"feature, and rules need coordinates), got bandwidth={self.bandwidth!r}")
        if self.n_neighbors is not None:
            if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral):
                raise TypeError(f"n_neighbors must be an integer or None, got {self.n_neighbors!r}")
            if self.n_neighbors < 1:
                raise ValueError(f"n_neighbors must be >= 1, got {self.n_neighbors}")
            if self.is_softmax:
                raise ValueError("n_neighbors is a distance-based bandwidth; the softmax kernel has none")
        if self.is_softmax:
            if self.metric != "euclidean":
                raise ValueError("the softmax kernel uses the inner product; metric must stay 'euclidean'")
            if isinstance(self.bandwidth, np.ndarray) and self.bandwidth.ndim == 0:  # a 0-d array is a number
                self.bandwidth = self.bandwidth.item()
            if not isinstance(self.bandwidth, numbers.Real) or isinstance(self.bandwidth, bool):
                raise ValueError(
                    f"bandwidth of the softmax kernel is a positive temperature, got {self.bandwidth!r}"
                )
        if isinstance(self.bandwidth, numbers.Real) and not isinstance(self.bandwidth, bool):
            if not np.isfinite(self.bandwidth) or self.bandwidth <= 0:
                raise ValueError(f"bandwidth must be finite and > 0, got {self.bandwidth!r}")
        if self.features is not None:
            if self.is_softmax:
                raise ValueError("features: the softmax kernel takes the inner product of every column; a kernel on "
                                 "a group of columns is a distance kernel")
            if not self.norm_metric:
                raise ValueError(f"metric={self.metric!r}: a kernel on a group of columns (features=...) measures them "
                                 f"with a norm, one of {list(NORM_METRICS)}")

    def _validate_categorical(self):
        self.is_softmax, self.profile = False, None
        if self.n_neighbors is not None:
            raise ValueError(f"n_neighbors: the {self.name!r} kernel compares levels; it has no kNN bandwidth")
        if self.metric != "euclidean":
            raise ValueError(f"metric={self.metric!r}: the {self.name!r} kernel compares levels; leave metric as "
                             "'euclidean'")
        if not (isinstance(self.bandwidth, str) and self.bandwidth == "cv"):  # "cv": chosen by an estimator's fit
            check_smoothing(self.bandwidth, self.name)

    # -- the algebra -------------------------------------------------------------------------
    #: statsmodels' ``var_type`` letters and the kernels it gives them (:meth:`from_var_type`)
    VAR_TYPES = {"c": "continuous", "u": "unordered", "o": "ordered"}

    @classmethod
    def from_var_type(cls, var_type, bandwidth="cv", *, continuous="gaussian"):
        """The product kernel of mixed data, spelled as statsmodels spells it (``KernelReg``,
        ``KDEMultivariate``): one factor per column, ``var_type[j]`` its kind.

        .. math::

            K(x^*, x) = \\prod_{j:\\,c} k\\Big(\\frac{x^*_j - x_j}{h_j}\\Big)
                        \\prod_{j:\\,u} \\kappa^{AA}_{\\lambda_j}(x^*_j, x_j)
                        \\prod_{j:\\,o} \\kappa^{WR}_{\\lambda_j}(x^*_j, x_j)

        ``"c"`` continuous (the profile ``continuous``, statsmodels' Gaussian by default),
        ``"u"`` unordered (Aitchison-Aitken), ``"o"`` ordered (Wang-van Ryzin), as Li and Racine's
        mixed-data kernels; ``Kernel.from_var_type("ccuo", [h1, h2, lam3, lam4])`` is
        ``Kernel("gaussian", bandwidth=h1, features=[0]) * ... * Kernel("wang_ryzin", bandwidth=lam4,
        features=[3])``. Building it costs ``O(len(var_type))``.

        Parameters
        ----------
        var_type : str
            One letter per column, each "c", "u" or "o".
        bandwidth : number, str, or sequence of one per column, default="cv"
            statsmodels' ``bw``: ``h_j`` of a continuous column (a number or a rule such as "scott"),
            ``lam_j`` in [0, 1] of a categorical one; "cv" chooses them jointly by leave-one-out in
            an estimator's ``fit`` (statsmodels' ``bw="cv_ls"`` for regression, ``"cv_ml"`` for
            densities). One value is used for every column.
        continuous : str, default="gaussian"
            The profile of the continuous columns.

        Examples
        --------
        >>> from localkit import Kernel
        >>> Kernel.from_var_type("cu", [0.5, 0.2])
        Kernel('gaussian', bandwidth=0.5, features=[0]) * Kernel('aitchison_aitken', bandwidth=0.2, features=[1])
        """
        if not isinstance(var_type, str) or not var_type or set(var_type) - set(cls.VAR_TYPES):
            raise ValueError(f"var_type must be a string of the letters 'c' (continuous), 'u' (unordered) and 'o' "
                             f"(ordered), one per column, got {var_type!r}")
        if isinstance(bandwidth, (str, numbers.Real)) and not isinstance(bandwidth, bool):
            bandwidth = [bandwidth] * len(var_type)
        try:
            bandwidth = list(bandwidth)
        except TypeError:
            raise ValueError(f"bandwidth must be a number, a rule or one per column of var_type={var_type!r}, "
                             f"got {bandwidth!r}") from None
        if len(bandwidth) != len(var_type):
            raise ValueError(f"bandwidth has {len(bandwidth)} entries; var_type={var_type!r} has {len(var_type)} "
                             "columns")
        names = {"c": continuous, "u": "aitchison_aitken", "o": "wang_ryzin"}
        factors = [cls(names[t], bandwidth=b, features=[j]) for j, (t, b) in enumerate(zip(var_type, bandwidth))]
        product = factors[0]
        for factor in factors[1:]:
            product = product * factor
        return product

    @property
    def composite(self):
        """True for kernels the engine computes factor by factor: on a group of columns
        (``features``), categorical, or a product (``K1 * K2``)."""
        return self.features is not None or self.is_categorical

    @property
    def factors(self):
        """The kernels whose log-weights add up to this one's: ``(self,)``, or a product's factors."""
        return (self,)

    def __mul__(self, other):
        if isinstance(other, numbers.Real):  # w * K: a weighted term of a sum (check_weight refuses bools)
            return SumKernel([(other, self)])
        if not isinstance(other, Kernel) or isinstance(other, SumKernel):  # a sum distributes (its __rmul__)
            return NotImplemented
        return ProductKernel(self.factors + other.factors)

    __rmul__ = __mul__

    def __add__(self, other):
        """``K1 + K2``: a sum of kernels (:class:`SumKernel`), weight 1 each unless given as ``w * K``."""
        if not isinstance(other, Kernel):
            return NotImplemented
        return SumKernel([(1.0, self), (1.0, other)])

    def plain(self):
        """This kernel without ``features`` (the kernel of its own columns)."""
        if self.is_categorical:
            raise ValueError("a categorical kernel has no plain (distance) form")
        return self._with(features=None)

    def columns(self, n_features):
        """``[(factor, columns)]``: each factor with the indices of its columns (``features``;
        every column where None), checked against ``n_features`` and for overlaps."""
        out, seen = [], set()
        for factor in self.factors:
            cols = np.arange(n_features) if factor.features is None else factor.features
            if any(isinstance(c, str) for c in cols):
                raise ValueError(f"features={list(cols)} names columns; names are resolved by an estimator fitted on a "
                                 "DataFrame (feature_names_in_): give column indices here")
            cols = np.asarray(cols, dtype=np.intp)
            if np.any(cols >= n_features):
                raise ValueError(f"features={cols.tolist()} of {factor!r} is out of range for {n_features} features")
            if seen & set(cols.tolist()):
                raise ValueError(f"features: the factors of a product kernel look at disjoint columns; column(s) "
                                 f"{sorted(seen & set(cols.tolist()))} appear twice")
            seen |= set(cols.tolist())
            out.append((factor, cols))
        return out

    def with_feature_names(self, names):
        """This kernel with ``features`` given by name mapped to indices into ``names`` (an
        estimator's ``feature_names_in_``; None: no names, indices pass through)."""
        factors = []
        for factor in self.factors:
            feats = factor.features
            if feats is not None and any(isinstance(c, str) for c in feats):
                if names is None:
                    raise ValueError(f"features={list(feats)} names columns, but the data have no column names (fit "
                                     "on a pandas DataFrame, or give indices)")
                where = {str(n): i for i, n in enumerate(names)}
                missing = [c for c in feats if isinstance(c, str) and c not in where]
                if missing:
                    raise ValueError(f"features: no column(s) named {missing}; the columns are {list(names)}")
                feats = [where[c] if isinstance(c, str) else int(c) for c in feats]
                factor = factor._with(features=feats)
            factors.append(factor)
        return factors[0] if len(factors) == 1 and not isinstance(self, ProductKernel) else ProductKernel(factors)

    def at_bandwidth(self, h):
        """This kernel (its profile, metric and support) at the fixed bandwidth ``h``: a rule or
        kNN bandwidth resolved."""
        return self._with(bandwidth=h, n_neighbors=None)

    def with_levels(self, levels):
        """This categorical kernel with the levels of its columns fixed, ``levels`` one array of
        codes per column (``c`` their number), instead of counted on the samples it is bound to:
        the levels of all the samples where a pass binds them chunk by chunk (dask arrays)."""
        if not self.is_categorical:
            raise ValueError(f"levels: {self!r} is not a categorical kernel; it has no levels")
        out = self._with()
        out.level_codes = tuple(np.unique(np.asarray(codes, dtype=np.float64)) for codes in levels)
        return out

    def _with(self, **changes):
        params = dict(name=self.name, bandwidth=self.bandwidth, n_neighbors=self.n_neighbors, metric=self.metric,
                      p=self.p, features=self.features, support=self.support)
        params.update(changes)
        out = Kernel(**params)
        out.level_codes = self.level_codes
        return out

    def resolved(self, samples, sample_weight=None):
        """This kernel with every bandwidth rule resolved on its own columns of ``samples``
        (weighted by ``sample_weight``); categorical smoothings as they are."""
        samples = np.asarray(samples)
        factors = []
        for factor, cols in self.columns(samples.shape[1]):
            if factor.is_categorical or factor.n_neighbors is not None or _is_cv(factor.bandwidth):
                factors.append(factor)  # "cv": chosen by an estimator's fit (localkit.models.kernel_learning)
                continue
            h = resolve_bandwidth(factor.bandwidth, samples[:, cols], sample_weight=sample_weight)
            factors.append(factor._with(bandwidth=h))
        return factors[0] if len(factors) == 1 and not isinstance(self, ProductKernel) else ProductKernel(factors)

    def log_density_normalizer(self, samples, sample_weight=None):
        """``log`` of the density normaliser of a kernel on groups of columns: the sum over the
        continuous factors of ``log(c_(d_f) prod_k h_k)`` (``d_f`` the factor's columns, ``c_d``
        its profile's integral); the
        categorical factors count as they are (their weights are probabilities of levels)."""
        return self.resolved(samples, sample_weight).resolved_log_density_normalizer(np.shape(samples)[1])

    def resolved_log_density_normalizer(self, n_features):
        """:meth:`log_density_normalizer` of this kernel with its rules already resolved (numbers
        in every continuous factor), in ``n_features`` columns: no samples needed (dask)."""
        total = 0.0
        for factor, cols in self.columns(n_features):
            if factor.n_neighbors is not None:
                raise ValueError(f"kernel: a density needs a fixed bandwidth (or a rule) in every factor, got the kNN "
                                 f"factor {factor!r}")
            if factor.is_categorical:
                continue
            h = np.broadcast_to(np.asarray(factor.bandwidth, dtype=np.float64), (len(cols),))
            total += float(np.sum(np.log(h)) + factor.profile.log_normalizer(len(cols)))
        return total

    @property
    def norm_metric(self):
        """True for the norms of ``x* - x``; False for cosine, callables and precomputed distances."""
        return not callable(self.metric) and self.metric in NORM_METRICS

    @property
    def scipy_metric(self):
        """``(metric, kwargs)`` for :func:`scipy.spatial.distance.cdist` (and scikit-learn)."""
        if self.metric == "minkowski":
            return "minkowski", {"p": float(self.p)}
        return {"manhattan": "cityblock"}.get(self.metric, self.metric) if not callable(self.metric) else self.metric, {}

    @property
    def compact(self):
        """True when the profile vanishes outside ``u <= 1``."""
        return self.profile is not None and self.profile.compact

    @property
    def name_(self):
        return self.name if self.is_softmax or self.is_categorical else self.profile.name

    def __repr__(self):
        bandwidth = self.bandwidth.tolist() if isinstance(self.bandwidth, np.ndarray) else self.bandwidth
        args = [self.name_ if callable(self.name) else repr(self.name_), f"bandwidth={bandwidth!r}"]
        if self.n_neighbors is not None:
            args.append(f"n_neighbors={self.n_neighbors}")
        if self.metric != "euclidean":
            args.append(f"metric={self.metric!r}")
        if self.metric == "minkowski":
            args.append(f"p={self.p!r}")
        if self.features is not None:
            args.append(f"features={list(self.features)!r}")
        if self.support is not None:
            args.append(f"support={self.support!r}")
        return f"Kernel({', '.join(args)})"

    # -- binding to samples ------------------------------------------------------------
    def resolve_bandwidth(self, samples, sample_weight=None):
        """The bandwidth as a float or per-feature array, rules resolved on ``samples`` (weighted
        by ``sample_weight`` if given)."""
        if self.composite:
            raise ValueError(f"{self!r} has a bandwidth per factor, on its own columns: see Kernel.resolved")
        return resolve_bandwidth(self.bandwidth, samples, sample_weight=sample_weight)

    def scale(self, points, h, overwrite=False):
        """Points in the kernel's coordinates: divided by ``h`` (distance kernels); ``overwrite``:
        in place where ``points`` is float64 (a temporary of the caller's: no second copy)."""
        if self.is_softmax:
            return points
        # in float64: a bandwidth beyond float32's range must not become 0 or inf first
        with np.errstate(over="ignore", under="ignore"):
            out = points if overwrite and points.dtype == np.float64 else None
            return np.divide(points, np.asarray(h, dtype=np.float64), out=out).astype(points.dtype, copy=False)

    def log_weights(self, Q, X, *, q_sq=None, x_sq=None, q_scale=None, s_scale=None, temperature=1.0,
                    exact=False, u2_exponent=0, fold_offset=False, xp=np):
        """Log-weights of a block, ``L`` and a per-query offset ``c`` with ``log K = L + c``.

        ``Q`` (b_q, d) and ``X`` (b_s, d) are in scaled coordinates (see :meth:`scale`), arrays of
        the namespace ``xp`` (the ``numpy`` module on the host); ``q_sq`` and ``x_sq`` their squared
        norms (computed if not given). ``q_scale`` (b_q,) and ``s_scale`` (b_s,) are extra
        per-query / per-sample bandwidth factors (``u = d / (h q_scale_i s_scale_j)``). The offset
        ``c`` collects terms that are constant along a row, so that the engine's normalisation never
        computes them: for the Gaussian, ``-|q|^2 / 2`` cancels from ``exp(q.x - |x|^2 / 2)`` after
        normalisation, which turns the whole block into one matrix product.

        ``exact=True`` forms ``u^2`` from differences instead of the matrix product (no
        cancellation far from the origin; :mod:`localkit.kernels.distances`), scaled by
        ``2^u2_exponent`` (coordinates stored divided by ``2^(u2_exponent / 2)``, for extreme
        bandwidths; the host only). ``fold_offset=True`` puts the Gaussian's row term into the same
        matrix product (one more column), so that ``L`` is ``log K`` itself (at most 0 for every
        distance kernel) and the offset is 0.
        """
        # NumPy's own constructors: the engine calls this once per block (a third of the overhead)
        zero = np.zeros(Q.shape[0], dtype=Q.dtype) if xp is np else xp.zeros_like(Q[:, 0])
        if self.is_softmax:
            return (Q if temperature == 1.0 else Q / float(temperature)) @ X.T, zero
        # a zero per-point bandwidth (duplicates) needs distance 0 exactly: differences, not products
        degenerate = not exact and ((q_scale is not None and not bool(xp.all(q_scale > 0)))
                                    or (s_scale is not None and not bool(xp.all(s_scale > 0))))
        if exact or degenerate or self.metric != "euclidean" or self.profile.exact_distance:
            u2 = rescale(sq_distances(Q, X, self, q_sq=q_sq, x_sq=x_sq, exact=exact or degenerate, xp=xp),
                         q_scale, s_scale, xp)
            if xp is not np:
                return self.profile.log_k_for(xp)(u2), zero
            L, c = self.profile.log_k_scaled(u2, u2_exponent)
            return L, zero + c
        q_sq = row_sq(Q, xp) if q_sq is None else q_sq
        x_sq = row_sq(X, xp) if x_sq is None else x_sq
        if self.profile.log_linear and s_scale is None:
            # one matrix product: [q, -1/2] / h_q^2 . [x, |x|^2]  =  (q.x - |x|^2 / 2) / h_q^2
            # (folded: [q, -1/2, -|q|^2/2] / h_q^2 . [x, |x|^2, 1] = -|q - x|^2 / (2 h_q^2))
            offset = -0.5 * q_sq
            Qa = _with_columns(xp, Q, [-0.5, offset] if fold_offset else [-0.5])
            Xa = _with_columns(xp, X, [x_sq, 1.0] if fold_offset else [x_sq])
            if q_scale is not None:
                inv = xp.astype(1.0 / (q_scale * q_scale), Q.dtype, copy=False)
                Qa = Qa * inv[:, None]
                offset = offset * inv
            return Qa @ Xa.T, (zero if fold_offset else offset)
        u2 = rescale(sq_distances(Q, X, self, q_sq=q_sq, x_sq=x_sq, xp=xp), q_scale, s_scale, xp)
        return (self.profile.log_k if xp is np else self.profile.log_k_for(xp))(u2), zero

    # -- dense evaluation --------------------------------------------------------------
    def __call__(self, X: ArrayLike, Y: ArrayLike | None = None) -> np.ndarray:
        """The dense kernel matrix ``K[i, j] = K(X_i, Y_j)`` (``Y`` defaults to ``X``).

        Rules and kNN bandwidths are resolved on ``Y``, the samples. Meant for small inputs
        and plots; the engine never forms this matrix for large ones.
        """
        X = check_points(X, "X")
        Y = X if Y is None else check_points(Y, "Y", n_features=X.shape[1])
        if self.composite:  # log K = sum of the factors' log K, each on its own columns
            from .categorical import CategoricalColumns, check_codes

            L = np.zeros((len(X), len(Y)))
            for factor, cols in self.columns(X.shape[1]):
                if factor.is_categorical:
                    check_codes(Y[:, cols], factor.name)
                    L += CategoricalColumns(factor.name, check_smoothing(factor.bandwidth, factor.name),
                                            Y[:, cols], factor.level_codes).log_weights(np, X[:, cols], Y[:, cols])
                else:
                    with np.errstate(divide="ignore"):
                        L += np.log(factor.plain()(X[:, cols], Y[:, cols]))
            return np.exp(L)
        h = self.resolve_bandwidth(Y)
        if self.is_softmax:
            return np.exp(X @ Y.T / h)
        # exact distances (small inputs): the k-th neighbour then sits exactly at u = 1
        from scipy.spatial.distance import cdist  # here: localkit.nn does without it (~0.5 s to import)

        metric, kwargs = self.scipy_metric
        if self.metric == "precomputed":
            D = X / (1.0 if self.n_neighbors is not None else h)
        elif self.norm_metric:
            D = cdist(self.scale(X, h), self.scale(Y, h), metric=metric, **kwargs)
        else:
            D = cdist(X, Y, metric=metric, **kwargs) / (1.0 if self.n_neighbors is not None else h)
        u2 = D * D
        if self.n_neighbors is not None:
            if self.n_neighbors > len(Y):
                raise ValueError(f"n_neighbors must be <= n_samples={len(Y)}, got {self.n_neighbors}")
            rescale(u2, np.partition(D, self.n_neighbors - 1, axis=1)[:, self.n_neighbors - 1])
        return np.exp(self.profile.log_k(u2))


def _is_cv(bandwidth):
    return isinstance(bandwidth, str) and bandwidth == "cv"


def _check_features(features):
    """``features``: None, or a non-empty sequence of distinct column indices (>= 0) or names, as a tuple."""
    if features is None:
        return None
    if isinstance(features, (str, numbers.Integral)):
        features = [features]
    try:
        feats = list(np.asarray(features, dtype=object).ravel()) if not isinstance(features, (list, tuple)) \
            else list(features)
    except TypeError:
        raise TypeError(f"features must be a sequence of column indices or names, got {features!r}") from None
    if not feats:
        raise ValueError("features must name at least one column, got an empty sequence")
    out = []
    for c in feats:
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, numbers.Integral) and not isinstance(c, bool):
            if c < 0:
                raise ValueError(f"features holds column indices >= 0, got {c}")
            out.append(int(c))
        else:
            raise TypeError(f"features must be column indices (int) or names (str), got {c!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"features lists a column twice: {out}")
    return tuple(out)


class ProductKernel(Kernel):
    """The product of kernels on disjoint groups of columns, ``K1 * K2 * ...``:

    .. math::

        K(x^*, x) = \\prod_f K_f(x^*_{F_f}, x_{F_f}), \\qquad \\log K = \\sum_f \\log K_f

    each factor ``K_f`` a :class:`Kernel` on its columns ``F_f`` (``features``), with its own
    bandwidth (a rule is resolved on its own columns) or categorical smoothing. The engine
    streams it as any kernel, adding the factors' log-weights block by block (never an
    ``(n_queries, n_samples)`` matrix beyond one block); it is compact where a factor is (the
    engine's neighbour path then searches that factor's support: :mod:`localkit.engine.factors`).
    A factor with ``n_neighbors`` takes ``h(x*)``, the distance to the k-th nearest sample in its
    columns, as the kNN kernel of those columns alone (with ``exclude_self``, among the other
    observations: a sample at the query's point of the factor's columns but not of all counts,
    at distance 0); a compact one weighs exactly those k samples.
    Factors need ``features``, disjoint; the softmax kernel is refused.

    Built by ``*``, not called directly::

        Kernel("gaussian", bandwidth=0.5, features=[0, 1]) * Kernel("wang_ryzin", bandwidth=0.3, features=[2])
    """

    def __init__(self, factors):
        factors = tuple(factors)
        for factor in factors:
            if not isinstance(factor, Kernel) or isinstance(factor, ProductKernel):
                raise TypeError(f"the factors of a product kernel are Kernel instances, got {factor!r}")
            if factor.is_softmax:
                raise ValueError("kernel='softmax' cannot be a factor of a product kernel (it is a similarity of every "
                                 "column, not a kernel of a group of columns)")
            if len(factors) > 1 and factor.features is None:
                raise ValueError(f"features: each factor of a product kernel names its columns, e.g. "
                                 f"Kernel({factor.name_!r}, features=[0]); got {factor!r}")
        named = [c for f in factors if f.features is not None for c in f.features]
        if len(set(named)) != len(named):
            raise ValueError(f"features: the factors of a product kernel look at disjoint columns, got {named}")
        self._factors = factors
        self.name, self.n_neighbors, self.metric, self.p = "product", None, "euclidean", 2
        self.bandwidth = tuple(f.bandwidth for f in factors)
        self.features = tuple(named) if len(factors) > 1 else factors[0].features
        self.is_softmax, self.is_categorical, self.profile = False, False, None

    @property
    def factors(self):
        return self._factors

    @property
    def composite(self):
        return True

    @property
    def compact(self):
        """True where any factor is compact: the product vanishes where that factor does."""
        return any(f.compact for f in self._factors)

    @property
    def name_(self):
        return "product"

    def __repr__(self):
        return " * ".join(repr(f) for f in self._factors)

    def __reduce__(self):
        return ProductKernel, (self._factors,)


def check_weight(weight, name="weight"):
    """A term's weight: a finite real number ``>= 0``."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f"{name} of a kernel in a sum must be a real number >= 0, got {weight!r}")
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"{name} of a kernel in a sum must be finite and >= 0, got {weight!r}")
    return float(weight)


class SumKernel(Kernel):
    """``sum_k w_k K_k``: kernels with fixed non-negative weights (built by ``*`` with a number and ``+``).

    .. math::

        K(x^*, x) = \\sum_k w_k K_k(x^*, x), \\qquad
        m(x^*) = \\frac{\\sum_k w_k S_k(v)}{\\sum_k w_k S_k(1)}, \\quad
        S_k(v) = \\sum_j c_j K_k(x^*, x_j) v_j

    The engine streams each term's own sums and adds them in log-space
    (:mod:`localkit.engine.sums`), never an ``(n_queries, n_samples)`` matrix. Every profile has
    ``k(0) = 1``, so the weights compare the kernels' unnormalised heights.

    ``terms`` are ``(w_k, K_k)`` pairs, each ``K_k`` a :class:`Kernel` (not a sum); at least one
    ``w_k > 0``. A sum times a kernel distributes, ``(w1 K1 + w2 K2) * K3 = w1 K1 K3 + w2 K2 K3``.

    >>> from localkit import Kernel
    >>> 0.3 * Kernel("gaussian", bandwidth=0.5) + 0.7 * Kernel("laplacian", bandwidth=2.0)
    0.3 * Kernel('gaussian', bandwidth=0.5) + 0.7 * Kernel('laplacian', bandwidth=2.0)
    """

    def __init__(self, terms):
        terms = tuple(terms)
        if not terms:
            raise ValueError("kernel: a sum of kernels needs at least one term, got none")
        checked = []
        for weight, kernel in terms:
            if not isinstance(kernel, Kernel):
                raise TypeError(f"kernel: the terms of a sum are localkit.Kernel instances, got {kernel!r}")
            if isinstance(kernel, SumKernel):
                checked.extend((check_weight(weight) * w, k) for w, k in kernel.terms)
                continue
            if kernel.is_softmax:
                raise ValueError("kernel='softmax' cannot be a term of a sum of distance kernels")
            checked.append((check_weight(weight), kernel))
        if not any(w > 0 for w, _ in checked):
            raise ValueError(f"weight: a sum of kernels needs a weight > 0, got {[w for w, _ in checked]}")
        self.terms = tuple(checked)
        self.name, self.n_neighbors, self.metric, self.p, self.features = "sum", None, "euclidean", 2, None
        self.bandwidth = tuple(k.bandwidth for _, k in self.terms)
        self.is_softmax, self.is_categorical, self.profile = False, False, None

    @property
    def weights(self):
        """``(w_1, ..., w_K)``."""
        return np.array([w for w, _ in self.terms])

    @property
    def kernels(self):
        """``(K_1, ..., K_K)``."""
        return tuple(k for _, k in self.terms)

    @property
    def composite(self):
        return True

    @property
    def factors(self):
        raise ValueError(f"{self!r} is a sum of kernels, not a product: it has terms, not factors")

    @property
    def compact(self):
        """True where every term is compact: the sum vanishes where all of them do."""
        return all(k.compact for w, k in self.terms if w > 0)

    @property
    def name_(self):
        return "sum"

    def __mul__(self, other):
        if isinstance(other, numbers.Real):  # bools refused by check_weight
            return SumKernel([(check_weight(other), self)])
        if not isinstance(other, Kernel):
            return NotImplemented
        if isinstance(other, SumKernel):
            return SumKernel([(w * v, k * l) for w, k in self.terms for v, l in other.terms])
        return SumKernel([(w, k * other) for w, k in self.terms])

    def __rmul__(self, other):
        if isinstance(other, Kernel):
            return SumKernel([(w, other * k) for w, k in self.terms])
        return self.__mul__(other)

    def map_terms(self, f):
        """``sum_k w_k f(K_k)``: the same weights, each term's kernel through ``f``."""
        return SumKernel([(w, f(k)) for w, k in self.terms])

    def resolved(self, samples, sample_weight=None):
        return self.map_terms(lambda k: k.resolved(samples, sample_weight))

    def with_feature_names(self, names):
        return self.map_terms(lambda k: k.with_feature_names(names))

    def columns(self, n_features):
        for _, k in self.terms:
            k.columns(n_features)  # each term checked on its own
        raise ValueError(f"{self!r} is a sum of kernels: its terms have columns, the sum has none")

    def log_density_normalizer(self, samples, sample_weight=None):
        """``log sum_k w_k Z_k`` with ``Z_k = exp(K_k.log_density_normalizer)`` the integral of
        each term: the density of a sum kernel is ``sum_k w_k S_k(1) / (n sum_k w_k Z_k)``, the
        mixture of the terms' densities with weights ``w_k Z_k / sum_l w_l Z_l``."""
        return self.resolved(samples, sample_weight).resolved_log_density_normalizer(np.shape(samples)[1])

    def resolved_log_density_normalizer(self, n_features):
        w = self.weights
        logs = np.array([k.resolved_log_density_normalizer(n_features) for _, k in self.terms])
        with np.errstate(divide="ignore"):
            a = np.log(w) + logs
        top = np.max(a)
        return float(top + np.log(np.sum(np.exp(a - top))))

    def __call__(self, X, Y=None):
        """The dense matrix ``sum_k w_k K_k(X, Y)`` (small inputs)."""
        return sum(w * k(X, Y) for w, k in self.terms)

    def __repr__(self):
        def term(w, k):
            text = repr(k)
            return f"{w:g} * ({text})" if " * " in text else f"{w:g} * {text}"

        return " + ".join(term(w, k) for w, k in self.terms)

    def __reduce__(self):
        return SumKernel, (self.terms,)


def _with_columns(xp, A, columns):
    """``A`` (b, d) with one more column per entry of ``columns`` (a scalar, or a vector of b), in
    ``A``'s dtype; on NumPy one array filled in place (a third of concatenating's time per block)."""
    d = A.shape[1]
    if xp is np:
        out = np.empty((A.shape[0], d + len(columns)), dtype=A.dtype)
        out[:, :d] = A
        for j, c in enumerate(columns, d):
            out[:, j] = c
        return out
    return xp.concat([A] + [xp.full_like(A[:, :1], c) if isinstance(c, float) else xp.astype(c[:, None], A.dtype)
                            for c in columns], axis=1)


# -- metrics that are norms of a linear map: reduced to a norm on mapped coordinates, once -----------
#: the parameters each metric takes in ``metric_params`` (scikit-learn's names)
METRIC_PARAMS = {"seuclidean": ("V",), "mahalanobis": ("VI",), "minkowski": ("w",)}


def effective_metric(metric, p=2, metric_params=None):
    """``(metric, p)`` of the :class:`Kernel` that measures ``metric`` on the coordinates that
    :func:`metric_map` gives: "seuclidean" and "mahalanobis" are the euclidean norm of a linear
    map of ``x* - x``, weighted "minkowski" is the plain one of a diagonal map, and "minkowski"
    with ``p=inf`` is "chebyshev"; a callable gets ``metric_params`` as keyword arguments, as
    scikit-learn passes them."""
    params = dict(metric_params or {})
    if callable(metric):
        if params:
            import functools

            return functools.partial(metric, **params), p
        return metric, p
    allowed = METRIC_PARAMS.get(metric, ())
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"metric_params for metric={metric!r} takes "
                         f"{'the keys ' + str(list(allowed)) if allowed else 'no parameters'}, got {unknown}")
    if metric in LINEAR_METRICS:
        return "euclidean", 2
    if metric == "minkowski" and p == np.inf:
        if "w" in params:
            raise ValueError("metric_params={'w': ...} weighs a minkowski metric of finite p; with p=inf give "
                             "the weights as a scaling of the features")
        return "chebyshev", 2
    return metric, p


class MetricMap:
    """The linear map ``x -> x A`` under which a metric is a plain norm: ``A`` diagonal
    (``scale``, one factor per feature) or a full matrix.

    * "seuclidean" (``V``: the variances): ``d^2 = sum_k (a_k - b_k)^2 / V_k``, so ``A = diag(V^-1/2)``;
    * "mahalanobis" (``VI``: the inverse covariance): ``d^2 = (a - b)^T VI (a - b) = |A^T (a - b)|^2``
      with ``VI = A A^T``, ``A = Q diag(lam)^(1/2)`` from its eigendecomposition (positive
      semi-definite ``VI``, such as the pseudo-inverse of a singular covariance, too: the
      directions of ``lam = 0`` are dropped, so ``A`` may have fewer columns than features);
    * weighted "minkowski" (``w``): ``d^p = sum_k w_k |a_k - b_k|^p``, so ``A = diag(w^(1/p))``.
    """

    def __init__(self, scale=None, matrix=None):
        self.scale, self.matrix = scale, matrix

    def transform(self, X):
        """``X A`` in ``X``'s dtype."""
        Y = X * self.scale if self.matrix is None else X @ self.matrix
        return np.asarray(Y, dtype=X.dtype)


def _param_array(params, key, shape, metric):
    a = np.asarray(params[key], dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"metric_params[{key!r}] for metric={metric!r} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"metric_params[{key!r}] for metric={metric!r} must be finite")
    return a


def _frequency_covariance(X, sample_weight):
    """The samples' covariance with ``sample_weight`` read as counts of repeated rows,
    ``sum_i c_i (x_i - m)(x_i - m)^T / (sum c - 1)`` (``np.cov`` with ddof=1 without weights), and
    ``sum c``; None for the covariance where ``sum c <= 1``."""
    c = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = c.sum()
    if not total > 1:  # no (co)variance: the caller refuses it by name
        return None, total
    Xc = X - (c @ X) / total
    return (Xc * c[:, None]).T @ Xc / (total - 1.0), total


def metric_map(metric, p, metric_params, samples, sample_weight=None):
    """The :class:`MetricMap` under which ``metric`` (with ``metric_params``) is the norm of
    :func:`effective_metric`, or None where no map is needed.

    Without ``V`` (``VI``) the samples' variances, ddof=1 (the pseudo-inverse of their covariance)
    are taken, with ``sample_weight`` as counts of repeated rows, fixed at fit, so that the
    metric does not depend on the queries (scikit-learn's brute-force search pools the queries
    with the samples; give ``V`` or ``VI`` to match it)."""
    params = dict(metric_params or {})
    if callable(metric) or metric not in METRIC_PARAMS:
        return None
    if metric == "minkowski" and "w" not in params:
        return None
    X = np.asarray(samples, dtype=np.float64)
    d = X.shape[1]
    cov = None
    if metric in LINEAR_METRICS and not params:
        cov, total = _frequency_covariance(X, sample_weight)
        if not total > 1:
            raise ValueError(f"metric={metric!r} without metric_params takes the samples' (co)variances, which need "
                             f"more than one sample (a total sample_weight > 1), got n_samples={X.shape[0]}")
    if metric == "seuclidean":
        V = _param_array(params, "V", (d,), metric) if "V" in params else np.diag(cov).copy()
        if not np.all(V > 0):
            raise ValueError(f"metric='seuclidean' divides by the variances V, which must all be > 0 "
                             f"(metric_params['V'], or the samples' own when not given), got {V}")
        return MetricMap(scale=1.0 / np.sqrt(V))
    if metric == "mahalanobis":
        # VI = Q diag(lam) Q^T = A A^T with A = Q diag(sqrt(lam)): d^2 = |A^T dx|^2, any VI >= 0
        # (the default, the pseudo-inverse of a singular covariance, is positive semi-definite)
        VI = (_param_array(params, "VI", (d, d), metric) if "VI" in params
              else np.linalg.pinv(cov, hermitian=True))
        scale = np.max(np.abs(VI), initial=0.0)
        if not np.allclose(VI, VI.T, rtol=1e-10, atol=1e-12 * scale):
            raise ValueError("metric_params['VI'] for metric='mahalanobis' must be symmetric")
        lam, Q = np.linalg.eigh(0.5 * (VI + VI.T))
        if np.any(lam < -1e-10 * scale):
            raise ValueError("metric_params['VI'] for metric='mahalanobis' must be positive semi-definite (the "
                             f"inverse of a covariance matrix); its smallest eigenvalue is {lam.min():.3g}")
        # directions VI ignores (lam = 0: the null space of a singular covariance) carry no
        # distance: dropped, so that no mapped feature is constant (a rule's bandwidth would be 0)
        keep = lam > 1e-12 * max(float(lam.max(initial=0.0)), np.finfo(np.float64).tiny)
        keep[np.argmax(lam)] = True
        return MetricMap(matrix=Q[:, keep] * np.sqrt(lam[keep]))
    w = _param_array(params, "w", (d,), metric)
    if not np.all(w >= 0):
        raise ValueError(f"metric_params['w'] for metric='minkowski' must be >= 0, got {w}")
    return MetricMap(scale=w ** (1.0 / p))


def product_of(factors):
    """The product kernel of ``factors`` (a single factor as it is)."""
    return factors[0] if len(factors) == 1 else ProductKernel(factors)
