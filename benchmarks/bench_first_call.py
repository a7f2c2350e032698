"""The first call of the tour's compiled paths in a fresh process, on a cold numba cache (an empty
``NUMBA_CACHE_DIR``: what a fresh install pays once) and on a warm one (the same directory again:
every later process), against the same call once compiled (the second call in the process).

Each path runs in its own process after its imports (import time is not counted), so that one
path's compilation does not pay for another's; the cold directory is shared by the paths in turn,
as the tour shares it. Times are single runs (compilation is not repeatable within a process).
"""
import json
import os
import subprocess
import sys
import tempfile

TITLE = "First call of the tour's compiled paths: cold and warm numba cache"

#: path name -> (setup code, the call timed)
PATHS = {
    "kernel density, Epanechnikov (compiled compact pass), iris": (
        "from sklearn.datasets import load_iris\nfrom localkit import kernel_density\n"
        "X = load_iris().data[:, :2]", "kernel_density(X, X, 'epanechnikov', 0.73, algorithm='compiled')"),
    "LOESS 1-D, frac=0.3 (fused windows)": (
        "import numpy as np\nfrom localkit import LocalPolynomialRegressor\n"
        "x = np.linspace(0, 6, 2000)[:, None]\ny = np.sin(x[:, 0])",
        "LocalPolynomialRegressor(frac=0.3).fit(x, y).predict(x[:50])"),
    "LOESS 2-D, frac=0.2 (compiled grid)": (
        "import numpy as np\nfrom localkit import LocalPolynomialRegressor\n"
        "X = np.random.default_rng(0).random((2000, 2))\ny = X.sum(axis=1)",
        "LocalPolynomialRegressor(frac=0.2).fit(X, y).predict(X[:50])"),
    "non-local means, 64x64": (
        "import numpy as np\nfrom localkit import denoise_nl_means\nimg = np.random.default_rng(0).random((64, 64))",
        "denoise_nl_means(img, 5, 4, 0.1)"),
    "attention, Epanechnikov (compiled CPU pass)": (
        "import torch\nfrom localkit.nn import kernel_attention\nq = torch.randn(1, 2, 256, 16)",
        "kernel_attention(q, q, q, kernel='epanechnikov', bandwidth=4.0)"),
}

_CHILD = """
import json, time
{setup}
t0 = time.perf_counter(); {call}; first = time.perf_counter() - t0
t0 = time.perf_counter(); {call}; second = time.perf_counter() - t0
print(json.dumps([first, second]))
"""


def _run(setup, call, cache_dir):
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "LOCALKIT_QUIET": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD.format(setup=setup, call=call)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(paths=PATHS):
    """``{name: (cold first call, warm first call, compiled call)}`` in seconds."""
    rows = {}
    with tempfile.TemporaryDirectory(prefix="localkit-numba-cold-") as cache:
        for name, (setup, call) in paths.items():
            cold, compiled = _run(setup, call, cache)
            warm, _ = _run(setup, call, cache)
            rows[name] = (cold, warm, compiled)
    return rows


def run(quick=False):
    rows = measure()
    load = os.getloadavg()[0]
    lines = [f"Each path in its own process after its imports; cold: an empty `NUMBA_CACHE_DIR`, warm: the same "
             f"directory again; single runs, load average {load:.1f} at the end.", "",
             "| compiled path | first call, cold cache | first call, warm cache | compiled call |",
             "|---|---|---|---|"]
    for name, (cold, warm, compiled) in rows.items():
        lines.append(f"| {name} | {cold:.2f} s | {warm:.2f} s | {compiled * 1e3:.1f} ms |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
