"""Kernel profiles ``k(u)`` of a scaled distance ``u = d(x*, x) / h``, in log-space.

Every profile is stored as ``log k`` so that the engine can stream weights with an online
log-sum-exp. Compact profiles vanish outside ``u <= 1`` (``log k = -inf``); the uniform profile
includes its boundary (``u <= 1``), so that a kNN bandwidth keeps the k-th neighbour.

=============  ===========================  =========
name           k(u)                          support
=============  ===========================  =========
gaussian       exp(-u^2 / 2)                 all u
epanechnikov   1 - u^2                       u <= 1
tricube        (1 - u^3)^3                   u <= 1
biweight       (1 - u^2)^2                   u <= 1
triweight      (1 - u^2)^3                   u <= 1
triangular     1 - u                         u <= 1
uniform        1                             u <= 1
cosine         cos(pi u / 2)                 u <= 1
laplacian      exp(-u)                       all u
cauchy         1 / (1 + u^2)                 all u
parzen         1 - 6u^2 + 6u^3 (u <= 1/2),   u <= 1
               2 (1 - u)^3 (1/2 < u)
=============  ===========================  =========

The Parzen profile is Stata's ``parzen`` kernel (and R's ``density(kernel=)`` has none): the cubic
B-spline, ``(4/3) k(|u|)`` its 1-D density.

The ``softmax`` kernel ``exp(<x*, x> / h)`` is not a profile of a distance; it is handled by
:class:`localkit.Kernel` directly.
"""
from __future__ import annotations

import builtins
import functools
import math
import types
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

# Each profile is stated ONCE below, as ``log k`` of the squared scaled distance ``u2``, written
# against an array namespace called ``xp`` that is not bound here: :meth:`Profile.log_k_for`
# re-binds the very same code to NumPy, to PyTorch (``torch``) or to numba (scalar, compiled).
# Non-smooth branches take safe inputs (the "double where"), so that autograd sends no NaN
# back from ``-inf`` log-weights outside a compact support or from ``sqrt`` at ``u = 0``; the
# supports are open (``k(1) = 0`` anyway) except the uniform profile's.


def _special():
    """scipy.special, imported where a normaliser or a radius needs it: localkit.nn imports the
    profiles without it (scipy.special and scipy.integrate take ~1.2 s to import)."""
    import scipy.special

    return scipy.special


def _safe_sqrt(u2):
    positive = u2 > 0
    return xp.where(positive, xp.sqrt(xp.where(positive, u2, 1.0)), 0.0)  # noqa: F821 (xp re-bound)


def _host_sqrt(u2):
    """:func:`_safe_sqrt` on NumPy, which has no gradient to guard at 0: ``sqrt(max(u2, 0))`` (NaN
    to 0 as there) in two passes where the guarded form takes four (a Laplacian dense pass of
    2,000 x 100,000 pairs: 0.47 s of its 1.1 s)."""
    r = np.fmax(u2, 0.0)
    return np.sqrt(r, out=r) if isinstance(r, np.ndarray) else np.sqrt(r)


def _log_poly_a2_b1(u2):  # 1 - u^2
    inside = u2 < 1.0
    return xp.where(inside, xp.log1p(-xp.where(inside, u2, 0.0)), -math.inf)  # noqa: F821


def _log_poly_a2_b2(u2):  # (1 - u^2)^2
    inside = u2 < 1.0
    return xp.where(inside, 2.0 * xp.log1p(-xp.where(inside, u2, 0.0)), -math.inf)  # noqa: F821


def _log_poly_a2_b3(u2):  # (1 - u^2)^3
    inside = u2 < 1.0
    return xp.where(inside, 3.0 * xp.log1p(-xp.where(inside, u2, 0.0)), -math.inf)  # noqa: F821


def _log_tricube(u2):  # (1 - u^3)^3
    inside = u2 < 1.0
    t = xp.where(inside, u2, 0.0)  # noqa: F821
    return xp.where(inside, 3.0 * xp.log1p(-t * _safe_sqrt(t)), -math.inf)  # noqa: F821


def _log_triangular(u2):  # 1 - u
    inside = u2 < 1.0
    return xp.where(inside, xp.log1p(-_safe_sqrt(xp.where(inside, u2, 0.0))), -math.inf)  # noqa: F821


def _log_uniform(u2):  # 1 on the closed support u <= 1, so a kNN bandwidth keeps the k-th neighbour
    return xp.where(u2 <= 1.0, 0.0 * u2, -math.inf)  # noqa: F821


def _log_cosine(u2):  # cos(pi u / 2)
    inside = u2 < 1.0
    return xp.where(inside, xp.log(xp.cos(0.5 * math.pi * _safe_sqrt(xp.where(inside, u2, 0.0)))),  # noqa: F821
                    -math.inf)


