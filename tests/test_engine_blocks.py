"""Block sizes: cache-sized blocks in bytes, capped by the memory budget."""
import pytest

from localkit.engine import EngineOptions, block_sizes
from localkit.engine.blocks import CACHE_BYTES, CACHE_FEATURES


@pytest.mark.parametrize("itemsize", [4, 8])
def test_default_blocks_fill_the_cache_target_in_bytes(itemsize):
    bq, bs = block_sizes(20_000, 20_000, itemsize, EngineOptions(), n_features=8)
    assert CACHE_BYTES / 2 < bq * bs * itemsize <= CACHE_BYTES
    # float32 blocks hold twice the cells of float64 ones in the same bytes
    bq64, bs64 = block_sizes(20_000, 20_000, 8, EngineOptions(), n_features=8)
    assert bq * bs * itemsize == bq64 * bs64 * 8


def test_many_features_grow_the_blocks_in_proportion():
    small = block_sizes(20_000, 20_000, 8, EngineOptions(), n_features=CACHE_FEATURES)
    large = block_sizes(20_000, 20_000, 8, EngineOptions(), n_features=4 * CACHE_FEATURES)
    assert large[0] * large[1] == 4 * small[0] * small[1]


@pytest.mark.parametrize("budget, workers", [(2**16, 1), (2**20, 2), (2**22, 4)])
def test_the_memory_budget_caps_the_blocks_of_all_workers(budget, workers):
    bq, bs = block_sizes(20_000, 20_000, 8, EngineOptions(memory_budget=budget, n_jobs=workers), n_features=512)
    assert workers * bq * bs * 2 * 8 <= budget  # each worker's block and one temporary


@pytest.mark.parametrize("n_queries", [1, 2, 37, 255])
def test_few_queries_take_longer_sample_blocks_within_the_cache_target(n_queries):
    """Queries that fill a fraction of a block of MAX_SAMPLE_BLOCK samples widen the sample blocks
    by whole multiples, until the block and the samples' coordinates (which a pass may copy) fill
    the cache target, never past it or the budget."""
    from localkit.engine.blocks import MAX_SAMPLE_BLOCK

    d = 3
    bq, bs = block_sizes(n_queries, 10**7, 8, EngineOptions(), n_features=d)
    assert bq == n_queries and bs % MAX_SAMPLE_BLOCK == 0
    assert (bs > MAX_SAMPLE_BLOCK) == (n_queries < 100)
    if bs > MAX_SAMPLE_BLOCK:
        assert CACHE_BYTES / 2 < (bq + d + 2) * bs * 8 <= CACHE_BYTES
    bq, bs = block_sizes(n_queries, 10**7, 8, EngineOptions(memory_budget=2**16), n_features=d)
    assert bs == MAX_SAMPLE_BLOCK * max(1, 2**16 // 16 // (MAX_SAMPLE_BLOCK * (n_queries + d + 2)))
    assert bq * bs * 2 * 8 <= 2**16
    assert block_sizes(2, 3_000, 8, EngineOptions()) == (2, 3_000)  # never past the samples


def test_wide_samples_widen_the_blocks_less():
    """Many features: a widened block's copy of its samples stays within the (grown) cache target."""
    from localkit.engine.blocks import MAX_SAMPLE_BLOCK

    d = 784
    bq, bs = block_sizes(2, 10**6, 4, EngineOptions(), n_features=d)
    assert MAX_SAMPLE_BLOCK < bs and (2 + d + 2) * bs * 4 <= CACHE_BYTES * d / CACHE_FEATURES


def test_blocks_never_exceed_the_data():
    assert block_sizes(3, 7, 8, EngineOptions()) == (3, 7)
    assert block_sizes(100, 50, 4, EngineOptions(block_size=(64, 200))) == (64, 50)


@pytest.mark.parametrize("outer", [1, 2])
def test_one_blas_thread_holds_one_and_restores_the_count(outer):
    """Inside, every BLAS library runs one thread (nested: still one); after, each has the count it
    had before, whether that was 1 (nothing to set) or more."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from localkit.engine.blocks import one_blas_thread

    def counts():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    with threadpool_limits(limits=outer, user_api="blas"):
        before = counts()
        assert before == [outer] * len(before) and before  # numpy's BLAS is loaded
        with one_blas_thread():
            assert set(counts()) <= {1}
            with one_blas_thread():
                assert set(counts()) <= {1}
            assert set(counts()) <= {1}
        assert counts() == before


def test_a_blas_library_loaded_after_the_first_pass_is_held_too():
    """numba's compiled ``np.dot`` calls scipy's BLAS, which ``scipy.linalg`` loads: where the first
    pass ran before it was loaded, the next still holds it to one thread (a fresh process, so that
    scipy's BLAS really comes after the first scan)."""
    import subprocess
    import sys

    script = """
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from localkit.engine.blocks import map_blocks, one_blas_thread
map_blocks(lambda rows: None, 4, 1, 2)  # the first pass: scipy's BLAS not yet loaded
import scipy.linalg.cython_blas
with threadpool_limits(limits=2, user_api="blas"):
    with one_blas_thread():
        counts = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
print(counts)
assert len(counts) >= 2 and set(counts) == {1}, counts
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
