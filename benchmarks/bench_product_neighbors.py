"""Product kernels with a compact factor: the neighbour path (candidates from the compact
factor's support, the product's log-weights on them) against the dense path, in one process,
interleaved, on statsmodels' ``fair`` data (6,366 samples), leave-one-out at every sample."""

import os

import numpy as np
from localkit._timing import interleaved

TITLE = "Product kernels with a compact factor: neighbour path against dense path (statsmodels fair)"


def run(quick=False):
    from statsmodels.datasets import fair

    from localkit import Kernel
    from localkit.engine import BoundKernel, EngineOptions

    repeat = 3 if quick else 7
    data = fair.load_pandas().data
    X = data[["age", "yrs_married", "educ", "children", "occupation", "religious"]].to_numpy(float)
    y = data["affairs"].to_numpy(float)
    cases = [
        ("epanechnikov [age, yrs_married, educ] h = (3, 3.2, 1.5) x gaussian [children] x aitchison_aitken "
         "[occupation] x wang_ryzin [religious]",
         Kernel("epanechnikov", bandwidth=[3.0, 3.2, 1.5], features=[0, 1, 2])
         * Kernel("gaussian", bandwidth=1.0, features=[3]) * Kernel("aitchison_aitken", bandwidth=0.3, features=[4])
         * Kernel("wang_ryzin", bandwidth=0.4, features=[5])),
        ("epanechnikov [age, yrs_married] h = (6, 4) x gaussian [children]",
         Kernel("epanechnikov", bandwidth=[6.0, 4.0], features=[0, 1]) * Kernel("gaussian", bandwidth=1.0, features=[3])),
    ]
    lines = [f"Local mean of `affairs` at every sample, leave-one-out (6,366 x 6,366), medians of {repeat} interleaved "
             "runs; the planner's choice under algorithm='auto'.", "",
             "| kernel | auto takes | dense | neighbors | dense / neighbors | max abs. diff of the means |",
             "|---|---|---|---|---|---|"]
    for what, K in cases:
        dense = BoundKernel(K, X, options=EngineOptions(algorithm="dense"))
        near = BoundKernel(K, X, options=EngineOptions(algorithm="neighbors"))
        auto = BoundKernel(K, X).explain(exclude_self=True).path
        (t_d, t_n), (a, b) = interleaved([lambda: dense.sums(None, y, exclude_self=True),
                                          lambda: near.sums(None, y, exclude_self=True)], repeat, warmup=True)
        lines.append(f"| {what} | {auto} | {t_d * 1e3:.0f} ms | {t_n * 1e3:.0f} ms | {t_d / t_n:.1f}x | "
                     f"{np.max(np.abs(a.mean - b.mean)):.1e} |")
    lines += ["", f"Load average (1 min) after the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
