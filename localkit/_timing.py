"""Wall-clock timing for the tour and the benchmarks: medians of repeats."""
from __future__ import annotations

import time

import numpy as np


def median_time(func, repeat=1):
    """``(result, seconds)``: the last result of ``func()`` and the median time of ``repeat`` runs."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - t0)
    return result, float(np.median(times))


def interleaved(funcs, repeat, warmup=False):
    """``(medians, results)`` of several functions run alternately within each repeat, so that a
    shared machine's load falls on all of them alike, each repeat starting with the next function
    (the first call of a repeat was measured up to 1.5x slower, whichever it was: caches the
    others had filled); ``warmup`` runs each once untimed first."""
    if warmup:
        for f in funcs:
            f()
    times = [[] for _ in funcs]
    results = [None] * len(funcs)
    for r in range(repeat):
        for j in range(len(funcs)):
            i = (r + j) % len(funcs)
            t0 = time.perf_counter()
            results[i] = funcs[i]()
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times], results


def machine_rates(size=1 << 20, repeat=5):
    """The arithmetic limits a pairwise pass runs against, per dtype (float32, float64): ``exp``
    results per second (NumPy's, on normal-range arguments, one thread) and fused multiply-adds
    per second (a BLAS matrix product, 1024^2 by 1024, on BLAS's threads). Medians of ``repeat``."""
    rng = np.random.default_rng(0)
    rates = {}
    for dtype in (np.float32, np.float64):
        x = rng.uniform(-20.0, 0.0, size).astype(dtype)
        out = np.empty_like(x)
        _, t_exp = median_time(lambda: np.exp(x, out=out), repeat)
        A = rng.normal(size=(1024, 1024)).astype(dtype)
        _, t_fma = median_time(lambda: A @ A, repeat)
        rates[np.dtype(dtype).name] = {"exp": size / t_exp, "fma": 1024.0 ** 3 / t_fma}
    return rates


def rates_line(rates):
    """One markdown line: the measured ``exp`` and FMA rates (see :func:`machine_rates`)."""
    parts = [f"{name}: exp {r['exp'] / 1e9:.2f} G/s, FMA {r['fma'] / 1e9:.1f} G/s" for name, r in rates.items()]
    return "Machine limits measured in the same run: " + "; ".join(parts) + "."