def _log_gaussian(u2):  # exp(-u^2 / 2)
    return -0.5 * u2


def _log_laplacian(u2):  # exp(-u)
    return -_safe_sqrt(u2)


def _log_cauchy(u2):  # 1 / (1 + u^2)
    return -xp.log1p(u2)  # noqa: F821


def _k_parzen(u2):  # 1 - 6u^2 + 6u^3 for u <= 1/2, 2 (1 - u)^3 for 1/2 < u < 1, 0 beyond
    inside = u2 < 1.0
    u = _safe_sqrt(xp.where(inside, u2, 0.0))  # noqa: F821
    near = 1.0 - 6.0 * u * u + 6.0 * u * u * u
    far = 1.0 - u
    return xp.where(inside, xp.where(u <= 0.5, near, 2.0 * far * far * far), 0.0)  # noqa: F821


def _log_parzen(u2):
    k = _k_parzen(u2)
    positive = k > 0.0
    return xp.where(positive, xp.log(xp.where(positive, k, 1.0)), -math.inf)  # noqa: F821


# The weights ``k(u2)`` themselves, without ``log``/``exp`` where a direct form exists, for the passes
# that sum weights without a log-space shift (the compiled compact pass, the fused LOESS windows).
# The polynomial profiles share one statement, ``(1 - u^a)^b``.


def _ipow(x, n):  # x^n by n products (n a small int), the same bits in every namespace
    r = 1.0
    for _ in range(n):
        r = r * x
    return r


