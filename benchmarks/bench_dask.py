"""Scale-out on dask: the same local mean on 1 and 2 worker processes of a LocalCluster, and a
sample set twice as large as one worker's memory limit.

Each worker has one thread (``threads_per_worker=1``); its tasks are limited to one native thread,
so the two-worker cluster uses both cores and the one-worker cluster one. The samples are
generated on the workers (``dask.array.random``) and persisted before timing, so the timings are
the engine's pass, not the transfer of the data. The runs on the two clusters alternate within
each repeat, so that the load of the shared machine falls on both alike.
"""
import os
import resource

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster

from localkit import kernel_density, local_mean
from localkit._timing import interleaved, median_time

TITLE = "Scale-out on dask: 1 vs 2 worker processes; a sample set larger than a worker's memory"


def _cluster(n_workers, memory_limit="2GB"):
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                           dashboard_address=":0")
    return cluster, Client(cluster, set_as_default=False)


def _peak_rss_mib(client):
    """The peak resident memory of each worker process so far (Linux reports KiB)."""
    return [v / 1024 for v in client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).values()]


def _speedup(n_q, n_s, d, h, repeat):
    rng = da.random.RandomState(0)
    Q, X = rng.normal(size=(n_q, d), chunks=(n_q // 4, d)), rng.normal(size=(n_s, d), chunks=(n_s // 8, d))
    y = X[:, 0] ** 2 + X[:, 1]
    clusters = [_cluster(1), _cluster(2)]
    try:
        data = [c.persist([Q, X, y]) for _, c in clusters]
        for (_, c), arrays in zip(clusters, data):
            c.compute(local_mean(arrays[0][:8], arrays[1][:1000], arrays[2][:1000], bandwidth=h)).result()  # warm up
        runs = [lambda c=c, a=a: c.compute(local_mean(a[0], a[1], a[2], bandwidth=h)).result()
                for (_, c), a in zip(clusters, data)]
        (t1, t2), (m1, m2) = interleaved(runs, repeat)
        Qn, Xn, yn = (np.asarray(a) for a in clusters[0][1].compute(data[0], sync=True))
    finally:
        for cluster, c in clusters:
            c.close()
            cluster.close()
    ref, t_mem = median_time(lambda: local_mean(Qn, Xn, yn, bandwidth=h, n_jobs=1), 1)
    rel = max(np.max(np.abs(m - ref) / np.abs(ref)) for m in (m1, m2))
    return t1, t2, t_mem, rel


def _numpy_chunks(n_s=2_000_000, d=3, h=0.5, query_counts=(2, 200), repeat=7):
    """The fixed cost of a cluster: ``local_mean`` over NumPy samples cut into 8 chunks
    (``dask.array.from_array``, sent with every call, and persisted on the worker) on a one-worker
    cluster, against the same call in memory (one thread), interleaved medians. Rows of markdown."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_s, d))
    y = X[:, 0] ** 2 + X[:, 1]
    Q = rng.normal(size=(max(query_counts), d))
    cluster, client = _cluster(1)
    rows = []
    try:
        Xd, yd = da.from_array(X, chunks=(n_s // 8, d)), da.from_array(y, chunks=n_s // 8)
        Xp, yp = client.persist([Xd, yd])
        for m in query_counts:
            runs = [lambda m=m: local_mean(Q[:m], X, y, bandwidth=h, n_jobs=1),
                    lambda m=m: client.compute(local_mean(Q[:m], Xd, yd, bandwidth=h)).result(),
                    lambda m=m: client.compute(local_mean(Q[:m], Xp, yp, bandwidth=h)).result()]
            (t_mem, t_sent, t_kept), (ref, sent, kept) = interleaved(runs, repeat, warmup=True)
            diff = max(np.max(np.abs(sent - ref) / np.abs(ref)), np.max(np.abs(kept - ref) / np.abs(ref)))
            rows.append(f"| {m:,} | {t_mem * 1e3:.0f} ms | {t_sent * 1e3:.0f} ms ({t_sent / t_mem:.2f}x) | "
                        f"{t_kept * 1e3:.0f} ms ({t_kept / t_mem:.2f}x) | {diff:.1e} |")
    finally:
        client.close()
        cluster.close()
    return rows


def numpy_chunks_table():
    return "\n".join([
        "Gaussian local mean of 2,000,000 x 3 NumPy samples (h = 0.5) cut into 8 chunks by "
        "`dask.array.from_array`, on a one-worker cluster (one thread), against the same call in memory "
        f"(`n_jobs=1`); medians of 7 interleaved runs, load average {os.getloadavg()[0]:.1f} at the end:", "",
        "| queries | in memory | chunks sent with the call | chunks persisted on the worker | max rel. diff |",
        "|---|---|---|---|---|", *_numpy_chunks()])


def _larger_than_a_worker(n_s, d, n_q, h, memory_limit):
    cluster, client = _cluster(2, memory_limit)
    try:
        X = da.random.RandomState(1).normal(size=(n_s, d), chunks=(n_s // 128, d))  # generated chunk by chunk
        Q = np.zeros((n_q, d))
        Q[:, 0] = np.linspace(-2, 2, n_q)
        p, t = median_time(lambda: client.compute(kernel_density(Q, X, "gaussian", h)).result(), 1)
        peak = _peak_rss_mib(client)
        alive = len(client.scheduler_info()["workers"])
    finally:
        client.close()
        cluster.close()
    # the samples are N(0, I): the Gaussian KDE's expectation is the N(0, (1 + h^2) I) density
    s2 = 1 + h * h
    expected = np.exp(-0.5 * np.sum(Q ** 2, axis=1) / s2) / (2 * np.pi * s2) ** (d / 2)
    return X.nbytes, t, peak, alive, np.max(np.abs(p / expected - 1))


def run(quick=False):
    n_q, n_s, d, h = (800, 80_000, 4, 0.5) if quick else (4_000, 400_000, 4, 0.5)
    repeat = 1  # one 1-worker run takes minutes when the 2 cores are shared with other jobs
    t1, t2, t_mem, rel = _speedup(n_q, n_s, d, h, repeat)
    limit = 600e6
    big = 20_000_000 if quick else 40_000_000  # x 4 features x 8 bytes: 0.64 / 1.28 GB
    nbytes, t_big, peak, alive, dev = _larger_than_a_worker(big, d, 16, 0.5, limit)
    lines = [f"Gaussian local mean, {n_q:,} queries x {n_s:,} samples, d = {d}, h = {h}, generated and persisted "
             "on the workers; one thread per worker. The machine has 2 cores shared with other jobs (load "
             f"average {os.getloadavg()[0]:.1f} at the end), so absolute times are noisy: the two clusters "
             f"run alternately, {'one run each' if repeat == 1 else f'medians of {repeat}'}.", "",
             "| run | time (s) | speed-up vs 1 worker | max rel. diff vs in-memory |", "|---|---|---|---|",
             f"| in memory, 1 thread (`n_jobs=1`) | {t_mem:.2f} | {t1 / t_mem:.2f}x | - |",
             f"| LocalCluster, 1 worker process | {t1:.2f} | 1.00x | {rel:.1e} |",
             f"| LocalCluster, 2 worker processes | {t2:.2f} | **{t1 / t2:.2f}x** | {rel:.1e} |", "",
             f"Larger than a worker: Gaussian kernel density at 16 queries over {big:,} samples in {d}-D "
             f"({nbytes / 1e9:.2f} GB, {nbytes / limit:.1f}x a worker's memory_limit of {limit / 1e6:.0f} MB), "
             "generated by `dask.array.random` in 128 chunks on 2 workers:", "",
             "| time (s) | peak worker memory (MiB) | workers alive after | max rel. deviation from the exact KDE "
             "expectation |", "|---|---|---|---|",
             f"| {t_big:.1f} | {', '.join(f'{m:.0f}' for m in peak)} | {alive} / 2 | {dev:.1e} (sampling noise) |"]
    return "\n".join(lines + ["", numpy_chunks_table()])


if __name__ == "__main__":
    import sys

    print(numpy_chunks_table() if sys.argv[1:] == ["numpy_chunks"] else run(quick=True))
