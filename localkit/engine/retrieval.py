"""Retrieval at scale: the neighbour indexes of many features (issue 37).

In more than ``BRUTE_FEATURES`` features every exact neighbour search is a scan. Two indexes
serve it here, both kept in the bound kernel (built once, on first use):

* :class:`FlatIndex` — the **exact** k nearest samples. Candidates come from a scan in float32:
  our own tiled pass (one matrix product per tile of queries x samples, ``d^2 = |x|^2 - 2 q.x +
  |q|^2``, the ``m`` smallest kept by a compiled heap per query), measured faster than faiss's
  ``IndexFlatL2``, which serves instead where ``SCAN_WITH_FAISS`` says so. The scan measures from
  a centre ``c`` of the samples (the mean of the first ``CENTRE_ROWS``). Each query takes
  ``m = CANDIDATES * k + 1`` candidates, re-ranked by exact float64 distances from coordinate
  differences, ``sum_l (q_l - x_l)^2``. The scan's float32 error is bounded,
  ``|d^2_32 - d^2| <= err = 2 (d + 4) eps_32 (|q - c| + max_j |x_j - c|)^2``; every sample left out has
  ``d^2_32 >= b`` (the largest candidate's), so the exact k nearest are among the candidates when
  ``d_(k)^2 + margin < b - err``. A query where that cannot be certified, or whose k + 1 nearest
  hold a near tie (two squared distances within ``margin = TIE_MARGIN (|q| + max |x|)^2``, where
  scikit-learn's own float64 products could order them either way), is answered by
  scikit-learn's brute-force search itself; so the indices are those of
  ``NearestNeighbors(algorithm="brute")`` on every query, ties included.
* :class:`ListIndex` — ``algorithm="approximate"``: the samples in k-means inverted lists, built
  once in ``fit``. Each kNN query probes the ``DEFAULT_PROBES`` lists of nearest centres, the
  queries that probe one list measured against it by one matrix product, and re-ranks the k
  nearest exactly; radius queries double k until the k-th distance passes the radius. Its
  recall@k is measured on ``RECALL_PROBES`` of the first queries it answers against the exact
  scan of its own storage: ``recall_`` with its standard error ``recall_error_``. With a
  ``tolerance`` (the share of the true k nearest a search may miss) the lists probed are instead
  the least count of ``PROBES`` whose measured recall, less two standard errors, is at least
  ``1 - tolerance``: a bound that holds with ~97.5% confidence.

Why our own passes: measured faster than faiss's at the same answers (benchmarks/RESULTS.md,
"retrieval"): the exact scan than ``IndexFlatL2`` (used where ``SCAN_WITH_FAISS`` says so), the
inverted lists than faiss's HNSW graph and inverted file (:class:`ListIndex`). faiss stays the
benchmarks' reference.

The same scan serves few samples in ``SMALL_SCAN_FEATURES`` features (:func:`small_scan_applies`),
where a k-d tree is the exact search otherwise: there the candidates of the scan's one tile are
found by a partial sort, and a query that cannot be certified, or holds a near tie, is answered
by that k-d tree (:class:`~localkit.engine.passes.neighbors.TreeIndex`). The re-ranking sums the
squared differences in the tree's order, so a certified answer is the tree's, distances to the
bit. Measured (diabetes, 331 x 10, 111 queries, one thread): the scan answers in less time than
the tree's query alone, and needs no tree built in ``fit``; in fewer than 6 features the tree
is faster.

Memory: the samples as given, plus one float32 copy in the index (``4 n d`` bytes, written a slice
at a time); the float64 rows the re-ranking needs are gathered from the samples (``rows(idx)``),
never copied whole.
"""
from __future__ import annotations

import math

import numpy as np
from .._jit import njit

#: candidates per neighbour asked for (``m = CANDIDATES * k + 1``)
CANDIDATES = 2
#: relative tie margin (of ``(|q| + max |x|)^2``) below which two squared distances count as tied:
#: well above the float64 error of scikit-learn's matrix-product distances (``~ d eps_64``)
TIE_MARGIN = 1e-11
#: the exact scan serves from this many features (trees below)
SCAN_MIN_FEATURES = 16
#: ... and from this many samples (below, scikit-learn's brute force on small data costs as little)
SCAN_MIN_SAMPLES = 20_000
#: the exact scan by faiss's ``IndexFlatL2`` (True) or by our tiled pass (False, also where faiss is
#: not installed). Ours measured faster (100,000 x 5,000 queries, 21 candidates, one thread, load
#: ~4.5 on 2 cores): 0.94 s against 1.52 s at d = 32, 2.5 s against 6.9 s at d = 128
#: (benchmarks/RESULTS.md, "retrieval", for the current figures)
SCAN_WITH_FAISS = False
#: the queries of the recall probe of ``algorithm="approximate"``
RECALL_PROBES = 1000
#: the inverted lists of ``algorithm="approximate"``: about ``LIST_SCALE sqrt(n)`` of them; the lists
#: a query probes by default, and the counts tried under a ``tolerance`` (every list last)
LIST_SCALE = 2.0
DEFAULT_PROBES = 12
PROBES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: rows of one float32 slice of the samples (the float32 copies, written a slice at a time)
SLICE = 65536
#: tiles of the own scan: queries x samples per matrix product
TILE_QUERIES, TILE_SAMPLES = 512, 4096
#: the exact scan measures from the mean of this many of the first samples
CENTRE_ROWS = 4096
#: few samples (at most ``SMALL_SCAN_MAX_SAMPLES``) in this range of features take the scan, a
#: k-d tree answering its uncertain queries (:func:`small_scan_applies`)
SMALL_SCAN_FEATURES = (6, 15)
SMALL_SCAN_MAX_SAMPLES = 2048


