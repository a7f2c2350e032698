"""R's ``loess`` (Cleveland and Grosse's reference code) and ``bw.SJ`` (base package ``stats``) as references for
tests and benchmarks, called through ``Rscript`` with the data in temporary binary files."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np

SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
meta <- scan(file.path(dir, "meta.txt"), what = "", quiet = TRUE)
n <- as.integer(meta[1]); d <- as.integer(meta[2]); m <- as.integer(meta[3])
span <- as.numeric(meta[4]); degree <- as.integer(meta[5]); surface <- meta[6]
family <- meta[7]; repeats <- as.integer(meta[8]); normalize <- meta[9] == "TRUE"
rd <- function(name, count) readBin(file.path(dir, name), "double", count)
X <- matrix(rd("X.bin", n * d), n, d)
y <- rd("y.bin", n)
w <- rd("w.bin", n)
Q <- matrix(rd("Q.bin", m * d), m, d)
df <- data.frame(X, y = y)
form <- as.formula(paste("y ~", paste(colnames(df)[1:d], collapse = " * ")))
ctl <- loess.control(surface = surface, statistics = "approximate", cell = 0.2)
times <- numeric(repeats)
for (r in seq_len(repeats)) {
  t0 <- proc.time()[["elapsed"]]
  fit <- loess(form, data = df, weights = w, span = span, degree = degree, family = family,
               normalize = normalize, control = ctl)
  fitted_values <- fitted(fit)
  times[r] <- proc.time()[["elapsed"]] - t0
}
newdata <- as.data.frame(Q)
colnames(newdata) <- colnames(df)[1:d]
pred <- predict(fit, newdata = newdata)
writeBin(as.double(fitted_values), file.path(dir, "fitted.bin"))
writeBin(as.double(pred), file.path(dir, "pred.bin"))
writeBin(as.double(times), file.path(dir, "times.bin"))
"""


def have_r():
    """True when ``Rscript`` is on the PATH."""
    return shutil.which("Rscript") is not None


def r_loess(X, y, queries=None, *, span=0.75, degree=1, surface="direct", robust=False,
            sample_weight=None, repeats=1, normalize=False):
    """R's ``loess`` on ``(X, y)``: returns ``(fitted at X, predicted at queries, seconds)``.

    ``seconds`` is the median over ``repeats`` of the time of ``loess()`` plus ``fitted()``
    inside R (no process start-up, no file transfer). ``robust`` is ``family="symmetric"``
    (R's default ``iterations = 4``: the fit and 3 robustness iterations). Predictions outside
    the interpolation box are NaN, as R returns them.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    Q = X[:1] if queries is None else np.asarray(queries, dtype=np.float64)
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    with tempfile.TemporaryDirectory() as tmp:
        for name, arr in (("X", X), ("y", y), ("w", w), ("Q", Q)):
            np.asarray(arr, dtype="<f8").ravel(order="F").tofile(os.path.join(tmp, f"{name}.bin"))
        with open(os.path.join(tmp, "meta.txt"), "w") as f:
            f.write(f"{n} {d} {len(Q)} {span!r} {degree} {surface} {'symmetric' if robust else 'gaussian'} "
                    f"{repeats} {'TRUE' if normalize else 'FALSE'}\n")
        script = os.path.join(tmp, "run.R")
        with open(script, "w") as f:
            f.write(SCRIPT)
        subprocess.run(["Rscript", "--vanilla", script, tmp], check=True, capture_output=True, timeout=600)
        read = lambda name: np.fromfile(os.path.join(tmp, name), dtype="<f8")  # noqa: E731
        fitted, pred, times = read("fitted.bin"), read("pred.bin"), read("times.bin")
    return fitted, (None if queries is None else pred), float(np.median(times))


BW_SJ_SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
n <- as.integer(args[2]); repeats <- as.integer(args[3])
x <- readBin(file.path(dir, "x.bin"), "double", n)
times <- numeric(repeats)
for (r in seq_len(repeats)) {
  times[r] <- system.time(h <- bw.SJ(x))[["elapsed"]]
}
writeBin(c(h, times), file.path(dir, "out.bin"))
cat(R.version.string, "\n")
"""


def r_bw_sj(x, repeats=1):
    """R's ``bw.SJ(x)`` (its defaults: method "ste", ``nb = 1000``): returns ``(h, seconds, version)``.

    ``x`` travels as little-endian float64 (``x.astype("<f8").tofile(f)``; R:
    ``readBin(f, "double", n)``), so R sees exactly these doubles; ``h`` comes back the same way.
    ``seconds`` is the median over ``repeats`` of ``system.time(bw.SJ(x))`` inside R (no process
    start-up, no file transfer); ``version`` is ``R.version.string``.
    """
    x = np.asarray(x, dtype="<f8").ravel()
    with tempfile.TemporaryDirectory() as tmp:
        x.tofile(os.path.join(tmp, "x.bin"))
        script = os.path.join(tmp, "run.R")
        with open(script, "w") as f:
            f.write(BW_SJ_SCRIPT)
        done = subprocess.run(["Rscript", "--vanilla", script, tmp, str(x.size), str(repeats)], check=True,
                              capture_output=True, text=True, timeout=600)
        out = np.fromfile(os.path.join(tmp, "out.bin"), dtype="<f8")
    return float(out[0]), float(np.median(out[1:])), done.stdout.strip()


