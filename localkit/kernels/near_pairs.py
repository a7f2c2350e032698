"""The squared euclidean distances of a block by its matrix product, the near pairs formed again
from differences, in one compiled pass over the block (:func:`refine_near_pairs`), for
:func:`localkit.kernels.distances.refined_sq_distances` on the host.

Apart from :mod:`.distances` so that importing that module (as :mod:`localkit.nn` does) does not
import numba.
"""
from __future__ import annotations

from .._jit import njit


@njit(nogil=True, cache=True)
def refine_near_pairs(u2, Q, X, q_sq, x_sq, refine, most):  # pragma: no cover - compiled
    """``u2`` (``Q X^T`` on entry) becomes ``max(|q|^2 + |x|^2 - 2 q.x, 0)``, the pairs where that
    is below ``refine (|q|^2 + |x|^2)`` summed from differences instead (feature by feature, in the
    dtype of ``u2``); False, with ``u2`` left part-done, where more than ``most`` pairs are such.

    The arithmetic of the NumPy steps it replaced (``-2 q.x`` as ``-(g + g)``, the norms summed in
    the dtype of ``u2``, ``refine`` a power of two), at one pass over the block where they made
    four and a list of the near pairs (``np.nonzero``: 0.68 s of a Laplacian dense pass's 2.4 s,
    2,000 x 100,000 pairs, d = 32; the whole pass now 0.74 s)."""
    nq, ns = u2.shape
    zero = u2.dtype.type(0.0)
    near = 0
    for i in range(nq):
        row, q, qq = u2[i], Q[i], q_sq[i]
        found = 0
        for j in range(ns):  # branch-free, so vectorised; a second loop only for a row with near pairs
            norm = qq + x_sq[j]
            v = norm - (row[j] + row[j])
            found += v < refine * norm
            row[j] = v if v > zero else zero
        if found == 0:
            continue
        near += found
        if near > most:
            return False
        for j in range(ns):
            norm = qq + x_sq[j]
            if row[j] < refine * norm:  # row[j] = max(v, 0), below it exactly where v is
                x = X[j]
                v = zero
                for f in range(len(q)):
                    t = q[f] - x[f]
                    v += t * t
                row[j] = v
    return True
