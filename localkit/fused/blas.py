"""A Fortran ``sgemm`` (``dgemm``) called from numba's compiled passes through its address.

numba's ``np.dot`` calls SciPy's OpenBLAS and allocates its result. The compiled passes instead
call ``?gemm`` themselves, accumulating into their own buffers (``beta = 1``).

On Intel CPUs they take MKL's ``sgemm_`` where PyTorch's CPU library exports it (Linux x86
wheels link MKL in): on the attention pass's tile shapes (64 x 64 by 64 x 512, and 64 x 512 by
512 x 64, one core) MKL ran at 150-170 GFLOP/s against 100-120 for OpenBLAS through ``np.dot``.
On AMD CPUs (``znver*``, ``bdver*``, ``btver*``) MKL was slower in the passes and SciPy's OpenBLAS
is taken: on a Zen 5 core (one thread, B=1 H=8 L=4096), the Laplacian's forward took 0.47 s
with MKL against 0.30 s with OpenBLAS (SDPA, on MKL: 0.42-0.45 s), Epanechnikov's 0.45 s against
0.27 s, their forward and backward 1.78 and 1.62 s against 1.17 and 1.01 s, and local linear
attention (d=16) 0.94 s against 0.62-0.69 s.

The passes run on Python's threads, each holding MKL to one thread with :func:`one_mkl_thread`
(MKL's per-thread setting; MKL is taken only where PyTorch's library has it), as the tiles
need. SciPy's OpenBLAS is limited to one thread by the caller.

The address is an argument of the compiled pass (an ``int``), not a constant in it, so that
numba caches the pass on disk. Integer arguments are passed in 64-bit cells holding the value,
which an LP64 (32-bit integers, little-endian) and an ILP64 ``sgemm`` both read correctly.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import get_cython_function_address, intrinsic



def sgemm_address():
    """The address of the float32 ``sgemm`` the compiled passes call (see the module)."""
    return _address("sgemm")


def dgemm_address():
    """The address of the float64 ``dgemm``, chosen as :func:`sgemm_address`'s."""
    return _address("dgemm")


@contextlib.contextmanager
def one_mkl_thread():
    """MKL held to one thread in the calling thread (its per-thread setting, restored on exit),
    where the passes call PyTorch's MKL: a pass's worker threads each run their tiles' products on
    one core, not an OpenMP team each."""
    setter = _mkl_local_setter() if sgemm_address() == _torch_symbol("sgemm_") else None
    if setter is None:
        yield
        return
    before = setter(1)
    try:
        yield
    finally:
        setter(before)


@functools.cache
def _mkl_local_setter():
    """MKL's ``MKL_Set_Num_Threads_Local`` in PyTorch's CPU library (returns the previous setting,
    0: the global one), or None."""
    function = _torch_symbol("MKL_Set_Num_Threads_Local", address=False)
    if function is not None:
        function.restype, function.argtypes = ctypes.c_int, [ctypes.c_int]
    return function


@functools.cache
def _torch_symbol(name, address=True):
    """A symbol of PyTorch's CPU library (Linux x86 wheels link MKL in): its address, or the ctypes
    function; None where the library or the symbol is missing."""
    import torch

    try:
        function = getattr(ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")), name)
    except (OSError, AttributeError):  # no such library or symbol: another build
        return None
    return ctypes.cast(function, ctypes.c_void_p).value if address else function


@functools.cache
def _address(name):
    if not amd_cpu() and _mkl_local_setter() is not None:
        address = _torch_symbol(name + "_")
        if address is not None and _checked(address, np.float32 if name == "sgemm" else np.float64):
            return address
    return get_cython_function_address("scipy.linalg.cython_blas", name)


@functools.cache
def amd_cpu():
    """Whether this is an AMD CPU (LLVM's name of the host: ``znver*``, ``bdver*``, ``btver*``),
    where MKL was measured slower inside the passes (see the module)."""
    from llvmlite import binding

    return binding.get_host_cpu_name().startswith(("znver", "bdver", "btver"))


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
    5 integers, and ``alpha, beta`` in float32 and in float64."""
    return np.zeros(2, np.uint8), np.zeros(5, np.int64), np.zeros(2, np.float32), np.zeros(2, np.float64)


@numba.njit(inline="always")
def gemm(address, cell, A, B, C, trans_a, trans_b, alpha, beta):
    """``C = alpha op(A) @ op(B) + beta C`` for C-contiguous 2-D arrays, ``op(X) = X.T`` where
    ``trans_x``, all float32 (``address``: an ``sgemm``) or all float64 (a ``dgemm``). In
    column-major terms ``C^T = op(B)^T op(A)^T``, which is what ``?gemm`` is handed (no copies)."""
    chars, ints, floats32, floats64 = cell
    m, k = (A.shape[1], A.shape[0]) if trans_a else (A.shape[0], A.shape[1])
    n = C.shape[1]
    chars[0] = 84 if trans_b else 78  # 'T' / 'N'
    chars[1] = 84 if trans_a else 78
    ints[0], ints[1], ints[2] = n, m, k
    ints[3], ints[4] = B.shape[1], A.shape[1]  # leading dimensions as stored
    floats32[0], floats32[1] = alpha, beta
    floats64[0], floats64[1] = alpha, beta
    fl = floats64.ctypes.data if C.itemsize == 8 else floats32.ctypes.data
    ch, it = chars.ctypes.data, ints.ctypes.data
    _call(address, ch, ch + 1, it, it + 8, it + 16, fl, B.ctypes.data, it + 24, A.ctypes.data, it + 32,
          fl + C.itemsize, C.ctypes.data, it)


def _checked(address, dtype):
    """Whether the ``?gemm`` of ``dtype`` at ``address`` multiplies a small case right (a guard on
    its interface), called through ctypes: ``C = -2 A^T B^T + C / 2``."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((5, 3)).astype(dtype), rng.standard_normal((4, 5)).astype(dtype)
    C = np.ones((3, 4), dtype)
    expected = -2.0 * A.T @ B.T + 0.5
    # column-major: C^T (4 x 3) = -2 B (4 x 5) A (5 x 3) + C^T / 2, with B and A as stored
    ints = np.array([4, 3, 5, 5, 3, 4], np.int64)  # n, m, k, ldb, lda, ldc
    floats = np.array([-2.0, 0.5], dtype)
    ptr = lambda x, i=0: ctypes.c_void_p(x.ctypes.data + i * x.itemsize)
    sgemm = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 13)(address)
    sgemm(ctypes.c_char_p(b"T"), ctypes.c_char_p(b"T"), ptr(ints, 0), ptr(ints, 1), ptr(ints, 2), ptr(floats, 0),
          ptr(B), ptr(ints, 3), ptr(A), ptr(ints, 4), ptr(floats, 1), ptr(C), ptr(ints, 5))
    return np.allclose(C, expected, atol=1e-5)