LOCPOLY_SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
n <- as.integer(args[2]); drv <- as.integer(args[3]); degree <- as.integer(args[4])
bandwidth <- as.numeric(args[5]); gridsize <- as.integer(args[6]); repeats <- as.integer(args[7])
suppressPackageStartupMessages(library(KernSmooth))
x <- readBin(file.path(dir, "x.bin"), "double", n)
y <- readBin(file.path(dir, "y.bin"), "double", n)
times <- numeric(repeats)
for (r in seq_len(repeats)) {
  times[r] <- system.time(fit <- locpoly(x, y, drv = drv, degree = degree, bandwidth = bandwidth,
                                         gridsize = gridsize))[["elapsed"]]
}
writeBin(c(fit$x, fit$y, times), file.path(dir, "out.bin"))
cat(R.version.string, "; KernSmooth", as.character(packageVersion("KernSmooth")), "\n")
"""


def have_kernsmooth():
    """True when ``Rscript`` is on the PATH and R's KernSmooth package loads."""
    if not have_r():
        return False
    done = subprocess.run(["Rscript", "--vanilla", "-e", "library(KernSmooth)"], capture_output=True, timeout=120)
    return done.returncode == 0


def r_locpoly(x, y, *, drv=0, degree=1, bandwidth, gridsize=401, repeats=1):
    """R's ``KernSmooth::locpoly(x, y, drv, degree, bandwidth, gridsize)`` with its defaults
    (``kernel = "normal"``, ``range.x = range(x)``, ``truncate = TRUE``, no ``binned``): returns
    ``(grid, estimate, seconds, version)``.

    KernSmooth's conventions: the grid is ``seq(min(x), max(x), length = gridsize)``; the
    bandwidth is the Gaussian's standard deviation, the kernel truncated at 4 of them (``tau = 4``:
    grid offsets ``|j| <= floor(4 h / delta)``); the data are binned linearly (``rlbin``) and the
    moments summed directly over the truncated kernel at every grid point; ``drv = r`` returns
    ``r! beta_r``. ``seconds`` is the median over ``repeats`` of ``system.time(locpoly(...))``
    inside R (no process start-up, no file transfer); ``version`` names R and KernSmooth.
    """
    x = np.asarray(x, dtype="<f8").ravel()
    y = np.asarray(y, dtype="<f8").ravel()
    with tempfile.TemporaryDirectory() as tmp:
        x.tofile(os.path.join(tmp, "x.bin"))
        y.tofile(os.path.join(tmp, "y.bin"))
        script = os.path.join(tmp, "run.R")
        with open(script, "w") as f:
            f.write(LOCPOLY_SCRIPT)
        done = subprocess.run(["Rscript", "--vanilla", script, tmp, str(x.size), str(int(drv)), str(int(degree)),
                               repr(float(bandwidth)), str(int(gridsize)), str(int(repeats))],
                              check=True, capture_output=True, text=True, timeout=600)
        out = np.fromfile(os.path.join(tmp, "out.bin"), dtype="<f8")
    m = int(gridsize)
    return out[:m], out[m:2 * m], float(np.median(out[2 * m:])), done.stdout.strip()


def r_lowess(x, y, f, iterations, delta=0.0):
    """R's ``lowess(x, y, f, iter, delta)`` (``stats::lowess``, Cleveland's ``clowess``): the fitted
    values in the order of ``x`` (R returns them sorted by ``x``). ``delta=None``: R's default,
    ``0.01 * diff(range(x))``."""
    with tempfile.TemporaryDirectory() as tmp:
        np.asarray(np.c_[x, y], dtype="<f8").tofile(os.path.join(tmp, "xy.bin"))
        script = os.path.join(tmp, "run.R")
        delta_arg = "" if delta is None else f", delta = {float(delta)!r}"
        with open(script, "w") as fh:
            fh.write(f"""xy <- matrix(readBin(file.path("{tmp}", "xy.bin"), "double", {2 * len(x)}), ncol = 2,
                                    byrow = TRUE)
                       o <- order(xy[, 1])
                       fit <- lowess(xy[, 1], xy[, 2], f = {float(f)!r}, iter = {int(iterations)}{delta_arg})$y
                       out <- numeric(length(o)); out[o] <- fit
                       writeBin(as.double(out), file.path("{tmp}", "fit.bin"))""")
        subprocess.run(["Rscript", "--vanilla", script], check=True, capture_output=True, timeout=120)
        return np.fromfile(os.path.join(tmp, "fit.bin"), dtype="<f8")