def faiss_module():
    """faiss, or None where it is not installed (tests replace this to run the own pass)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


class _Fallback:
    """The reference search over the index points, built on first use (a float64 copy of the
    samples: only where a query could not be certified, or holds a near tie): scikit-learn's
    brute force (``reference="brute"``) or the k-d tree (``"tree"``)."""

    def __init__(self, rows, n, reference="brute"):
        self.rows, self.n, self.reference, self.nn = rows, n, reference, None

    def get(self):
        if self.nn is None:
            X = self.rows(np.arange(self.n))
            if self.reference == "tree":
                from .passes.neighbors import TreeIndex

                self.nn = TreeIndex(X, "euclidean")
            else:
                from sklearn.neighbors import NearestNeighbors

                self.nn = NearestNeighbors(algorithm="brute").fit(X)
        return self.nn


class _ScanBase:
    """What :class:`FlatIndex` and :class:`ListIndex` share: the exact re-ranking, the scikit-learn
    interface (``kneighbors``, ``radius_neighbors``, ``n_samples_fit_``), faiss's threads and pickles."""

    threads = 1

    def __init__(self, rows, n, d, faiss, reference="brute"):
        self.rows, self.n_samples_fit_, self.d, self._faiss = rows, n, d, faiss
        self.fallback = _Fallback(rows, n, reference)

    def _exact(self, Q, idx):
        """Exact squared distances ``sum_l (q_l - x_l)^2`` of the candidates ``idx`` (float64); where a
        k-d tree is the reference, summed in the order of the features, as it sums them (its distances
        to the bit where its build does not fuse the multiply-adds, as scikit-learn's x86-64 wheels do
        not; the running sum measured 1.4x einsum's time at d = 128, so only there)."""
        from .blocks import map_blocks

        live = idx >= 0
        d2 = np.empty(idx.shape)

        def run(rows):
            i = idx[rows]
            diff = self.rows(np.where(i >= 0, i, 0).ravel()).reshape(i.shape + (self.d,))  # gathered: a copy
            np.subtract(diff, Q[rows, None, :], out=diff)  # x - q in place: the same squares
            if self.fallback.reference == "tree":
                np.square(diff, out=diff)
                d2[rows] = np.add.accumulate(diff, axis=2, out=diff)[..., -1]
            else:
                d2[rows] = np.einsum("qmd,qmd->qm", diff, diff)

        threads = max(1, int(self.threads))
        # blocks of at most 8 MiB of rows, whose gather, subtraction and sum stay in cache: 10,000 x 10
        # candidates of 128 features took 0.022 s on two threads, 0.041 s in blocks of 32 MiB
        step = max(1, min((8 << 20) // (8 * max(1, idx.shape[1]) * self.d),
                          -(-len(idx) // threads)))  # and a block for each thread
        map_blocks(run, len(idx), step, threads, blas=False)
        return np.where(live, d2, np.inf)

    def _rerank(self, Q, idx, k):
        """``(d2, idx)`` sorted by exact distance (then index), the first ``k + 1`` kept."""
        d2 = self._exact(Q, idx)
        order = np.lexsort((idx, d2), axis=-1)[:, :k + 1]
        return np.take_along_axis(d2, order, axis=1), np.take_along_axis(idx, order, axis=1)

    def radius_neighbors(self, Q, radius, return_distance=True, sort_results=False):
        nn = self.fallback.get()
        return nn.radius_neighbors(Q, radius=radius, return_distance=return_distance, sort_results=sort_results)

    def _set_threads(self):
        if self._faiss is not None:
            self._faiss.omp_set_num_threads(max(1, int(self.threads)))

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_faiss"] = None if self._faiss is None else True
        state["fallback"] = _Fallback(self.rows, self.n_samples_fit_, self.fallback.reference)
        for key in ("index",):
            if state.get(key) is not None and self._faiss is not None:
                state[key] = bytes(self._faiss.serialize_index(state[key]))
        return state

    def __setstate__(self, state):
        faiss = faiss_module() if state["_faiss"] else None
        if state["_faiss"] and faiss is None:
            raise ImportError("this index was pickled with faiss, which is not installed here")
        state["_faiss"] = faiss
        if faiss is not None and isinstance(state.get("index"), bytes):
            state["index"] = faiss.deserialize_index(np.frombuffer(state["index"], dtype=np.uint8))
        self.__dict__.update(state)


def _reach(Q, x_max):
    """``(|q| + max_j |x_j|)^2`` per query: the scale of the errors in a squared distance formed as
    ``|x|^2 - 2 q.x + |q|^2`` (see the module)."""
    return (np.sqrt(np.einsum("ij,ij->i", Q, Q)) + x_max) ** 2


def _max_norm(X):
    return float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X), initial=0.0)))


