"""R references of issue 39, called through ``Rscript`` when R and the package are present:
``quantreg::lprq`` (local linear quantile regression) and ``ks::Hpi`` / ``ks::Hscv`` (bandwidth
matrices). The tests keep R's outputs pasted beside these calls, so that they run without R."""
from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np

from r_reference import have_r


def have_r_package(name):
    """True when ``Rscript`` is on the PATH and R's package ``name`` loads."""
    if not have_r():
        return False
    done = subprocess.run(["Rscript", "--vanilla", "-e", f"suppressMessages(library({name}))"], capture_output=True,
                          timeout=120)
    return done.returncode == 0


def _run(script, arrays):
    """Run ``script`` with ``dir`` set to a folder holding ``arrays`` as ``NAME.bin`` (float64);
    returns the float64 contents of ``out.bin`` it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, a in arrays.items():
            np.asarray(a, dtype="<f8").ravel(order="F").tofile(os.path.join(tmp, f"{name}.bin"))
        path = os.path.join(tmp, "run.R")
        with open(path, "w") as f:
            f.write(f'dir <- "{tmp}"\nrd <- function(name, n) readBin(file.path(dir, name), "double", n)\n' + script)
        subprocess.run(["Rscript", "--vanilla", path], check=True, capture_output=True, timeout=600)
        return np.fromfile(os.path.join(tmp, "out.bin"), dtype="<f8")


def r_lprq(x, y, h, tau, m=50):
    """R's ``quantreg::lprq(x, y, h, tau, m)``: ``(xx, fv)``, the ``m`` equally spaced points and
    the local linear quantile fits there."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    out = _run(f"""suppressMessages(library(quantreg))
fit <- lprq(rd("x.bin", {len(x)}), rd("y.bin", {len(y)}), h = {float(h)!r}, tau = {float(tau)!r}, m = {int(m)})
writeBin(as.double(c(fit$xx, fit$fv)), file.path(dir, "out.bin"))""", {"x": x, "y": y})
    return out[:m], out[m:]


def r_ks_bandwidth(X, selector, pilot=None):
    """R's ``ks::Hpi(X)`` or ``ks::Hscv(X)`` (``selector``: "Hpi" or "Hscv", their defaults unless
    ``pilot`` is given): the bandwidth matrix (d, d)."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    extra = "" if pilot is None else f', pilot = "{pilot}"'
    out = _run(f"""suppressMessages(library(ks))
X <- matrix(rd("X.bin", {n * d}), {n}, {d})
H <- {selector}(X{extra})
writeBin(as.double(H), file.path(dir, "out.bin"))""", {"X": X})
    return out.reshape(d, d)
