"""A worker keeps the binding (and neighbour index) of each sample chunk (issues 36, 37): query
chunks after the first, and later calls on the same samples, pass over it again instead of making
it anew; the key is the chunk's content, so changed samples are bound afresh. The synchronous
scheduler (one process)."""
import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_iris

from localkit import local_mean
from localkit.engine import bound as bound_module
from localkit.engine.backends import dask as backend
from localkit.engine.passes import neighbors as nb


@pytest.fixture
def builds(monkeypatch):
    """Counts of kNN index builds and of bindings, from an empty cache."""
    backend._kept.clear()
    counts = {"index": 0, "bind": 0}
    make_index, init = nb.make_index, bound_module.BoundKernel.__init__

    def counted_index(*args, **kwargs):
        counts["index"] += 1
        return make_index(*args, **kwargs)

    def counted_init(self, *args, **kwargs):
        counts["bind"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(nb, "make_index", counted_index)
    monkeypatch.setattr(bound_module.BoundKernel, "__init__", counted_init)
    with dask.config.set(scheduler="synchronous"):
        yield counts
    backend._kept.clear()


def _calls(builds, X, y, Q, **kw):
    """The builds of one call on three query chunks against two sample chunks, and its error."""
    want = local_mean(Q, X, y, **kw)  # (in memory: before the count)
    before = dict(builds)
    got = local_mean(da.from_array(Q, chunks=17), da.from_array(X, chunks=75), da.from_array(y, chunks=75),
                     **kw).compute()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return {key: builds[key] - before[key] for key in builds}


def test_knn_chunks_are_indexed_once(builds):
    X = load_iris().data
    y, Q = X[:, 0] * 2.0, X[::3] + 0.01
    assert _calls(builds, X, y, Q, kernel="uniform", n_neighbors=5)["index"] == 2  # not 3 x 2
    assert _calls(builds, X, y, Q, kernel="uniform", n_neighbors=5)["index"] == 0  # the same samples again
    assert _calls(builds, X + 1.0, y, Q, kernel="uniform", n_neighbors=5)["index"] == 2  # new contents


def test_compact_chunks_are_bound_once(builds):
    X = load_iris().data
    y, Q = X[:, 0] * 2.0, X[::3] + 0.01
    kw = dict(kernel="epanechnikov", bandwidth=2.0)  # some queries are empty in a chunk (its nearest searched)
    assert _calls(builds, X, y, Q, **kw)["bind"] >= 2  # the two chunks (and where a query is empty, their nearest)
    assert _calls(builds, X, y, Q, **kw)["bind"] == 0


def test_dense_chunks_are_bound_once(builds):
    """A dense pass keeps its binding too (binding a chunk costs more than hashing it: ~12 ms against
    ~1 ms with xxhash, at 250,000 x 3)."""
    X = load_iris().data
    y, Q = X[:, 0] * 2.0, X[::3] + 0.01
    kw = dict(kernel="gaussian", bandwidth=0.5)
    assert _calls(builds, X, y, Q, **kw)["bind"] == 2  # one per sample chunk, not 3 x 2
    assert _calls(builds, X, y, Q, **kw)["bind"] == 0
    assert _calls(builds, X, y * 2.0, Q, **kw)["bind"] == 0  # new values, the same binding
    assert _calls(builds, X + 1.0, y, Q, **kw)["bind"] == 2  # new samples


def test_a_worker_keeps_at_most_its_share_of_its_memory_limit(monkeypatch):
    """On a worker: an eighth of its memory limit, and nothing (the cache emptied) while the process
    holds more than half of it; no limit, or no worker: the fixed budget."""
    import distributed

    class Worker:
        class memory_manager:
            memory_limit = 600 * 2**20

        class monitor:
            rss = 100 * 2**20

            @classmethod
            def get_process_memory(cls):
                return cls.rss

    assert backend._kept_bytes() == backend.INDEX_CACHE_BYTES  # not on a worker
    monkeypatch.setattr(distributed, "get_worker", lambda: Worker)
    assert backend._kept_bytes() == int(backend.KEPT_SHARE * 600 * 2**20) < backend.INDEX_CACHE_BYTES
    backend._kept.clear()
    backend._kept_index(("a",), lambda: "kept", 10)
    assert list(backend._kept.values()) == [("kept", 10)]
    Worker.monitor.rss = 400 * 2**20  # more than KEPT_ROOM of the limit
    assert backend._kept_bytes() == 0
    assert backend._kept_index(("b",), lambda: "built", 10) == "built" and not backend._kept
    Worker.memory_manager.memory_limit = None  # a worker without a limit
    assert backend._kept_bytes() == backend.INDEX_CACHE_BYTES


def test_the_cache_keeps_its_budget(builds, monkeypatch):
    monkeypatch.setattr(backend, "INDEX_CACHE_BYTES", 1)
    X = load_iris().data
    _calls(builds, X, X[:, 0], X[::3] + 0.01, kernel="uniform", n_neighbors=5)
    assert len(backend._kept) == 1  # the newest alone