class FlatIndex(_ScanBase):
    """The exact k nearest samples by a float32 scan re-ranked in float64 (see the module).

    ``rows(idx)`` gives the index points of the samples ``idx`` in float64 (the coordinates every
    exact path of the bound kernel measures in); ``faiss`` the module or None (the own tiled pass);
    ``reference`` the search that answers the queries the scan does not certify: scikit-learn's
    brute force, or the k-d tree (``"tree"``, few samples: :func:`small_scan_applies`).
    ``uncertified_`` counts the queries answered by the reference search so far."""

    def __init__(self, rows, n, d, faiss=None, reference="brute"):
        super().__init__(rows, n, d, faiss, reference)
        # the scan measures from a centre of the samples (the mean of the first CENTRE_ROWS): its
        # float32 error falls with |q - c| + max |x - c|, however far from the origin the data lie
        self.centre = rows(np.arange(min(n, CENTRE_ROWS))).mean(axis=0) if n else np.zeros(d)
        X = np.empty((n, d), dtype=np.float32)
        for s in range(0, n, SLICE):  # the difference formed in float64 and rounded once, a slice at a time
            P = rows(np.arange(s, min(s + SLICE, n)))
            np.subtract(P, self.centre, out=X[s:s + SLICE], casting="same_kind")
        self.x_max = _max_norm(X)
        if faiss is not None:
            self.index = faiss.IndexFlatL2(d)
            self.index.add(X)
            self.X32 = self.x_sq = None
        else:
            self.index = None
            self.X32, self.x_sq = X, np.einsum("ij,ij->i", X, X)
        self.uncertified_ = 0

    @property
    def backend(self):
        return "faiss IndexFlatL2" if self.index is not None else "own tiled scan"

    def candidates(self, Q32, m):
        """``(d2_32, idx)``: the ``m`` nearest by the float32 scan, and the bound ``b`` (the largest
        kept squared distance; every sample left out is at least as far in float32)."""
        if self.index is not None:
            self._set_threads()
            D, idx = self.index.search(Q32, m)
            return idx.astype(np.intp), D[:, -1].astype(np.float64)
        if len(self.X32) <= TILE_SAMPLES:
            return _partitioned_candidates(Q32, self.X32, self.x_sq, m)
        return _tiled_candidates(Q32, self.X32, self.x_sq, m, self.threads)

    def kneighbors(self, Q, n_neighbors):
        """``(distances, indices)`` of the ``n_neighbors`` nearest samples, nearest first: those of
        the reference search (see the module)."""
        Q = np.asarray(Q, dtype=np.float64)
        k, n = int(n_neighbors), self.n_samples_fit_
        if k > n:
            raise ValueError(f"n_neighbors={k} > n_samples={n}")
        m = min(n, CANDIDATES * k + 1)
        Qc = Q - self.centre
        idx, bound32 = self.candidates(np.ascontiguousarray(Qc, dtype=np.float32), m)
        d2, idx = self._rerank(Q, idx, k)
        err = 2.0 * (self.d + 4) * np.finfo(np.float32).eps * _reach(Qc, self.x_max)
        # scikit-learn's brute force forms its float64 distances from the points as given, their error
        # scaling with the raw norms (at most |x - c| + |c|); a k-d tree's are exact, and ours to the bit
        if self.fallback.reference == "brute":
            margin = TIE_MARGIN * _reach(Q, self.x_max + float(np.linalg.norm(self.centre)))
        else:
            margin = np.zeros(len(Q))
        if m >= n:
            bound32 = np.full(len(Q), np.inf)
        certain = d2[:, k - 1] + margin < bound32 - err
        # the (k+1)-th clearly farther than the k-th, and the k in a clear order
        certain &= np.all(np.diff(d2, axis=1) > margin[:, None], axis=1)
        out_d, out_i = np.sqrt(d2[:, :k]), idx[:, :k]
        redo = np.flatnonzero(~certain)
        if len(redo):
            self.uncertified_ += len(redo)
            out_d[redo], out_i[redo] = self.fallback.get().kneighbors(Q[redo], n_neighbors=k)
        return out_d, out_i


def _tiled_candidates(Q32, X32, x_sq, m, threads=1):
    """The own scan: tiles of ``TILE_QUERIES x TILE_SAMPLES``, ``q.x`` by one matrix product per tile
    (float32, BLAS on one thread), then per query one compiled pass over the tile keeping the ``m``
    smallest ``|x|^2 - 2 q.x`` in a max-heap (:func:`_select_tile`: a row formed whole, then one
    comparison with the heap's top per sample unless it enters); ``threads`` threads
    over tiles of queries (the engine's convention, :func:`~localkit.engine.blocks.map_blocks`).
    ``(idx, b)`` as :meth:`FlatIndex.candidates`."""
    from .blocks import map_blocks

    n, nq = len(X32), len(Q32)
    best_d = np.full((nq, m), np.inf, dtype=np.float32)
    best_i = np.full((nq, m), -1, dtype=np.intp)

    def run(rows):
        Qt = Q32[rows]
        G = np.empty((len(Qt), min(TILE_SAMPLES, n)), dtype=np.float32)
        for s in range(0, n, TILE_SAMPLES):
            Xt = X32[s:s + TILE_SAMPLES]
            out = G if len(Xt) == G.shape[1] else np.empty((len(Qt), len(Xt)), dtype=np.float32)
            np.matmul(Qt, Xt.T, out=out)
            _select_tile(out, x_sq[s:s + TILE_SAMPLES], s, best_d, best_i, np.arange(rows.start, rows.stop))

    map_blocks(run, nq, TILE_QUERIES, threads)
    q_sq = np.einsum("ij,ij->i", Q32, Q32).astype(np.float64)
    return best_i, best_d[:, 0].astype(np.float64) + q_sq


