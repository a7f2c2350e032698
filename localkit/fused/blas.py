"""A Fortran ``sgemm`` called from numba's compiled passes through its address.

numba's ``np.dot`` calls SciPy's OpenBLAS and allocates its result. The compiled attention pass
instead calls ``sgemm`` itself, accumulating into its own buffers (``beta = 1``), and takes MKL's
``sgemm_`` where PyTorch's CPU library exports it (Linux x86 wheels link MKL in): on the pass's
tile shapes (64 x 64 by 64 x 512, and 64 x 512 by 512 x 64, one core) MKL ran at 150-170
GFLOP/s against 100-120 for OpenBLAS through ``np.dot``. MKL is taken only under numba's OpenMP
threading layer, which it shares with PyTorch: called inside numba's parallel region it then
runs on one thread, as the tiles need. Elsewhere SciPy's ``sgemm`` (OpenBLAS, limited to one
thread by the caller) is called the same way.

The address is an argument of the compiled pass (an ``int``), not a constant in it, so that
numba caches the pass on disk. Integer arguments are passed in 64-bit cells holding the value,
which an LP64 (32-bit integers, little-endian) and an ILP64 ``sgemm`` both read correctly.
"""
from __future__ import annotations

import ctypes
import functools
import os

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import get_cython_function_address, intrinsic

from .._threads import numba_threads


@functools.cache
def sgemm_address():
    """The address of the ``sgemm`` the compiled passes call (see the module)."""
    import torch

    with numba_threads(1):  # launches numba's threads (and keeps PyTorch's count), so that the layer is known
        layer = numba.threading_layer()
    try:
        if layer == "omp":
            lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
            address = ctypes.cast(lib.sgemm_, ctypes.c_void_p).value
            if _checked(address):
                return address
    except (OSError, AttributeError, ValueError):  # no such library or symbol: another build
        pass
    return get_cython_function_address("scipy.linalg.cython_blas", "sgemm")


@intrinsic
def _call(typingctx, address, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """``sgemm(transa, ..., ldc)`` at ``address``: every argument a pointer (Fortran), given as an int."""
    def codegen(context, builder, signature, args):
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [ptr] * 13)
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(fn, [builder.inttoptr(x, ptr) for x in args[1:]])
        return context.get_dummy_value()

    return types.void(*([types.intp] * 14)), codegen


@numba.njit(inline="always")
def cells():
    """The scratch cells of :func:`gemm`'s scalar arguments (one set per thread): 2 characters,
    5 integers and 2 floats."""
    return np.zeros(2, np.uint8), np.zeros(5, np.int64), np.zeros(2, np.float32)


@numba.njit(inline="always")
def gemm(address, cell, A, B, C, trans_a, trans_b, alpha, beta):
    """``C = alpha op(A) @ op(B) + beta C`` for C-contiguous float32 2-D arrays, ``op(X) = X.T``
    where ``trans_x``. In column-major terms ``C^T = op(B)^T op(A)^T``, which is what ``sgemm``
    is handed (no copies)."""
    chars, ints, floats = cell
    m, k = (A.shape[1], A.shape[0]) if trans_a else (A.shape[0], A.shape[1])
    n = C.shape[1]
    chars[0] = 84 if trans_b else 78  # 'T' / 'N'
    chars[1] = 84 if trans_a else 78
    ints[0], ints[1], ints[2] = n, m, k
    ints[3], ints[4] = B.shape[1], A.shape[1]  # leading dimensions as stored
    floats[0], floats[1] = alpha, beta
    ch, it, fl = chars.ctypes.data, ints.ctypes.data, floats.ctypes.data
    _call(address, ch, ch + 1, it, it + 8, it + 16, fl, B.ctypes.data, it + 24, A.ctypes.data, it + 32,
          fl + 4, C.ctypes.data, it)


def _checked(address):
    """Whether ``sgemm`` at ``address`` multiplies a small case right (a guard on its interface),
    called through ctypes: ``C = -2 A^T B^T + C / 2``."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    C = np.ones((3, 4), np.float32)
    expected = -2.0 * A.T @ B.T + 0.5
    # column-major: C^T (4 x 3) = -2 B (4 x 5) A (5 x 3) + C^T / 2, with B and A as stored
    ints = np.array([4, 3, 5, 5, 3, 4], np.int64)  # n, m, k, ldb, lda, ldc
    floats = np.array([-2.0, 0.5], np.float32)
    ptr = lambda x, i=0: ctypes.c_void_p(x.ctypes.data + i * x.itemsize)
    sgemm = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 13)(address)
    sgemm(ctypes.c_char_p(b"T"), ctypes.c_char_p(b"T"), ptr(ints, 0), ptr(ints, 1), ptr(ints, 2), ptr(floats, 0),
          ptr(B), ptr(ints, 3), ptr(A), ptr(ints, 4), ptr(floats, 1), ptr(C), ptr(ints, 5))
    return np.allclose(C, expected, atol=1e-5)
