"""Locally linear embedding against scikit-learn's ``LocallyLinearEmbedding`` on a swiss roll.

At 5,000 and 20,000 points scikit-learn's dense solver (``eigh`` of an n x n matrix) is out of
reach, so both sides use their sparse path at the same settings: scikit-learn's
``eigen_solver="arpack"`` (``eigsh`` shift-invert, scipy's default LU of ``M``) and ours (one
sparse LU of ``M = (I - W)^T (I - W)`` with a symmetric minimum-degree ordering, then ``eigsh``
shift-invert). The weights: our batched Gram solves against scikit-learn's loop over points.
"""

import numpy as np
from scipy.linalg import orthogonal_procrustes
from scipy.spatial import procrustes
from sklearn.datasets import make_swiss_roll
from sklearn.manifold import LocallyLinearEmbedding as SkLLE

from localkit import LocallyLinearEmbedding
from localkit._timing import interleaved

TITLE = "LocallyLinearEmbedding vs scikit-learn (arpack), swiss roll"
# both on every core (n_jobs=None would mean one thread for each)
SETTINGS = dict(n_neighbors=10, n_components=2, reg=1e-3, eigen_solver="arpack", random_state=0, n_jobs=-1)


def run(quick=False):
    sizes = [(1000, 3), (2000, 3)] if quick else [(5000, 5), (20000, 3)]
    lines = ["Swiss roll (`make_swiss_roll(n, random_state=0)`), n_neighbors=10, n_components=2, reg=1e-3, "
             "both with their sparse eigensolver (`eigen_solver=\"arpack\"`, tol=1e-6); medians of interleaved "
             "repeats, one process, on a 2-core machine shared with other jobs. Agreement: Procrustes "
             "disparity and max |diff| after the best orthogonal map of ours onto scikit-learn's.",
             "", "| n | repeats | scikit-learn | localkit | ratio | disparity | max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for n, repeat in sizes:
        X, _ = make_swiss_roll(n, random_state=0)
        (t_peer, t_ours), (ref, ours) = interleaved(
            [lambda: SkLLE(**SETTINGS).fit(X).embedding_,
             lambda: LocallyLinearEmbedding(**SETTINGS).fit(X).embedding_], repeat)
        disparity = procrustes(ours, ref)[2]
        Q, _ = orthogonal_procrustes(ours, ref)
        diff = np.abs(ours @ Q - ref).max()
        lines.append(f"| {n:,} | {repeat} | {t_peer:.2f} s | {t_ours:.2f} s | {t_ours / t_peer:.2f}x | "
                     f"{disparity:.1e} | {diff:.1e} |")
    lines += ["", "Ratio = localkit / scikit-learn (below 1: localkit faster). The dense solver is compared "
              "against scikit-learn's dense solver in the tests and the tour (n = 800-1,000, disparity < 1e-6)."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick=True))
