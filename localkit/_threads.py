"""Native thread pools: numba's, and the BLAS/OpenMP pools that threadpoolctl finds.

numba's OpenMP threading layer shares ``libgomp`` with PyTorch: launching it (the first
``numba.set_num_threads`` in the process) can reset the OpenMP thread count that
``torch.set_num_threads`` set (measured: a user's ``torch.set_num_threads(1)`` read back 2
after the first compiled attention call, so every later PyTorch op ran on 2 threads).
:func:`numba_threads` therefore puts PyTorch's count back as it found it.
"""
from __future__ import annotations

import functools
import sys
from contextlib import contextmanager


@functools.lru_cache(maxsize=1)
def threadpools():
    """The process's native thread pools, found once (a fresh scan costs ~6 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def numba_threads(n):
    """Run numba's parallel passes on ``n`` threads (at most ``NUMBA_NUM_THREADS``, at least 1),
    leaving numba's and PyTorch's thread counts as they were afterwards."""
    import numba

    torch = sys.modules.get("torch")
    torch_before = torch.get_num_threads() if torch is not None else None
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(before)
        if torch is not None and torch.get_num_threads() != torch_before:
            torch.set_num_threads(torch_before)