def _poly(u2, a, b):  # (1 - u^a)^b on the closed support u <= 1 (the uniform, b = 0, keeps its edge), 0 beyond
    inside = u2 <= 1.0
    t = xp.where(inside, u2, 1.0)  # noqa: F821
    ua = _ipow(t, a // 2)  # u^a from u^2: a square root only for odd a
    if a % 2:
        ua = ua * xp.sqrt(t)  # noqa: F821
    return xp.where(inside, _ipow(1.0 - ua, b), 0.0)  # noqa: F821


def _k_cosine(u2):  # cos(pi u / 2)
    inside = u2 < 1.0
    return xp.where(inside, xp.cos(0.5 * math.pi * xp.sqrt(xp.where(inside, u2, 0.0))), 0.0)  # noqa: F821


def _k_gaussian(u2):  # exp(-u^2 / 2)
    return xp.exp(-0.5 * u2)  # noqa: F821


def _k_laplacian(u2):  # exp(-u): one exp, no log
    return xp.exp(-xp.sqrt(u2))  # noqa: F821


def _k_cauchy(u2):  # 1 / (1 + u^2): neither exp nor log
    return 1.0 / (1.0 + u2)


# The slope ``d log k / d u2`` of each statement, for kernels that write their own backward pass
# (the Triton attention kernel): zero outside a compact support and, where the statement takes
# ``sqrt`` through ``_safe_sqrt``, zero at ``u = 0``, exactly as autograd of the statement gives
# (tested against it). ``_inside_or_zero`` keeps the division off the support's edge and outside.


def _inside_or_zero(u2, slope_inside):
    inside = (u2 > 0) & (u2 < 1.0)
    return xp.where(inside, slope_inside(xp.where(inside, u2, 0.5)), 0.0 * u2)  # noqa: F821


def _slope_poly_a2_b1(u2):
    inside = u2 < 1.0
    return xp.where(inside, -1.0 / (1.0 - xp.where(inside, u2, 0.0)), 0.0 * u2)  # noqa: F821


def _slope_poly_a2_b2(u2):
    return 2.0 * _slope_poly_a2_b1(u2)


def _slope_poly_a2_b3(u2):
    return 3.0 * _slope_poly_a2_b1(u2)


def _slope_tricube_inside(t):  # d/dt 3 log(1 - t^(3/2))
    s = xp.sqrt(t)  # noqa: F821
    return -4.5 * s / (1.0 - t * s)


def _slope_tricube(u2):
    return _inside_or_zero(u2, _slope_tricube_inside)


def _slope_triangular_inside(t):  # d/dt log(1 - t^(1/2))
    s = xp.sqrt(t)  # noqa: F821
    return -0.5 / (s * (1.0 - s))


def _slope_triangular(u2):
    return _inside_or_zero(u2, _slope_triangular_inside)


def _slope_uniform(u2):
    return 0.0 * u2


def _slope_cosine_inside(t):  # d/dt log cos(pi sqrt(t) / 2) = -(pi / 4) tan(pi sqrt(t) / 2) / sqrt(t)
    a = 0.5 * math.pi * xp.sqrt(t)  # noqa: F821
    return -0.25 * math.pi * xp.sin(a) / (xp.cos(a) * xp.sqrt(t))  # noqa: F821


def _slope_cosine(u2):
    return _inside_or_zero(u2, _slope_cosine_inside)


def _slope_gaussian(u2):
    return -0.5 + 0.0 * u2


def _slope_laplacian(u2):  # d(-u)/du2 = -1 / (2u)
    positive = u2 > 0
    return xp.where(positive, -0.5 / xp.sqrt(xp.where(positive, u2, 1.0)), 0.0 * u2)  # noqa: F821


def _slope_cauchy(u2):
    return -1.0 / (1.0 + u2)


def _slope_parzen_inside(t):  # d/dt log k(sqrt(t)) = k'(u) / (2 u k(u))
    u = xp.sqrt(t)  # noqa: F821
    near = (-12.0 + 18.0 * u) / (2.0 * (1.0 - 6.0 * t + 6.0 * t * u))
    far = -3.0 / (2.0 * u * (1.0 - u))
    return xp.where(u <= 0.5, near, far)  # noqa: F821


def _slope_parzen(u2):
    return _inside_or_zero(u2, _slope_parzen_inside)


_STATEMENTS = (_safe_sqrt, _log_poly_a2_b1, _log_poly_a2_b2, _log_poly_a2_b3, _log_tricube, _log_triangular,
               _log_uniform, _log_cosine, _log_gaussian, _log_laplacian, _log_cauchy,
               _ipow, _poly, _k_cosine, _k_gaussian, _k_laplacian, _k_cauchy,
               _inside_or_zero, _slope_poly_a2_b1, _slope_poly_a2_b2, _slope_poly_a2_b3, _slope_tricube_inside,
               _slope_tricube, _slope_triangular_inside, _slope_triangular, _slope_uniform, _slope_cosine_inside,
               _slope_cosine, _slope_gaussian, _slope_laplacian, _slope_cauchy, _k_parzen, _log_parzen,
               _slope_parzen_inside, _slope_parzen)


@functools.lru_cache(maxsize=None)
def _rebind(func, namespace, compile_with=None):
    """``func`` with the global ``xp`` bound to ``namespace`` (and its helpers re-bound alike).

    Cached: one function object per (statement, namespace), so that ``torch.compile`` guards on
    a ``score_mod`` that calls it see the same object each time and do not recompile."""
    # a namespace may add globals its compiler needs (Triton: a module ``__name__`` for its JIT's
    # names, ``triton.language`` for its interpreter)
    env = {"__builtins__": builtins, "math": math, "xp": namespace, **getattr(namespace, "REBIND_GLOBALS", {})}
    for helper in _STATEMENTS:
        env[helper.__name__] = None
    for helper in _STATEMENTS:
        bound = types.FunctionType(helper.__code__, env, helper.__name__)
        env[helper.__name__] = compile_with(bound) if compile_with else bound
    if namespace is np:
        env["_safe_sqrt"] = _host_sqrt
    return env[func.__name__]


@dataclass(frozen=True)
class Profile:
    """A radial profile ``k(u)``, stated once as ``log k`` of ``u2 = u^2`` (see the module notes).

    ``log_k`` evaluates it on NumPy arrays; :meth:`log_k_for` on another namespace (``torch``, or
    Triton's through :mod:`localkit.fused.triton_namespace`); :meth:`k` and :attr:`compiled_k`
    (numba, one float: the compiled compact pass) give ``k`` itself, without ``log``/``exp`` where
    a direct form exists; :meth:`slope_for` gives ``d log k / d u2``, stated beside ``log k`` for
    kernels that write their own backward pass (tested against autograd).
    """

    name: str
    statement: Callable = field(repr=False)
    compact: bool = False
    # log int_0^inf k(r) r^(d-1) dr, in log space: the integral itself overflows for large d (the
    # gaussian's 2^(d/2-1) Gamma(d/2) from d = 343, the laplacian's Gamma(d) from d = 172)
    log_radial_moment: Callable[[int], float] = field(default=None, repr=False)
    # True for profiles with a kink at u = 0 (linear in u there): the matrix-product form of
    # |q - x|^2 carries an absolute error ~1e-16 |x|^2 whose square root (~1e-8) they would show
    exact_distance: bool = False
    # ``(a, b)`` for the profiles of the form ``(1 - u^a)^b`` (uniform: b = 0): the closed-form
    # moments of the local polynomial's kernels use it
    poly: tuple | None = None
    # a polynomial tail ``k(u) ~ u^-2`` keeps relative weights when ``u^2`` overflows:
    # ``log k(2^e t) = -log(2^-e + t) - e log 2`` (only the Cauchy profile has one)
    polynomial_tail: bool = False
    # ``d log k / d u2``, stated beside ``log k`` (kernels that write their own backward pass)
    slope: Callable = field(default=None, repr=False)
    # True for ``log k(u2) = -u2 / 2`` exactly (the Gaussian): the log-weight is linear in u2, so it
    # is an inner product of augmented points (``(q.x - |x|^2/2 - |q|^2/2) / h^2``, one matrix
    # product; coordinates scaled by ``sqrt(log2 e)`` give it in base 2), its slope is the constant
    # -1/2, a product of per-feature kernels is the same profile of the joint distance, and normal
    # offsets sample it
    log_linear: bool = False
    # ``k(u2)`` itself (see ``_k_cosine``), for the profiles that are not ``(1 - u^a)^b`` (those
    # share ``_poly``): the passes that sum weights without a log-space shift use it
    direct: Callable = field(default=None, repr=False)
    # ``(d, U) -> r``: the quantile function of the radius of density ``r^{d-1} k(r)`` where a
    # closed form exists beyond those of ``poly`` and ``log_linear`` (None in dimensions it does
    # not cover): what sampling from a density of this profile draws
    radius_quantile: Callable = field(default=None, repr=False)

    def log_k_scaled(self, t, exponent):
        """``(L, c)`` with ``log k(2^exponent t) = L + c`` (``c`` the same for every ``t``), for
        squared distances ``t`` stored divided by ``2^exponent`` (extreme bandwidths)."""
        if exponent <= 0 or not self.polynomial_tail:
            with np.errstate(over="ignore"):
                return self.log_k(np.ldexp(t, exponent)), 0.0
        # 2^-e, kept above 0 so that a coinciding sample (t = 0) outweighs all others, finitely
        floor = np.maximum(np.ldexp(t.dtype.type(1.0), -exponent), np.finfo(t.dtype).smallest_subnormal)
        return -np.log(floor + t), -exponent * math.log(2.0)

    @cached_property
    def smooth(self):
        """``log k`` is differentiable everywhere: no support's edge (not compact) and no kink at
        ``u = 0`` (not ``exact_distance``), so that errors through the weights have a gradient."""
        return not self.compact and not self.exact_distance

    @cached_property
    def log_k0(self):
        """``log k(0)``, the weight of a sample at the query's point."""
        return float(self.log_k(np.zeros(1))[0])

    @cached_property
    def vanishes_at_edge(self):
        """A compact profile with ``k(1) = 0`` (every one but the uniform): with a kNN bandwidth
        the samples tied with the k-th neighbour weigh nothing, and when that neighbour is at
        distance 0 every sample there weighs ``k(0)`` (the limit ``h -> 0``; see
        :func:`localkit.engine.passes.neighbors.coincident`). The uniform profile keeps exactly ``k``
        samples, as scikit-learn's ``KNeighborsRegressor`` does."""
        return self.compact and bool(np.isneginf(self.log_k(np.ones(1)))[0])

    @cached_property
    def flat(self):
        """The uniform profile, ``k = 1`` on its support and a jump to 0 at its edge: as a kernel in
        position (a window) it only selects pairs and adds no log-weight, and the passes decide its
        edge by the exact test ``|q - x|^2 <= h^2``. Known by its statement, never by probing: a
        user's ``log k`` finite at ``u = 1`` (``log cos(pi u / 2)`` is -37 there) or flat at a few
        points is computed as the profile it states."""
        return self.statement is _log_uniform

    def truncation_radius(self, u0, log_ratio):
        """The squared scaled radius ``u_r^2`` (per query) where the profile has fallen
        ``log_ratio`` (< 0) below its value at the scaled distance ``u0``:
        ``log k(u_r^2) <= log k(u0^2) + log_ratio``, found by doubling then bisection (profiles fall
        with ``u``). The samples beyond ``u_r`` of a query whose nearest sample lies within ``u0``
        weigh at most ``exp(log_ratio)`` of that sample each: a truncated sum's omitted weight."""
        u0 = np.asarray(u0, dtype=np.float64)
        target = self.log_k(u0 * u0) + log_ratio
        lo, hi = u0 * u0, np.maximum(2.0 * u0 * u0, 1.0)
        for _ in range(64):  # hi past the target, then bisect
            short = self.log_k(hi) > target
            if not short.any():
                break
            hi = np.where(short, 2.0 * hi, hi)
        for _ in range(48):
            mid = 0.5 * (lo + hi)
            above = self.log_k(mid) > target
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        return hi

    def log_k(self, u2):
        """``log k`` of the squared scaled distance (NumPy)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return _numpy_statement(self.statement)(np.asarray(u2))

    def log_k_for(self, namespace, compile_with=None):
        """The same statement with ``xp`` bound to ``namespace`` (e.g. ``torch``), each function
        passed through ``compile_with`` if given (``triton.jit`` for Triton kernels)."""
        return _rebind(self.statement, namespace, compile_with)

    def slope_for(self, namespace, compile_with=None):
        """``d log k / d u2`` with ``xp`` bound to ``namespace`` (zero outside the support)."""
        if self.slope is None:
            raise ValueError(f"the profile {self.name!r} states no slope (Profile(..., slope=...)); "
                             "kernels with their own backward pass need d log k / d u2")
        return _rebind(self.slope, namespace, compile_with)

    def k_for(self, namespace, compile_with):
        """``k(u2)`` from the direct statement (``(1 - u^a)^b`` by products and at most one square
        root; a profile stated only as ``log k`` through ``exp``) with ``xp`` bound to ``namespace``,
        each function compiled by ``compile_with``."""
        if self.poly is None and self.direct is None:  # a profile stated only as log k
            log_k, exp = _rebind(self.statement, namespace, compile_with), namespace.exp
            return compile_with(lambda u2: exp(log_k(u2)))
        if self.poly is None:
            return _rebind(self.direct, namespace, compile_with)
        a, b = self.poly
        poly = _rebind(_poly, namespace, compile_with)
        return compile_with(lambda u2: poly(u2, a, b))

    @cached_property
    def compiled_k(self):
        """``k(u2)`` of one float, compiled by numba (:meth:`k_for` on ``math``), so that a pass
        summing weights pays no ``log``/``exp``: the compiled compact pass."""
        return self.k_for(_scalar_namespace(), _scalar_njit())

    def k(self, u2):
        """``k`` of the squared scaled distance (NumPy), from the direct statement."""
        u2 = np.asarray(u2)
        if self.poly is None and self.direct is None:  # a profile stated only as log k
            return np.exp(self.log_k(u2))
        if self.poly is None:
            return _numpy_statement(self.direct)(u2)
        return _numpy_statement(_poly)(u2, *self.poly)

    def log_normalizer(self, d):
        """``log c_d`` with ``c_d = int_{R^d} k(|u|) du``, the density normaliser in d dims:

        ``log c_d = log |S^(d-1)| + log int_0^inf k(r) r^(d-1) dr``, with the sphere's area
        ``|S^(d-1)| = 2 pi^(d/2) / Gamma(d/2)``; both terms in log space, so any d is finite.
        """
        log_moment = self.log_radial_moment(d)
        if not np.isfinite(log_moment):
            raise ValueError(
                f"the {self.name!r} profile is not integrable in {d} dimensions, so it has "
                "no normalised density there; choose another kernel"
            )
        log_sphere = np.log(2.0) + 0.5 * d * np.log(np.pi) - _special().gammaln(0.5 * d)
        return float(log_sphere + log_moment)

    def __reduce__(self):  # pickle by name: the functions are module-level registry entries
        return get_profile, (self.name,)

    def __call__(self, u):
        """``k(u)`` for plotting and checks."""
        u = np.asarray(u, dtype=float)
        return np.exp(self.log_k(u * u))


@functools.cache
def _scalar_namespace():
    """The namespace that numba compiles the statements against: ``math`` on floats and a
    scalar ``where`` (NumPy's would allocate a 0-d array per call inside a compiled loop, 70x
    slower in the compiled compact pass)."""
    import numba

    @numba.njit(inline="always")
    def where(condition, a, b):
        return a if condition else b

    namespace = types.ModuleType("localkit_scalar_xp")
    namespace.where, namespace.log1p, namespace.log, namespace.exp = where, math.log1p, math.log, math.exp
    namespace.sqrt, namespace.cos, namespace.sin = math.sqrt, math.cos, math.sin
    return namespace


@functools.cache
def _scalar_njit():
    """One decorator object, so that :func:`_rebind`'s cache returns the same compiled functions."""
    import numba

    return numba.njit(cache=False, inline="always")


@functools.cache
def poly_compiled():
    """``(1 - u^a)^b`` of ``(u2, a, b)``, one float, compiled by numba (see ``_poly``): the
    statement that the compiled passes share (the compact pass, the fused LOESS windows). Given
    ``u2 = z * z`` it has the bits of ``(1 - |z|^a)^b`` by products (``sqrt(z * z) = |z|``)."""
    return _rebind(_poly, _scalar_namespace(), _scalar_njit())


_NUMPY_CACHE = {}


def _numpy_statement(statement):
    if statement not in _NUMPY_CACHE:
        _NUMPY_CACHE[statement] = _rebind(statement, np)
    return _NUMPY_CACHE[statement]


def _poly_log_moment(a, b):
    # int_0^1 (1 - r^a)^b r^(d-1) dr = B(d/a, b+1) / a
    return lambda d: float(_special().betaln(d / a, b + 1) - math.log(a))


def _poly_profile(name, statement, slope, a, b, **kwargs):
    return Profile(name, statement, True, _poly_log_moment(a, b), poly=(a, b), slope=slope, **kwargs)


def _cosine_log_moment(d):
    # int_0^1 cos(pi r / 2) r^(d-1) dr ~ pi / (2 d^2): small, never below the float range
    from scipy import integrate

    return math.log(integrate.quad(lambda r: np.cos(0.5 * np.pi * r) * r ** (d - 1), 0.0, 1.0)[0])


def _cauchy_log_moment(d):
    return math.log(0.5 * np.pi) if d == 1 else np.inf


def _parzen_log_moment(d):
    # int_0^1 k(r) r^(d-1) dr: on [0, 1/2] 2^-d (1/d - 3 / (2 (d + 2)) + 3 / (4 (d + 3))) (positive), on
    # [1/2, 1] 2 int (1 - r)^3 r^(d-1) = 2 B(d, 4) I_{1/2}(4, d) (no cancellation in high d); in log space
    inner = -d * math.log(2.0) + math.log(1.0 / d - 1.5 / (d + 2) + 0.75 / (d + 3))
    outer = math.log(2.0) + _special().betaln(d, 4) + math.log(_special().betainc(4, d, 0.5))
    return float(np.logaddexp(inner, outer))


def _laplacian_radius(d, U):  # r^{d-1} e^{-r}: r is Gamma(d)
    return _special().gammaincinv(d, U)


def _cauchy_radius(d, U):  # 1 / (1 + r^2) in 1-D: r = tan(pi U / 2); no finite mass beyond d = 1
    return np.tan(0.5 * np.pi * U) if d == 1 else None


PROFILES = {
    p.name: p
    for p in [
        Profile("gaussian", _log_gaussian, False, lambda d: (0.5 * d - 1) * math.log(2.0) + _special().gammaln(0.5 * d),
                slope=_slope_gaussian, direct=_k_gaussian, log_linear=True),
        _poly_profile("epanechnikov", _log_poly_a2_b1, _slope_poly_a2_b1, 2, 1),
        _poly_profile("tricube", _log_tricube, _slope_tricube, 3, 3),
        _poly_profile("biweight", _log_poly_a2_b2, _slope_poly_a2_b2, 2, 2),
        _poly_profile("triweight", _log_poly_a2_b3, _slope_poly_a2_b3, 2, 3),
        _poly_profile("triangular", _log_triangular, _slope_triangular, 1, 1, exact_distance=True),
        _poly_profile("uniform", _log_uniform, _slope_uniform, 2, 0),
        Profile("cosine", _log_cosine, True, _cosine_log_moment, slope=_slope_cosine, direct=_k_cosine),
        Profile("laplacian", _log_laplacian, False, lambda d: _special().gammaln(d), exact_distance=True,
                slope=_slope_laplacian, direct=_k_laplacian, radius_quantile=_laplacian_radius),
        Profile("cauchy", _log_cauchy, False, _cauchy_log_moment, polynomial_tail=True, slope=_slope_cauchy,
                direct=_k_cauchy, radius_quantile=_cauchy_radius),
        Profile("parzen", _log_parzen, True, _parzen_log_moment, slope=_slope_parzen, direct=_k_parzen),
    ]
}

#: Aliases accepted for scikit-learn's kernel names.
ALIASES = {"tophat": "uniform", "flat": "uniform", "exponential": "laplacian", "linear": "triangular",
           "quartic": "biweight", "rbf": "gaussian"}

KERNEL_NAMES = tuple(PROFILES) + ("softmax",)


def inner_product(kernel):
    """Whether the log-weight of ``kernel`` (``"softmax"`` or a profile's name) is a scaled inner
    product ``c <q, k>`` plus a key bias (the row terms cancel in the normalisation): the softmax,
    and the profiles of that form (:attr:`Profile.log_linear`: the Gaussian's
    ``c (<q, k> - |k|^2 / 2)``). Those run through softmax kernels (SDPA, FlexAttention without
    ``score_mod``)."""
    return kernel == "softmax" or (isinstance(kernel, str) and PROFILES[kernel].log_linear)


def get_profile(name, support=None):
    """The :class:`Profile` called ``name`` (aliases such as ``"tophat"`` accepted), or the
    :class:`UserProfile` of a callable ``log_k(u2, xp)`` with its ``support`` (None or 1.0)."""
    if callable(name) and not isinstance(name, (str, Profile)):
        return user_profile(name, support)
    if isinstance(name, UserProfile):
        return name
    if not isinstance(name, str):
        raise TypeError(f"kernel must be a string naming a profile or a callable log_k(u2, xp), got {name!r}")
    if support is not None:
        raise ValueError(f"support is given with a user profile (a callable log_k(u2, xp)) only; the profile "
                         f"{name!r} states its own, got support={support!r}")
    key = ALIASES.get(name, name)
    if key not in PROFILES:
        raise ValueError(
            f"kernel must be one of {sorted(KERNEL_NAMES)} (or an alias {sorted(ALIASES)}), got {name!r}"
        )
    return PROFILES[key]


# -- a profile the user writes: ``log_k(u2, xp)``, a callable against the namespace it is handed ----
#: where a user profile is probed at construction (its support, or [0, 4] for an unbounded one):
#: a wrong shape, NaN or +inf is refused there, before any engine pass
_PROBE = np.linspace(0.0, 1.0, 17)


@functools.lru_cache(maxsize=None)
def _user_statement(log_k, compact, closed, namespace, offset=0.0):
    """``log k(u2) - offset`` of a user profile bound to ``namespace`` (``offset = log k(0)``, so
    that ``k(0) = 1`` as for every built-in profile: ``log k`` is defined up to a constant, which
    must change no local mean, and the passes take ``log k(0) = 0`` as the scale of their weights).
    On a compact support the user's function sees only ``u2`` inside it (the "double where", so
    that autograd sends no NaN back from outside) and ``-inf`` stands beyond it. A NaN returned at
    run time (where the construction's probe did not look) raises, in every eager evaluation (a
    ``torch.compile`` trace is not checked: the test would break its graph). Cached per namespace,
    as :func:`_rebind` is."""
    def statement(u2):
        if not compact:
            out = log_k(u2, namespace)
        else:
            inside = u2 <= 1.0 if closed else u2 < 1.0
            out = namespace.where(inside, log_k(namespace.where(inside, u2, 0.0), namespace), -math.inf)
        if tuple(out.shape) != tuple(u2.shape):
            raise ValueError(f"the user profile {_callable_name(log_k)} returned shape {tuple(out.shape)} for u2 of "
                             f"shape {tuple(u2.shape)}: log_k(u2, xp) must act elementwise")
        _refuse_nan(log_k, namespace, u2, out)
        return out - offset if offset else out

    return statement


def _refuse_nan(log_k, namespace, u2, out):
    compiler = getattr(namespace, "compiler", None)  # torch's: a trace is not checked
    if compiler is not None and compiler.is_compiling():
        return
    nan = namespace.isnan(out)
    if bool(namespace.any(nan)):
        bad = np.unique(np.asarray(u2[nan].detach().cpu() if hasattr(u2, "detach") else u2[nan], dtype=np.float64))
        raise ValueError(f"kernel: the user profile {_callable_name(log_k)} returned NaN at u2 = {bad[:5].tolist()}"
                         f"{' ...' if len(bad) > 5 else ''}; log k must be a number or -inf (a zero weight) at every "
                         "u2 >= 0 (within its support)")


def _callable_name(log_k):
    return getattr(log_k, "__name__", type(log_k).__name__)


@dataclass(frozen=True)
class _NumericMoment:
    """``log int_0^S k(r) r^(d-1) dr`` of a user profile by quadrature (``S`` = 1 or infinity),
    the density normaliser's radial integral (:meth:`Profile.log_normalizer`)."""

    log_k: Callable
    compact: bool
    offset: float = 0.0  # the profile's log k(0), subtracted as the passes subtract it

    def __call__(self, d):
        def log_f(r):
            r = np.asarray(r, dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.asarray(self.log_k(r * r, np), dtype=np.float64) - self.offset + (d - 1) * np.log(r)

        grid = np.linspace(1e-6, 1.0, 257) if self.compact else np.geomspace(1e-6, 1e6, 513)
        shift = float(np.max(log_f(grid)))
        if not np.isfinite(shift):
            return np.inf
        from scipy import integrate

        with np.errstate(over="ignore", under="ignore"):
            value, _ = integrate.quad(lambda r: float(np.exp(log_f(np.array([r]))[0] - shift)), 0.0,
                                      1.0 if self.compact else np.inf, limit=200)
        return float(np.log(value) + shift) if 0 < value < np.inf else np.inf


@dataclass(frozen=True)
class UserProfile(Profile):
    """A profile the user states as ``log_k(u2, xp)``, a callable of the squared scaled distance
    written against the array namespace ``xp`` it is handed (NumPy, torch, or a dask block's
    NumPy), built by ``Kernel(log_k, support=...)``.

    ``support=1.0``: ``k`` vanishes for ``u > 1`` (``-inf`` stands there whatever ``log_k``
    returns, and ``log_k`` only sees ``u2`` inside); ``None``: no bound. It has no compiled form
    (numba, Triton, FlexAttention), no stated slope and no closed-form moments: the paths that
    need those refuse it, saying which; the density normaliser is integrated numerically.
    Distances are taken from differences (``exact_distance``), as for a profile with a kink.
    """

    support: float | None = None
    closed: bool = False
    # ``log k(0)`` as the user states it, subtracted from every evaluation (``k(0) = 1``)
    offset: float = 0.0
    is_user = True

    def log_k(self, u2):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self.log_k_for(np)(np.asarray(u2))

    def log_k_for(self, namespace, compile_with=None):
        if compile_with is not None:
            raise ValueError(f"the user profile {self.name!r} (a callable log_k(u2, xp)) has no compiled form: "
                             "compiled paths (numba, Triton) need a built-in profile")
        return _user_statement(self.statement, self.compact, self.closed, namespace, self.offset)

    @property
    def compiled_k(self):
        raise ValueError(f"the user profile {self.name!r} (a callable log_k(u2, xp)) has no compiled (numba) form: "
                         "the compiled compact pass needs a built-in profile; algorithm='dense' takes it")

    def slope_for(self, namespace, compile_with=None):
        raise ValueError(f"the user profile {self.name!r} (a callable log_k(u2, xp)) states no slope "
                         "d log k / d u2: paths with their own backward pass (the Triton attention kernel, the "
                         "reconstruction gradient) need a built-in profile")

    def __reduce__(self):
        return user_profile, (self.statement, self.support)

    def __repr__(self):
        return f"UserProfile({self.name}, support={self.support!r})"


Profile.is_user = False


def user_profile(log_k, support=None):
    """The :class:`UserProfile` of ``log_k(u2, xp)``, checked: ``log_k`` callable, ``support``
    None or 1.0, and on a probe of ``u2`` over the support (``[0, 4]`` for an unbounded profile,
    NumPy) an array of ``u2``'s shape without NaN or ``+inf``, finite at ``u2 = 0`` (``k(0) > 0``)."""
    if not callable(log_k) or isinstance(log_k, type):
        raise TypeError(f"kernel must be a profile name or a callable log_k(u2, xp), got {log_k!r}")
    if support is not None:
        if isinstance(support, bool) or not isinstance(support, (int, float, np.number)) or float(support) != 1.0:
            raise ValueError(f"support must be None (no bound) or 1.0 (k vanishes for u > 1; the bandwidth sets the "
                             f"radius: rescale the profile rather than the support), got {support!r}")
        support = 1.0
    name = _callable_name(log_k)
    probe = _PROBE if support is not None else 4.0 * _PROBE
    try:
        with np.errstate(all="ignore"):
            out = log_k(probe.copy(), np)
    except Exception as exc:
        raise TypeError(f"kernel: the user profile {name} must be a callable log_k(u2, xp) of the squared scaled "
                        f"distance u2 (an array) and the array namespace xp; calling it on NumPy arrays raised "
                        f"{type(exc).__name__}: {exc}") from exc
    if not hasattr(out, "shape") or tuple(np.shape(out)) != probe.shape:
        raise ValueError(f"kernel: the user profile {name} must return an array of the shape of u2, elementwise; "
                         f"for u2 of shape {probe.shape} it returned {type(out).__name__} of shape "
                         f"{tuple(np.shape(out))}")
    out = np.asarray(out)
    if not np.issubdtype(out.dtype, np.floating):
        raise ValueError(f"kernel: the user profile {name} must return floating log-weights, got dtype {out.dtype}")
    inside = out if support is None else out[:-1]  # u2 = 1 may be the edge of an open support
    if np.any(np.isnan(out)) or np.any(inside == np.inf):
        bad = probe[np.isnan(out) | (out == np.inf)]
        raise ValueError(f"kernel: the user profile {name} returned NaN or +inf at u2 = {bad.tolist()}; log k must "
                         "be a number or -inf (a zero weight) at every u2 >= 0 (within its support)")
    if not np.isfinite(out[0]):
        raise ValueError(f"kernel: the user profile {name} gives log k(0) = {out[0]}: a sample at the query's point "
                         "must weigh k(0) > 0")
    compact = support is not None
    offset = float(out[0])
    return UserProfile(name, log_k, compact, _NumericMoment(log_k, compact, offset), exact_distance=True,
                       support=support, closed=compact and bool(np.isfinite(out[-1])), offset=offset)
