"""The array namespace that the kernel profiles' one statement is re-bound to inside Triton kernels.

:meth:`~localkit.kernels.profiles.Profile.log_k_for` re-binds each profile's ``log k`` (and
:meth:`~localkit.kernels.profiles.Profile.slope_for` its slope) to a namespace called ``xp``; this
module is that namespace for ``@triton.jit`` code, so the Triton attention kernel evaluates the very
statement that NumPy, PyTorch and numba evaluate. Each entry is a JIT function (the interpreter and
the compiler both call those). Imported only where Triton is installed.
"""
import triton
import triton.language as tl

#: globals the re-bound statements need beside ``xp``: a module name (Triton's JIT names functions
#: by it) and ``tl`` (Triton's interpreter looks for it)
REBIND_GLOBALS = {"__name__": __name__, "tl": tl}


@triton.jit
def where(condition, a, b):
    return tl.where(condition, a, b)


@triton.jit
def sqrt(x):
    return tl.sqrt(x)


@triton.jit
def log(x):
    return tl.log2(x) * 0.6931471805599453  # the fast base-2 logarithm (one MUFU op)


@triton.jit
def cos(x):
    return tl.cos(x)


@triton.jit
def sin(x):
    return tl.sin(x)


@triton.jit
def log1p(x):
    # log(1 + x): for small |x| its absolute error is one ulp of 1 (6e-8), i.e. the weight
    # exp(log k) keeps its relative digits, which is all the kernel asks of it (a relative-accurate
    # log1p costs a division per pair; libdevice's has no counterpart in Triton's interpreter)
    return log(1.0 + x)