def _partitioned_candidates(Q32, X32, x_sq, m):
    """The scan of one tile of samples: ``|x|^2 - 2 q.x`` for ``TILE_QUERIES`` queries at a time,
    the ``m`` smallest per query by a partial sort (measured 2x faster than the compiled heap of
    :func:`_select_tile` over 331 samples). ``(idx, b)`` as :meth:`FlatIndex.candidates`."""
    n, nq = len(X32), len(Q32)
    idx = np.empty((nq, m), dtype=np.intp)
    top = np.empty(nq, dtype=np.float64)
    for a in range(0, nq, TILE_QUERIES):
        D = Q32[a:a + TILE_QUERIES] @ X32.T
        D *= -2.0
        D += x_sq
        kept = np.argpartition(D, m - 1, axis=1)[:, :m] if m < n else np.broadcast_to(np.arange(n), D.shape)
        idx[a:a + TILE_QUERIES] = kept
        top[a:a + TILE_QUERIES] = np.take_along_axis(D, kept, axis=1).max(axis=1)
    return idx, top + np.einsum("ij,ij->i", Q32, Q32).astype(np.float64)


@njit(nogil=True, cache=True)
def _select_tile(G, x_sq, offset, best_d, best_i, rows):  # pragma: no cover - compiled
    """Per row ``i``: push ``(x_sq[j] - 2 G[i, j], offset + j)`` into the max-heap ``best_d[rows[i]]``
    (``best_d[r, 0]`` its largest) where it is smaller than the top. ``G`` is overwritten by those
    values: a row formed whole (a loop the compiler vectorises), then compared one by one, measured
    1.2x faster than a chunk's minimum first (an inverted list's search; 1.15-1.3x the exact scan)."""
    nq, ns = G.shape
    m = best_d.shape[1]
    for i in range(nq):
        row = G[i]
        for j in range(ns):
            row[j] = x_sq[j] - (row[j] + row[j])
        hd, hi = best_d[rows[i]], best_i[rows[i]]
        top = hd[0]
        for j in range(ns):
            v = row[j]
            if v >= top:
                continue
            pos = 0
            while True:
                c = 2 * pos + 1
                if c >= m:
                    break
                if c + 1 < m and hd[c + 1] > hd[c]:
                    c += 1
                if hd[c] <= v:
                    break
                hd[pos] = hd[c]
                hi[pos] = hi[c]
                pos = c
            hd[pos] = v
            hi[pos] = offset + j
            top = hd[0]


