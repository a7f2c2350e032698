"""Joint cross-validated bandwidths of a continuous x unordered x ordered product kernel at scale
(issue 39): the exact search (engine passes with the analytic gradient) against the search on
cell sums (``tolerance=1e-6``: categorical cells, binned Gaussian sums), one thread.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_cv_scale.py [n ...]

For each ``n``: the seconds of each search and the exact leave-one-out loss at the bandwidths each
chose (the cell search's loss re-evaluated by the exact engine pass).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from localkit import Kernel, LocalMeanRegressor
from localkit.models.kernel_learning import squared_loss
from localkit.engine import EngineOptions


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.normal(size=n), rng.integers(0, 4, n), rng.integers(0, 5, n)].astype(float)
    y = np.sin(2 * X[:, 0]) + 0.4 * (X[:, 1] == 2) + 0.2 * X[:, 2] + 0.5 * rng.normal(size=n)
    return X, y


KERNEL = (Kernel("gaussian", bandwidth="cv", features=[0]) * Kernel("aitchison_aitken", bandwidth="cv", features=[1])
          * Kernel("wang_ryzin", bandwidth="cv", features=[2]))


def search(X, y, tolerance):
    t = time.perf_counter()
    reg = LocalMeanRegressor(kernel=KERNEL, tolerance=tolerance).fit(X, y)
    seconds = time.perf_counter() - t
    exact = squared_loss(reg.kernel_, X, y[:, None], None, EngineOptions())
    return seconds, exact, reg.kernel_


def main(sizes):
    for n in sizes:
        X, y = data(n)
        rows = [("cells", *search(X, y, 1e-6))]
        if n <= 2000:
            rows.append(("exact", *search(X, y, None)))
        for name, seconds, loss, kernel in rows:
            print(f"n={n:6d} {name:6s} {seconds:8.2f} s  exact LOO loss {loss:.10f}  {kernel!r}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 10000])
