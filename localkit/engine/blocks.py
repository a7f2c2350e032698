"""Block sizes from a memory budget, and the thread pool that walks query blocks.

The engine never holds more than ``block_q x block_s`` log-weights per worker, so memory is set
by the budget, not by ``n_queries x n_samples``.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import joblib
import numpy as np
from threadpoolctl import ThreadpoolController

#: Bytes of kernel block that all workers together may hold (log-weights and one temporary).
DEFAULT_MEMORY_BUDGET = 128 * 2**20
#: Bytes of one kernel block: a block this size stays in a core's L2 cache between the passes over
#: it (matrix product, exp, matrix product), so float32 blocks hold twice as many cells. Measured
#: (Gaussian local mean, n = m = 14,000, d = 8, one thread, 2 MiB L2): 1 MiB blocks (float64
#: 256 x 512, float32 512 x 512) take 0.75-0.79x (float64) and 0.67-0.70x (float32) the time of
#: 2^20-cell blocks of 512 x 2048.
CACHE_BYTES = 2**20
MAX_SAMPLE_BLOCK = 512
#: Above this many features the matrix product dominates a block and runs faster on larger ones:
#: the cache target grows in proportion (d = 256: float64 0.9x, float32 0.85x the time of 1 MiB
#: blocks; d = 64 and below: 1 MiB blocks measured fastest).
CACHE_FEATURES = 64


def resolve_n_jobs(n_jobs):
    """Threads for ``n_jobs``, as scikit-learn counts them (:func:`joblib.effective_n_jobs`).

    ``None`` means 1 unless an enclosing ``joblib.parallel_config(n_jobs=...)`` says otherwise (so
    that ``GridSearchCV(n_jobs=-1)`` around an estimator does not oversubscribe the cores); a
    negative number counts back from the cores (-1: all of them). 0, floats, strings and bools
    are errors.
    """
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer))
                               or n_jobs == 0):
        raise ValueError(f"n_jobs must be None or a non-zero integer (-1: all cores), got {n_jobs!r}")
    if n_jobs == 1:  # one thread under any joblib context (its lookup costs ~10 us, more than a small pass)
        return 1
    return max(1, int(joblib.effective_n_jobs(None if n_jobs is None else int(n_jobs))))


def block_sizes(n_queries, n_samples, itemsize, options, *, row_bytes=0, n_features=0):
    """``(block_q, block_s)``: sample blocks of ``MAX_SAMPLE_BLOCK``, and as many queries as the cache
    target and the budget allow; where the queries are fewer, longer sample blocks in their place
    (the block and the samples' coordinates within the cache target).

    ``options`` (:class:`~localkit.engine.EngineOptions`): its ``block_size`` (an int or a pair)
    overrides the budget, else its ``memory_budget`` is shared by its ``n_jobs`` threads;
    ``row_bytes`` is extra memory per query row and sample column (e.g. gathered values);
    ``n_features`` the inner dimension of the matrix product that forms a block (see ``CACHE_FEATURES``).
    """
    if options.block_size is not None:
        bq, bs = (options.block_size,) * 2 if np.isscalar(options.block_size) else options.block_size
        return int(min(bq, n_queries)), int(min(bs, n_samples))
    cell = 2 * itemsize + row_bytes  # the block and one temporary of the same size
    cache = CACHE_BYTES * max(1.0, n_features / CACHE_FEATURES)
    cells = min(cache / itemsize, options.budget / options.threads / cell)
    # few queries leave a block of MAX_SAMPLE_BLOCK samples far below the cache target: its sample
    # blocks then grow (in whole multiples) to fill it, so that a call's Python cost per block is
    # paid ~n_samples / cells times, not n_samples / 512 times (2 queries against 2,000,000 x 3
    # samples: 3,907 blocks of ~50 us each were two thirds of the call); each sample of a block
    # counts its n_features + 2 coordinates too, which a pass may copy (recentred, augmented)
    widen = max(1, int(cells // (MAX_SAMPLE_BLOCK * (max(n_queries, 1) + n_features + 2))))
    bs = int(min(n_samples, MAX_SAMPLE_BLOCK * widen))
    bq = int(min(n_queries, max(1, cells // bs)))
    return bq, bs


def _blas_libraries():
    """The BLAS libraries loaded in the process, found once (``threadpool_limits`` re-scans them on
    every call, ~20 ms, longer than a small engine pass), and once more after ``scipy.linalg`` is
    loaded: numba's compiled ``np.dot`` calls scipy's BLAS, a second OpenBLAS beside numpy's, and a
    scan from before it was loaded left it free (two threads of the inverted lists each ran two BLAS
    threads: 0.22 s against 0.09 s)."""
    return _scan_blas_libraries("scipy.linalg" in sys.modules)


@functools.cache
def _scan_blas_libraries(scipy_linalg_loaded):
    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


_held = threading.local()


@contextlib.contextmanager
def one_blas_thread():
    """BLAS held to one thread inside, the limit entered once: the passes inside skip their own
    (:func:`map_blocks`), so that a fixed point or a public call pays it once, not once per pass.
    Each library's count is read and only one above 1 is set and restored (~1 us where the caller
    already holds one thread, as ``threadpool_limits(1)`` does, ~8 us where BLAS runs two;
    threadpoolctl's ``limit`` took ~15 us and ~20 us: a tenth of a small Hopfield retrieval)."""
    if getattr(_held, "on", False):
        yield
        return
    libraries = _blas_libraries()
    before = [lib.num_threads for lib in libraries]
    for lib, n in zip(libraries, before):
        if n != 1:
            lib.set_num_threads(1)
    _held.on = True
    try:
        yield
    finally:
        _held.on = False
        for lib, n in zip(libraries, before):
            if n != 1:
                lib.set_num_threads(n)


def map_blocks(func, n, block, n_jobs, *, blas=True):
    """Call ``func(slice)`` on consecutive blocks of ``range(n)``, on ``n_jobs`` threads.

    numpy and BLAS release the GIL, so threads over query blocks keep both cores busy. BLAS is
    held to one thread always, so that ``n_jobs`` is the whole count of threads: the engine's
    products are skinny (``d + 2`` columns), and on a busy machine BLAS's own threads made a
    one-job pass 13x slower (relaxation labeling, 400 points: 1.2 s -> 15.7 s). ``blas=False``
    (work that calls no BLAS, e.g. tree queries) skips that limit, whose setting and resetting
    cost ~8 us where BLAS runs more threads (:func:`one_blas_thread`; ~0.1 ms once, a third of a
    fitted kNN regressor's prediction of 10 points, by threadpoolctl's ``threadpool_limits``).

    Ctrl-C is seen between blocks (a compiled block may turn it into numba's ``SystemError``:
    :func:`interruptible` turns it back).
    """
    slices = [slice(i, min(i + block, n)) for i in range(0, n, block)]
    workers = min(resolve_n_jobs(n_jobs), len(slices))
    limit = one_blas_thread() if blas else contextlib.nullcontext()
    with limit, interruptible():
        if workers <= 1:
            for s in slices:
                func(s)
            return
        with ThreadPoolExecutor(workers) as pool:  # an exception (Ctrl-C) cancels the blocks not yet started
            for _ in pool.map(func, slices):
                pass


@contextlib.contextmanager
def interruptible():
    """Re-raise the ``KeyboardInterrupt`` that a numba-compiled call returned with.

    A signal that Python handles while a compiled function boxes its results comes back as
    ``SystemError: CPUDispatcher(...) returned a result with an exception set``, with the
    ``KeyboardInterrupt`` in its chain of causes, so that ``except KeyboardInterrupt`` missed it.
    """
    try:
        yield
    except SystemError as exc:
        cause = exc
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None