class ListIndex(_ScanBase):
    """``algorithm="approximate"``: the samples in inverted lists, k-means clusters (the truncated
    pass's k-means, :func:`_kmeans_labels`; about ``LIST_SCALE sqrt(n)`` lists), each list's samples
    stored together in float32 (less a centre ``c`` of the samples, as the exact scan measures). A
    query probes the ``p`` lists whose centres are nearest; all the queries that probe one list are
    measured against it by one matrix product, ``|x|^2 - 2 q.x``, and the ``k`` smallest kept by the
    exact scan's compiled heap (:func:`_select_tile`); those k are re-ranked by exact distances. A
    query whose probed lists hold fewer than k samples probes twice as many.

    Why our own: measured against faiss's HNSW graph (``IndexHNSWFlat``, M = 32) and inverted file
    (``IndexIVFFlat``) at recall@10 of at least 0.95 (100,000 samples, 10,000 queries, benchmarks/
    RESULTS.md "retrieval"), the lists answer 1.2-5.1x faster than the graph on one thread or two
    (clustered and digits-like data) and build in an eighth of its time: faiss
    measures each query against each list it probes by itself, and its graph walks from sample to
    sample; the lists' matrix products measure many queries at once.

    ``recall_`` / ``recall_error_``: the recall@k (``recall_k_``) of :meth:`kneighbors` measured on
    the first queries it answers (None before), on ``RECALL_PROBES`` of them drawn at random,
    against the exact scan of the lists' float32 storage (:meth:`_measure_recall`). The standard
    error is that of a mean over the ``p`` probes, ``sqrt(max(s^2, r (1 - r) / k, 1 / (k p)) / p)``
    with ``s^2`` the variance of the per-probe recalls: a query's misses come together (the k of one
    probe are not independent trials, so the binomial error ``sqrt(r (1 - r) / (k p))`` of ``k p``
    trials, the floor here, would understate it; the last floor keeps a recall measured as 1 from
    claiming no error).

    ``tolerance`` (set by the bound kernel from its options; None: ``DEFAULT_PROBES`` lists): the
    share of the true k nearest a query may miss. The first queries of each ``k`` then choose the
    lists probed (:meth:`_calibrate`): the least of ``PROBES`` whose recall on the probes, less two
    standard errors, is at least ``1 - tolerance``, kept in ``breadths_`` by ``(k, tolerance)``;
    ``recall_`` is then that count's.

    Memory: one float32 copy of the samples, written a slice at a time (``4 n d`` bytes), their
    order (``4 n``) and the centres; pickles leave the float32 copy out and gather it again."""

    tolerance = None
    backend = "own inverted lists (k-means; one matrix product per list for all the queries that probe it)"

    def __init__(self, rows, n, d, seed=0, threads=1):
        super().__init__(rows, n, d, None)
        self.threads = threads
        self.centre = rows(np.arange(min(n, CENTRE_ROWS))).mean(axis=0) if n else np.zeros(d)
        labels = _kmeans_labels(_Float32Rows(self), max(1, min(n, int(round(LIST_SCALE * math.sqrt(n))))),
                                threads, seed)
        counts = np.bincount(labels)
        live = np.flatnonzero(counts)
        labels = np.searchsorted(live, labels)  # empty lists dropped
        self.order = np.argsort(labels, kind="stable").astype(np.int32 if n < 2**31 else np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts[live])])
        self.X32 = None
        self._gather()
        # the BLAS that _probe_lists's np.dot calls, loaded so that the engine holds it to one thread
        import scipy.linalg.cython_blas  # noqa: F401
        from scipy import sparse

        member = sparse.csr_matrix((np.ones(n, dtype=np.float32), (labels[self.order], np.arange(n))),
                                   shape=(len(live), n))
        self.centres = np.asarray(member @ self.X32) / counts[live, None].astype(np.float32)
        self.c_sq = np.einsum("ij,ij->i", self.centres, self.centres)
        self.recall_k_ = self.recall_ = self.recall_error_ = None  # measured on the first queries
        self.breadths_ = {}  # (k, tolerance) -> the lists probed

    def _float32(self, idx):
        """The samples ``idx`` less the centre in float32 (formed in float64, rounded once)."""
        P = self.rows(idx)
        return np.subtract(P, self.centre, out=np.empty(P.shape, dtype=np.float32), casting="same_kind")

    def _gather(self):
        """The float32 storage, list after list, a slice at a time: ``(X32, x_sq)``, kept (gathered
        again on first use after a pickle, once the samples are restored)."""
        if self.X32 is None:
            n = self.n_samples_fit_
            X32 = np.empty((n, self.d), dtype=np.float32)
            for s in range(0, n, SLICE):
                X32[s:s + SLICE] = self._float32(self.order[s:s + SLICE])
            self.X32, self.x_sq = X32, np.einsum("ij,ij->i", X32, X32)
        return self.X32, self.x_sq

    def _search(self, Q, m, probes):
        """The ``m`` nearest of each query (float32 order, the samples' numbers) in the ``probes``
        lists of nearest centres (twice as many for a query whose lists hold fewer than ``m``).
        Threads share out the lists, each list read once for all the queries that probe it (threads
        over blocks of queries each read every list: 1.15-1.45x the time on two threads), each
        thread keeping its own candidates; the best ``m`` of them are merged at the end."""
        from .blocks import map_blocks

        L, m, nq = len(self.centres), min(m, self.n_samples_fit_), len(Q)
        probes = min(L, probes)
        X32, x_sq = self._gather()
        Q32 = np.subtract(Q, self.centre, out=np.empty(Q.shape, dtype=np.float32), casting="same_kind")
        lists = np.empty((nq, probes), dtype=np.intp)

        def nearest(rows):
            lists[rows] = _nearest_lists(Q32[rows] @ self.centres.T, self.c_sq, probes)

        threads = max(1, int(self.threads))
        # a block of queries for each thread, its (queries x lists) products 32 MiB at most
        map_blocks(nearest, nq, max(1, min(-(-nq // threads), (8 << 20) // L)), threads)
        queries, first = _group_by_list(lists, L)
        # contiguous ranges of lists of about equal work (queries x samples) for the threads
        work = np.cumsum(np.diff(first) * np.diff(self.starts))
        cuts = np.searchsorted(work, work[-1] * np.arange(1, threads) / threads)
        bounds = np.concatenate([[0], cuts, [L]])
        best_d = np.full((threads, nq, m), np.inf, dtype=np.float32)
        best_i = np.full((threads, nq, m), -1, dtype=np.intp)

        def probe(part):
            t = part.start
            a, b = bounds[t], bounds[t + 1]
            _probe_lists(Q32, X32, x_sq, self.starts, queries, first[a:b + 1], a, best_d[t], best_i[t])

        map_blocks(probe, threads, 1, threads)
        if threads > 1:  # the best m of the threads' candidates
            keep = np.argpartition(best_d.transpose(1, 0, 2).reshape(nq, -1), m - 1, axis=1)[:, :m]
            best_i = np.take_along_axis(best_i.transpose(1, 0, 2).reshape(nq, -1), keep, axis=1)
        else:
            best_i = best_i[0]
        ids = np.where(best_i >= 0, self.order[np.maximum(best_i, 0)], -1)
        short = np.flatnonzero((best_i < 0).any(axis=1))
        if len(short) and probes < L:
            ids[short] = self._search(Q[short], m, 2 * probes)
        return ids

    def kneighbors(self, Q, n_neighbors):
        """``(distances, indices)``: the k nearest found in the ``DEFAULT_PROBES`` lists of nearest
        centres (or as many as a ``tolerance`` chose), re-ranked by exact distances (approximate:
        the true k nearest are found at the rate ``recall_``, measured on the first queries). Only
        the k are re-ranked: the float32 order differs from the exact one only at near ties, and the
        lists probed, not the candidates kept, set the recall."""
        Q = np.asarray(Q, dtype=np.float64)
        k = int(n_neighbors)
        if k > self.n_samples_fit_:
            raise ValueError(f"n_neighbors={k} > n_samples={self.n_samples_fit_}")
        key = (k, self.tolerance)
        if key not in self.breadths_ and self.tolerance is not None and len(Q):
            self.breadths_[key] = self._calibrate(Q, k)
        d2, idx = self._rerank(Q, self._search(Q, k, self.breadths_.get(key, DEFAULT_PROBES)), k)
        if self.recall_ is None and len(Q):
            self._measure_recall(Q, idx[:, :k])
        return np.sqrt(d2[:, :k]), idx[:, :k]

    def _calibrate(self, Q, k):
        """The least count of ``PROBES`` (every list last) whose recall@k on the probes among ``Q``,
        less two standard errors, is at least ``1 - tolerance``; ``recall_`` that count's."""
        rows, truth = self._probes(Q, k)
        L = len(self.centres)
        for probes in sorted({min(p, L) for p in PROBES} | {L}):
            found = self._rerank(Q[rows], self._search(Q[rows], k, probes), k)[1][:, :k]
            self._set_recall(found, truth)
            if self.recall_ - 2.0 * self.recall_error_ >= 1.0 - self.tolerance:
                break
        return probes

    def radius_neighbors(self, Q, radius, return_distance=True, sort_results=False):
        """The samples within ``radius``, by kNN queries doubled (from 32) until the k-th distance
        passes the radius; complete at the lists' recall."""
        Q = np.asarray(Q, dtype=np.float64)
        radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), (len(Q),))
        out_d, out_i = np.empty(len(Q), dtype=object), np.empty(len(Q), dtype=object)
        todo, k = np.arange(len(Q)), min(32, self.n_samples_fit_)
        while len(todo):
            d, i = self.kneighbors(Q[todo], k)
            done = (d[:, -1] > radius[todo]) | (k >= self.n_samples_fit_)
            for r, dd, ii in zip(todo[done], d[done], i[done]):
                inside = dd <= radius[r]
                out_d[r], out_i[r] = dd[inside], ii[inside]
            todo, k = todo[~done], min(2 * k, self.n_samples_fit_)
        return (out_d, out_i) if return_distance else out_i

    def _measure_recall(self, Q, found):
        """``recall_`` (with ``recall_k_`` and ``recall_error_``) of the answers ``found`` to the
        queries ``Q``, on the probes of :meth:`_probes`."""
        rows, truth = self._probes(Q, found.shape[1])
        self._set_recall(found[rows], truth)

    def _probes(self, Q, k):
        """``(rows, truth)``: ``RECALL_PROBES`` of the queries ``Q`` drawn at random and their exact k
        nearest, from the float32 storage (``CANDIDATES k + 1`` by the exact scan's tiled pass,
        :func:`_tiled_candidates`, re-ranked by exact distances)."""
        n = self.n_samples_fit_
        rows = np.sort(np.random.default_rng(0).choice(len(Q), size=min(RECALL_PROBES, len(Q)), replace=False))
        Q32 = np.subtract(Q[rows], self.centre, out=np.empty((len(rows), self.d), dtype=np.float32),
                          casting="same_kind")
        truth, _ = _tiled_candidates(Q32, *self._gather(), min(CANDIDATES * k + 1, n), self.threads)
        return rows, self._rerank(Q[rows], self.order[truth], k)[1][:, :k]

    def _set_recall(self, found, truth):
        """``recall_``: the share of the exact k nearest ``truth`` among the answers ``found`` (one row
        per probe), with its standard error (see the class)."""
        k = truth.shape[1]
        per_query = np.array([len(np.intersect1d(f, t)) for f, t in zip(found, truth)]) / k
        p, r = len(per_query), float(per_query.mean())
        spread = max(float(per_query.var(ddof=1)) if p > 1 else 0.0, r * (1.0 - r) / k, 1.0 / (k * p))
        self.recall_k_, self.recall_, self.recall_error_ = k, r, math.sqrt(spread / p)

    def __getstate__(self):
        state = super().__getstate__()
        state["X32"] = state["x_sq"] = None  # gathered again from the samples
        return state


@njit(nogil=True, cache=True)
def _nearest_lists(G, c_sq, probes):  # pragma: no cover - compiled
    """Per row: the ``probes`` lists of least ``|c|^2 - 2 q.c`` (``G = Q C^T``, overwritten by those
    values, formed a row at a time as in :func:`_select_tile`), by insertion into a short sorted row:
    0.013 s for 10,000 queries, 632 lists and 5 kept, where forming the distances and NumPy's
    argpartition took 0.041-0.054 s."""
    nq, L = G.shape
    out = np.empty((nq, probes), dtype=np.intp)
    best = np.empty(probes, dtype=G.dtype)
    for i in range(nq):
        row = G[i]
        for c in range(L):
            row[c] = c_sq[c] - (row[c] + row[c])
        filled = 0
        for c in range(L):
            v = row[c]
            if filled == probes and v >= best[probes - 1]:
                continue
            p = filled if filled < probes else probes - 1
            while p > 0 and best[p - 1] > v:
                best[p] = best[p - 1]
                out[i, p] = out[i, p - 1]
                p -= 1
            best[p] = v
            out[i, p] = c
            if filled < probes:
                filled += 1
    return out


@njit(nogil=True, cache=True)
def _group_by_list(lists, L):  # pragma: no cover - compiled
    """``(queries, first)``: the queries that probe list ``c`` are ``queries[first[c]:first[c + 1]]``,
    in order (a counting sort: 0.5 ms for 10,000 queries x 10 lists, NumPy's stable argsort 9 ms)."""
    first = np.zeros(L + 1, dtype=np.intp)
    for c in lists.ravel():
        first[c + 1] += 1
    for c in range(L):
        first[c + 1] += first[c]
    fill = first[:-1].copy()
    queries = np.empty(lists.size, dtype=np.intp)
    for i in range(lists.shape[0]):
        for c in lists[i]:
            queries[fill[c]] = i
            fill[c] += 1
    return queries, first


@njit(nogil=True, cache=True)
def _probe_lists(Q32, X32, x_sq, starts, queries, first, c0, best_d, best_i):  # pragma: no cover - compiled
    """For each list ``c = c0 + j``: its queries ``queries[first[j]:first[j + 1]]`` against its
    samples by one matrix product (BLAS, ``TILE_SAMPLES`` samples at a time), their candidates kept
    by :func:`_select_tile`; compiled so that threads over ranges of lists run free of the GIL."""
    d = Q32.shape[1]
    for j in range(len(first) - 1):
        c = c0 + j
        qq = queries[first[j]:first[j + 1]]
        if len(qq) == 0:
            continue
        Qc = np.empty((len(qq), d), dtype=np.float32)
        for r in range(len(qq)):
            Qc[r] = Q32[qq[r]]
        for a in range(starts[c], starts[c + 1], TILE_SAMPLES):
            b = min(a + TILE_SAMPLES, starts[c + 1])
            _select_tile(np.dot(Qc, X32[a:b].T), x_sq[a:b], a, best_d, best_i, qq)


class _Float32Rows:
    """The samples of a :class:`ListIndex` (less its centre, in float32) as the k-means steps read
    them: ``len`` and rows by slice or index array, formed a block at a time (no whole copy)."""

    def __init__(self, index):
        self.index = index

    def __len__(self):
        return self.index.n_samples_fit_

    def __getitem__(self, key):
        n = self.index.n_samples_fit_
        return self.index._float32(np.arange(*key.indices(n)) if isinstance(key, slice) else key)


#: the truncated pass's clusters: about ``CLUSTER_SCALE sqrt(n)`` of them, from ``CLUSTER_ITERATIONS`` Lloyd
#: steps on a sample of ``CLUSTER_SAMPLE`` samples per cluster
CLUSTER_SCALE, CLUSTER_ITERATIONS, CLUSTER_SAMPLE = 2.0, 6, 32
#: the k-means++ seeds of the clusters drawn in this many batches (:func:`_seeds`)
CLUSTER_SEED_ROUNDS = 16
#: rows of one float32 assignment block (samples to their nearest centre)
CLUSTER_BLOCK = 16384


class ClusterIndex:
    """The samples partitioned into clusters for the truncated pass
    (:func:`~localkit.engine.passes.neighbors.truncated_path`), in the engine's coordinates ``X``:
    each cluster's centre ``c`` (its members' mean), radius ``r_c = max |x_j - c|`` over its members
    and weight ``W_c = sum_j c_j`` (``weight``: the samples' ``c_j``, 1 without). By the triangle
    inequality every member of a cluster is at least ``max(0, |q - c| - r_c)`` from a query ``q``
    (:meth:`lower_sq`), so under a profile that never grows with the distance the cluster weighs at
    most ``W_c k(max(0, |q - c| - r_c) / h)``, whatever the partition: a bound on what a sum that
    leaves it out omits, for any data.

    The partition is k-means (``CLUSTER_SCALE sqrt(n)`` clusters, Lloyd's steps in float32 on a
    sample, seeded as k-means++ seeds (:func:`_seeds`); its quality sets how much the bound prunes, never whether
    it holds). Memory: the order of the samples by cluster and ``O(sqrt(n) d)`` for the centres,
    never a copy of the samples (the pass gathers a cluster's rows when it visits it)."""

    def __init__(self, X, weight=None, threads=1, seed=0):
        n, d = X.shape
        labels = _kmeans_labels(X, max(1, min(n, int(round(CLUSTER_SCALE * math.sqrt(n))))), threads, seed)
        counts = np.bincount(labels)
        live = np.flatnonzero(counts)
        labels = np.searchsorted(live, labels)  # empty clusters dropped
        counts = counts[live]
        self.n_clusters = len(live)
        self.order = np.argsort(labels, kind="stable")
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        from scipy import sparse

        member = sparse.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(self.n_clusters, n))
        self.centres = np.asarray(member @ np.asarray(X, dtype=np.float64)) / counts[:, None]
        radius = np.zeros(self.n_clusters)
        for s in range(0, n, CLUSTER_BLOCK):
            diff = np.asarray(X[s:s + CLUSTER_BLOCK], dtype=np.float64) - self.centres[labels[s:s + CLUSTER_BLOCK]]
            np.maximum.at(radius, labels[s:s + CLUSTER_BLOCK], np.sqrt(np.einsum("ij,ij->i", diff, diff)))
        # the rounding of |x - c| (relative (d + 4) eps at most) taken on the radius's side
        self.radius = radius * (1.0 + (d + 4) * np.finfo(np.float64).eps)
        self.c_sq = np.einsum("ij,ij->i", self.centres, self.centres)
        mass = counts.astype(np.float64) if weight is None else np.bincount(labels, weights=weight)
        with np.errstate(divide="ignore"):
            self.log_mass = np.log(mass)

    def members(self, c):
        """The samples of cluster ``c``."""
        return self.order[self.starts[c]:self.starts[c + 1]]

    def lower_sq(self, Q):
        """``(n_queries, n_clusters)``: ``max(0, |q - c| - r_c)^2``, a lower bound on the squared
        distance from each query to every member of each cluster (engine coordinates; ``|q - c|^2``
        from one matrix product in float64, less its error bound ``2 (d + 4) eps (|q| + |c|)^2``; 0
        where a query is not finite)."""
        Q = np.asarray(Q, dtype=np.float64)
        q_sq = np.einsum("ij,ij->i", Q, Q)
        with np.errstate(invalid="ignore", over="ignore"):
            d2 = q_sq[:, None] - 2.0 * (Q @ self.centres.T) + self.c_sq
            err = 2.0 * (Q.shape[1] + 4) * np.finfo(np.float64).eps * (np.sqrt(q_sq)[:, None] + np.sqrt(self.c_sq)) ** 2
            low = np.maximum(np.sqrt(np.maximum(d2 - err, 0.0)) - self.radius, 0.0)
        return np.where(np.isfinite(low), low, 0.0) ** 2


# Our own Lloyd's steps, not scikit-learn's KMeans: on 200,000 x 64 clustered samples (447
# clusters, one thread) the clusters and labels took 1.8 s here against 3.4 s for KMeans(n_init=1,
# max_iter=6) on the same sample, radii alike (median 9.94 both, 95th percentile 50.1 against 46.9).
def _kmeans_labels(X, n_clusters, threads, seed):
    """Labels of the samples ``X`` in ``n_clusters`` clusters: Lloyd's steps in float32 on
    ``CLUSTER_SAMPLE`` samples per cluster drawn at random, started from ``n_clusters`` of them, then
    every sample to its nearest centre."""
    from scipy import sparse

    rng = np.random.default_rng(seed)
    n = len(X)
    sample = np.asarray(X[np.sort(rng.choice(n, size=min(n, CLUSTER_SAMPLE * n_clusters), replace=False))],
                        dtype=np.float32)
    centres = _seeds(sample, n_clusters, rng, threads)
    for _ in range(CLUSTER_ITERATIONS):
        labels = _nearest_centre(sample, centres, threads)
        member = sparse.csr_matrix((np.ones(len(sample), dtype=np.float32), (labels, np.arange(len(sample)))),
                                   shape=(n_clusters, len(sample)))
        counts = np.bincount(labels, minlength=n_clusters)[:, None]
        centres = np.where(counts > 0, np.asarray(member @ sample) / np.maximum(counts, 1), centres).astype(np.float32)
    return _nearest_centre(X, centres, threads)


def _seeds(sample, n_clusters, rng, threads):
    """``n_clusters`` rows of ``sample`` drawn as k-means++ draws them, with probability proportional
    to the squared distance to the nearest drawn so far, in ``CLUSTER_SEED_ROUNDS`` batches
    (as k-means|| does: one matrix product per batch): clusters far apart each get their own seed,
    where seeds drawn uniformly leave some without and merge them into wide clusters."""
    from .blocks import map_blocks

    batch = max(1, -(-n_clusters // CLUSTER_SEED_ROUNDS))
    chosen = [rng.integers(len(sample))]
    s_sq = np.einsum("ij,ij->i", sample, sample)
    near = np.maximum(s_sq - 2.0 * (sample @ sample[chosen[0]]) + s_sq[chosen[0]], 0.0).astype(np.float64)
    while len(chosen) < n_clusters:
        p = near / near.sum() if near.sum() > 0 else None
        new = rng.choice(len(sample), size=min(batch, n_clusters - len(chosen)), replace=False,
                         p=None if p is None or np.count_nonzero(p) < batch else p)
        chosen.extend(new.tolist())
        C = sample[new]

        def run(rows, C=C):
            d2 = s_sq[rows, None] - 2.0 * (sample[rows] @ C.T) + np.einsum("ij,ij->i", C, C)
            np.minimum(near[rows], np.maximum(d2.min(axis=1), 0.0), out=near[rows])

        map_blocks(run, len(sample), CLUSTER_BLOCK, threads)
    return sample[np.asarray(chosen)]


def _nearest_centre(X, centres, threads):
    """The nearest of ``centres`` to each row of ``X`` (float32 products, blocks on ``threads`` threads)."""
    from .blocks import map_blocks

    out = np.empty(len(X), dtype=np.intp)
    c_sq = np.einsum("ij,ij->i", centres, centres)

    def run(rows):
        G = np.asarray(X[rows], dtype=np.float32) @ centres.T
        G *= -2.0
        G += c_sq
        out[rows] = np.argmin(G, axis=1)

    # a block's (rows x centres) products at most 16 MiB: 2,000 centres of a million samples took
    # 262 MiB in blocks of CLUSTER_BLOCK rows
    map_blocks(run, len(X), max(1, min(CLUSTER_BLOCK, (4 << 20) // max(1, len(centres)))), threads)
    return out


def _euclidean(metric, p):
    return metric == "euclidean" or (metric == "minkowski" and p == 2)


def scan_applies(Xshape, metric, p, sparse=False):
    """Whether the exact scan serves a neighbour index: dense samples, the euclidean metric, at least
    ``SCAN_MIN_FEATURES`` features and ``SCAN_MIN_SAMPLES`` samples."""
    n, d = Xshape
    return not sparse and _euclidean(metric, p) and d >= SCAN_MIN_FEATURES and n >= SCAN_MIN_SAMPLES


def small_scan_applies(Xshape, metric, p, sparse=False):
    """Whether the exact scan, the k-d tree its reference, serves few samples: dense, euclidean, at
    most ``SMALL_SCAN_MAX_SAMPLES`` of them in ``SMALL_SCAN_FEATURES`` features (see the module)."""
    n, d = Xshape
    lo, hi = SMALL_SCAN_FEATURES
    return not sparse and _euclidean(metric, p) and lo <= d <= hi and n <= SMALL_SCAN_MAX_SAMPLES
