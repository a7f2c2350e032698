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
    shared machine's load falls on all of them alike; ``warmup`` runs each once untimed first."""
    if warmup:
        for f in funcs:
            f()
    times = [[] for _ in funcs]
    results = [None] * len(funcs)
    for _ in range(repeat):
        for i, f in enumerate(funcs):
            t0 = time.perf_counter()
            results[i] = f()
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times], results
