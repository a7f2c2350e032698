"""``exp``, ``sin`` and ``cos`` in float32 that LLVM vectorises inside numba's loops.

numba lowers ``math.exp`` and ``math.cos`` to calls of the C library, one element at a time,
unless Intel's SVML is installed (it is not a dependency): a loop that calls them is not
vectorised. These are written in arithmetic, comparisons and one integer-to-float bit cast, all
of which LLVM vectorises: ``exp`` within one float32 ulp of the exact value, ``sin`` and ``cos``
within three (``tests/test_nn_compiled_cpu.py`` pins them). Measured on a 64 x 512 tile of the Laplacian
weights ``exp(-sqrt(u2))`` (one core, AVX-512): 0.29 ns per element against 3.0 ns with
``math.exp``.

:func:`namespace` binds them, with ``math.sqrt`` and a scalar ``where``, as the array namespace
``xp`` of the profiles' statements (:mod:`localkit.kernels.profiles`), so that the compiled CPU
attention pass forms every profile's weights and slopes from the same statements as every other
path.
"""
from __future__ import annotations

import functools
import math
import types

import numba
import numpy as np
from llvmlite import ir
from numba.core import types as nbtypes
from numba.extending import intrinsic

#: numba's fast-math flags for the vectorised loops and the functions below: contraction into FMA,
#: reciprocals, approximate functions. Not ``nnan``/``ninf``, because excluded pairs carry ``-inf``
#: log-weights; not reassociation, which would undo the split of ``ln 2`` and lets LLVM order a
#: loop's arithmetic differently in each copy it optimises (a loop's own machine code and its copy
#: linked into a pass that numba cached on disk gave different bits on an AVX-512 CPU). The
#: functions are compiled apart (not inlined in numba's IR); LLVM inlines them with their flags.
FAST = {"contract", "nsz", "arcp", "afn"}

#: ``exp`` is 0 below ``log`` of float32's smallest normal number (no subnormal results)
EXP_FLOOR = np.float32(-87.33654)
_LOG2E = np.float32(1.4426950408889634)
# ln 2 split in two (Cody and Waite): ``n ln2_hi`` is exact for |n| < 2^9
_LN2_HI, _LN2_LO = np.float32(0.693145751953125), np.float32(1.428606765330187e-06)


@intrinsic
def _pow2(typingctx, n):
    """``2^n`` of an int32 ``n`` in [-126, 127], as float32: the exponent bits ``(n + 127) << 23``."""
    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.shl(builder.add(args[0], ir.Constant(i32, 127)), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return nbtypes.float32(nbtypes.int32), codegen


@numba.njit(fastmath=FAST)
def exp(x):
    """``e^x`` in float32: ``x = n ln 2 + r`` with ``|r| <= ln 2 / 2``, ``e^r`` by its Taylor
    polynomial to ``r^7`` (truncation below 6e-9), times ``2^n``; 0 below :data:`EXP_FLOOR`,
    ``x`` above ``log`` of float32's largest number is not expected (profiles' weights are at most 1)."""
    x = np.float32(x)
    t = x if x > EXP_FLOOR else EXP_FLOOR
    n = np.floor(t * _LOG2E + np.float32(0.5))
    r = t - n * _LN2_HI - n * _LN2_LO
    p = np.float32(1.0 / 5040.0)
    for c in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = p * r + np.float32(c)
    y = p * _pow2(np.int32(n))
    return y if x >= EXP_FLOOR else np.float32(0.0)


@numba.njit(fastmath=FAST)
def sin(x):
    """``sin x`` in float32 for ``|x| <= pi / 2``: the odd Taylor polynomial to ``x^11``
    (truncation below 6e-8 at ``pi / 2``, relative; exact ratio near 0)."""
    x = np.float32(x)
    x2 = x * x
    p = np.float32(-1.0 / 39916800.0)
    for c in (1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0):
        p = p * x2 + np.float32(c)
    return p * x


@numba.njit(fastmath=FAST)
def cos(x):
    """``cos x = sin(pi / 2 - |x|)`` in float32 for ``|x| <= pi``, the difference taken in float64:
    relative accuracy kept near ``pi / 2``, where the cosine profile's weights vanish at its
    support's edge."""
    return sin(0.5 * math.pi - abs(np.float64(x)))


@functools.cache
def namespace():
    """The statements' array namespace ``xp`` for vectorised float32 loops: these ``exp``,
    ``sin``, ``cos``, ``math``'s ``sqrt``, ``log`` and ``log1p`` (not vectorised: the pass takes no
    logarithm on its fast path) and a scalar ``where`` that LLVM turns into a select."""
    @numba.njit(inline="always")
    def where(condition, a, b):
        return a if condition else b

    xp = types.ModuleType("localkit_vector_xp")
    xp.where, xp.exp, xp.sin, xp.cos = where, exp, sin, cos
    xp.sqrt, xp.log, xp.log1p = math.sqrt, math.log, math.log1p
    return xp
