"""The interpolated LOESS surface of Cleveland and Grosse (1991), as R's ``loess`` builds it by
default (``surface = "interpolate"``).

Exact local fits are expensive and smooth: so fit them only at the vertices of a k-d tree over
the samples and interpolate in between.

* **Tree.** The bounding box of the samples, widened by 0.5% of its extent on each side, is
  split recursively: a cell holding more than ``fc = floor(n * span * cell)`` samples is cut at
  the middle order statistic of its samples along the coordinate where they spread most, moved
  off ties (:func:`_split_value`, R's rule; ``cell = 0.2`` as in R). A cell whose samples all
  share that coordinate, or whose cut falls on its edge, is not cut.
* **Vertices.** The corners of the leaf cells; at each one the exact local fit gives the value
  ``f_v`` and the slopes ``g_v = grad f`` (the linear coefficients of the local polynomial).
* **Blending.** Inside a leaf of widths ``D_m``, with ``t_m = (x_m - lo_m) / D_m``, the surface
  is the tensor-product cubic Hermite interpolant of the corner values and slopes (mixed
  derivatives taken as zero)::

      f(x) = sum_v [ prod_m H0(t_m; v_m) f_v  +  sum_m D_m H1(t_m; v_m) prod_(m' != m) H0(t_m'; v_m') g_vm ]

  with ``H0(t; 0) = (1 + 2t)(1 - t)^2``, ``H0(t; 1) = H0(1 - t; 0)``, ``H1(t; 0) = t (1 - t)^2``,
  ``H1(t; 1) = -t^2 (1 - t)``. It reproduces the corner values and slopes, and on a face shared
  by two leaves with the same corners both sides agree (the face's values depend on its own
  corners only).
* **2-D edges** (Cleveland and Grosse's blend, as R): a neighbour across an edge may be cut
  finer, with vertices inside the edge. Along each edge a cubic Hermite curve runs through the
  nearest vertices on it, the leaf's corners or the neighbour's (:func:`_edge_ranges` finds the
  vertices inside each edge once; the slope across the edge is blended linearly in the Hermite
  value basis); the surface is the Hermite blend of the south
  and north curves plus that of the west and east curves, less the tensor blend. It reproduces
  the tensor blend where no neighbour is finer, and is continuous across the extra vertices.
  In 1, 2 and 3 dimensions the surface equals R's ``loess(surface = "interpolate")`` to
  round-off (the same cells, vertices and blends).
* **Outside the box** the surface is not defined; callers fit those queries exactly.

Cost: besides the fits at the vertices, one sort of each coordinate, ``O(n)`` per level of the
tree in 2 or more dimensions (nothing in 1-D) and one compiled pass over the queries (a
branch-free descent, then ``O(2^d d^2)`` products). Measured in CPU time on one thread, against
the NumPy version (a Python loop over the cells; a compiled descent, then array passes, with a
second descent per 2-D edge): 1-D, 1,000,000 samples and queries, frac 0.01: the tree in 7 ms
(was 201 ms), the blend in 52 ms (was 126 ms); 2-D: 170 ms (was 963 ms) and 204 ms (was 865 ms)
(benchmarks/RESULTS.md, issue 28).
"""
from __future__ import annotations

import numpy as np

from ..._jit import njit

#: each side of the bounding box is widened by this fraction of the samples' extent, so that
#: boundary samples lie strictly inside the tree
BOX_MARGIN = 0.005


class KDSurface:
    """The k-d tree of an interpolated LOESS surface: cells, vertices, and the blend.

    Parameters
    ----------
    X : ndarray (n, d)
        The samples.
    fc : int
        The largest number of samples a leaf may hold (``floor(n * span * cell)``, at least 1).

    Attributes
    ----------
    vertices : ndarray (n_vertices, d)
    leaf_lo, leaf_hi : ndarray (n_leaves, d) — the leaf boxes
    leaf_corners : ndarray (n_leaves, 2^d) — vertex index of each corner (bit m of the corner
        number set: the upper side in coordinate m)
    split_dim, split_value, left, right : ndarray (n_nodes,) — the nodes in depth-first order
        (a split node's low child comes next, its high child after the low child's subtree):
        the coordinate cut (-1 at a leaf), the cut, the children (-1 at a leaf)
    """

    def __init__(self, X, fc):
        X = np.ascontiguousarray(X)
        n, d = X.shape
        lo, hi = X.min(axis=0), X.max(axis=0)
        mu = BOX_MARGIN * np.maximum(hi - lo, 1e-10 * np.maximum(np.abs(lo), np.abs(hi)) + 1e-30)
        self.lo, self.hi = lo - mu, hi + mu
        # every coordinate's samples sorted (in 1-D the rows are not needed)
        columns = np.ascontiguousarray(X.T)
        order = np.argsort(columns, axis=1) if d > 1 else np.empty((1, 0), dtype=np.intp)
        values = np.take_along_axis(columns, order, axis=1) if d > 1 else np.sort(columns, axis=1)
        self.split_dim, self.split_value, self.right, box_lo, box_hi = _build(values, order, int(fc), self.lo,
                                                                              self.hi)
        self.left = np.where(self.split_dim >= 0, np.arange(len(self.split_dim)) + 1, -1)
        leaves = np.flatnonzero(self.split_dim < 0)
        self.leaf_of_node = np.full(len(self.split_dim), -1, dtype=np.intp)
        self.leaf_of_node[leaves] = np.arange(len(leaves))
        self.leaf_lo, self.leaf_hi = box_lo[leaves], box_hi[leaves]
        corners = np.array([[(c >> m) & 1 for m in range(d)] for c in range(2 ** d)], dtype=bool)
        points = np.where(corners[None], self.leaf_hi[:, None, :], self.leaf_lo[:, None, :])
        self.vertices, inverse = np.unique(points.reshape(-1, d), axis=0, return_inverse=True)
        self.leaf_corners = inverse.reshape(len(leaves), 2 ** d)
        # 2-D edges: the vertices on each leaf's edges (R's blend along them, :func:`_edge_curve`)
        self.on_lines = np.empty((2, 0), dtype=np.intp)
        self.edge_ranges = np.zeros((len(leaves), 4, 2), dtype=np.intp)
        if d == 2:
            V = self.vertices
            self.on_lines = np.stack([np.lexsort((V[:, 0], V[:, 1])), np.lexsort((V[:, 1], V[:, 0]))])
            self.edge_ranges = _edge_ranges(V, self.on_lines, self.leaf_lo, self.leaf_hi)

    def inside(self, Q):
        """Rows of ``Q`` inside the tree's box (where the surface is defined)."""
        return np.all((Q >= self.lo) & (Q <= self.hi), axis=1)

    def leaf(self, Q):
        """The leaf cell holding each query (queries inside the box; ``<=`` a cut: the low side)."""
        return self.leaf_of_node[_leaf_nodes(np.ascontiguousarray(Q), self.split_dim, self.split_value, self.left,
                                             self.right)]

    def blend(self, Q, values, slopes):
        """The surface at queries inside the box from vertex ``values (n_vertices,)`` and
        ``slopes (n_vertices, d)``: the tensor-product cubic Hermite blend of the leaf's corners;
        in 2-D, Cleveland and Grosse's blend along the leaf's edges less that tensor blend
        (:func:`_edge_curve`). One compiled pass, one query at a time (descent, weights, sums),
        in float64 (float32 results are rounded once at the end)."""
        f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
        out = _blend(f64(Q), f64(values), f64(slopes), self.split_dim, self.split_value, self.left, self.right,
                     self.leaf_of_node, f64(self.leaf_lo), f64(self.leaf_hi), self.leaf_corners, f64(self.vertices),
                     self.on_lines, self.edge_ranges)
        return out.astype(np.result_type(Q.dtype, values.dtype), copy=False)


@njit(cache=True)
def _split_value(s):
    """R's cut of a cell's sorted coordinates ``s`` (``ehg129`` in ``loessf.f``): the order
    statistic ``s[m]``, ``m = ceil(n / 2) - 1``, moved outwards alternately (``m + 1``, ``m - 1``,
    ``m + 2``, ...) to the nearest place where ``s[m] < s[m + 1]``, so that tied samples stay on
    one side; the low child holds the samples ``<= s[m]``. Returns the cut and the low child's
    count. With ``x = s[m]`` the run of ties ``s[a:b + 1]`` (two bisections), the places off the
    ties nearest ``m`` are the run's end ``b`` (offset ``b - m``: the ``2 (b - m) - 1``-th tried,
    the 0-th if ``b = m``) and the end of the run below, ``a - 1`` (offset ``-(m - a + 1)``, tried
    ``2 (m - a + 1)``-th); the search stops at the first offset outside ``[0, n - 2]``. Only the
    run below moves the cut off ``x``."""
    n = len(s)
    m = (n + 1) // 2 - 1
    x = s[m]
    a = np.searchsorted(s, x, side="left")
    b = np.searchsorted(s, x, side="right") - 1
    stop = min(2 * (n - 1 - m) - 1, 2 * m + 2)
    up = (0 if b == m else 2 * (b - m) - 1) if b <= n - 2 else stop
    down = 2 * (m - a + 1)
    if a >= 1 and down < stop and down < up:
        return float(s[a - 1]), a
    return float(x), b + 1


@njit(cache=True)
def _grow(a):
    out = np.empty(2 * len(a), dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _build(values, order, fc, lo, hi):
    """The tree over the samples in the box ``[lo, hi]``, depth first: a cell holding more than
    ``fc`` samples is cut at :func:`_split_value` of its samples along the coordinate where they
    spread most (the first such), unless they all share it or the cut falls on the cell's edge
    (then it is a leaf, as in R).

    ``values[c]`` are the samples' coordinates ``c`` sorted, ``order[c]`` their rows (needed in
    2 or more dimensions only): a cell's samples are the same range ``[start, stop)`` of every
    list, each sorted, so a cell's spread is ``last - first`` and its cut two bisections. A cut
    along ``m`` leaves list ``m`` partitioned; the others are partitioned stably (still sorted)
    by the side of each row, one pass each. Returns the nodes' ``split_dim``, ``split_value``,
    ``right`` (high child) and boxes."""
    d, n = values.shape
    low = np.zeros(n if d > 1 else 0, dtype=np.bool_)
    held_rows = np.empty(n if d > 1 else 0, dtype=order.dtype)
    held_values = np.empty(n if d > 1 else 0, dtype=values.dtype)
    spread = np.empty(d, dtype=values.dtype)
    cap = 64
    dims = np.empty(cap, dtype=np.intp)
    cuts = np.empty(cap, dtype=np.float64)
    right = np.empty(cap, dtype=np.intp)
    box_lo = np.empty(cap * d, dtype=lo.dtype)
    box_hi = np.empty(cap * d, dtype=hi.dtype)
    stack = [(0, n, -1, 0)]  # (start, stop, parent node, 1: the high child)
    node = 0
    while len(stack):
        start, stop, parent, high = stack.pop()
        if node == cap:
            dims, cuts, right, box_lo, box_hi = _grow(dims), _grow(cuts), _grow(right), _grow(box_lo), _grow(box_hi)
            cap *= 2
        blo, bhi = box_lo[node * d:(node + 1) * d], box_hi[node * d:(node + 1) * d]
        if parent < 0:
            blo[:] = lo
            bhi[:] = hi
        else:
            blo[:] = box_lo[parent * d:(parent + 1) * d]
            bhi[:] = box_hi[parent * d:(parent + 1) * d]
            if high:
                blo[dims[parent]] = cuts[parent]
                right[parent] = node
            else:
                bhi[dims[parent]] = cuts[parent]
        dims[node], cuts[node], right[node] = -1, 0.0, -1
        node += 1
        if stop - start <= fc:
            continue
        for c in range(d):
            spread[c] = values[c, stop - 1] - values[c, start]
        m = 0
        for c in range(1, d):
            if spread[c] > spread[m]:
                m = c
        if not spread[m] > 0:
            continue
        cut, n_low = _split_value(values[m, start:stop])
        if not blo[m] < cut < bhi[m]:
            continue
        dims[node - 1], cuts[node - 1] = m, cut
        mid = start + n_low
        if d > 1:
            for k in range(start, stop):
                low[order[m, k]] = k < mid
            for c in range(d):
                if c == m:
                    continue
                i, j = start, 0
                for k in range(start, stop):  # branch-free: each entry goes to both, one keeps it
                    row, v = order[c, k], values[c, k]
                    side = low[row]
                    order[c, i], values[c, i] = row, v
                    held_rows[j], held_values[j] = row, v
                    i += side
                    j += 1 - side
                order[c, mid:stop] = held_rows[:j]
                values[c, mid:stop] = held_values[:j]
        stack.append((mid, stop, node - 1, 1))  # popped after the low child's subtree
        stack.append((start, mid, node - 1, 0))
    return (dims[:node].copy(), cuts[:node].copy(), right[:node].copy(), box_lo[:node * d].reshape(node, d),
            box_hi[:node * d].reshape(node, d))


@njit(cache=True, inline="always")
def _down(q, split_dim, split_value, left, right):
    """The leaf node reached from the root (``<=`` a cut: the low child). Branch-free: both
    children are loaded and one kept (random queries mispredict about every other branch;
    measured 1.5x slower)."""
    at = 0
    m = split_dim[at]
    while m >= 0:
        low, high = left[at], right[at]
        at = low if q[m] <= split_value[at] else high
        m = split_dim[at]
    return at


@njit(nogil=True, cache=True)
def _leaf_nodes(Q, split_dim, split_value, left, right):
    node = np.empty(len(Q), dtype=np.intp)
    for i in range(len(Q)):
        node[i] = _down(Q[i], split_dim, split_value, left, right)
    return node


@njit(cache=True)
def _lex_bound(vertices, ids, first, second, key_first, key_second, strict):
    """The first position ``k`` of ``ids`` (vertices sorted by coordinate ``first``, then
    ``second``) whose vertex comes after ``(key_first, key_second)`` (``strict``) or not before it."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        a, b = vertices[ids[mid], first], vertices[ids[mid], second]
        if a < key_first or (a == key_first and (b <= key_second if strict else b < key_second)):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _edge_ranges(vertices, on_lines, leaf_lo, leaf_hi):
    """Per leaf and edge (south, north, west, east), the range of ``on_lines[along]`` holding the
    vertices strictly inside the edge, in order along it: ``on_lines[0]`` are the vertices sorted
    by ``(y, x)`` (the south and north edges run along ``x``), ``on_lines[1]`` by ``(x, y)``."""
    ranges = np.empty((len(leaf_lo), 4, 2), dtype=np.intp)
    for cell in range(len(leaf_lo)):
        for edge in range(4):
            along = edge // 2
            line = leaf_lo[cell, 1 - along] if edge % 2 == 0 else leaf_hi[cell, 1 - along]
            ids = on_lines[along]
            ranges[cell, edge, 0] = _lex_bound(vertices, ids, 1 - along, along, line, leaf_lo[cell, along], True)
            ranges[cell, edge, 1] = _lex_bound(vertices, ids, 1 - along, along, line, leaf_hi[cell, along], False)
    return ranges


@njit(cache=True, inline="always")
def _hermite(t):
    """The cubic Hermite basis on ``[0, 1]`` at ``t``: ``H0(t; 0) = (1 + 2t)(1 - t)^2``,
    ``H0(t; 1) = (3 - 2t) t^2`` (values), ``H1(t; 0) = t (1 - t)^2``, ``H1(t; 1) = -t^2 (1 - t)``
    (unit slopes)."""
    s = (1 - t) * (1 - t)
    return (1 + 2 * t) * s, (3 - 2 * t) * t * t, t * s, -t * t * (1 - t)


@njit(cache=True, inline="always")
def _edge_curve(q, cell, edge, own0, own1, surface):
    """R's 2-D surface along one edge of the leaf (Cleveland and Grosse): a cubic Hermite curve,
    at ``q``'s coordinate ``along`` the edge, through the two nearest vertices on the edge on
    either side of ``q`` (``<=``: the lower one is below): the leaf's corners ``own0, own1``, or
    vertices inside the edge where the neighbour across it is cut finer (so the surface is
    continuous across them; they are the corners of the neighbour leaf that holds ``q``'s
    coordinate, as R finds them). Returns the curve's value and the slope across the edge
    (blended linearly in the value basis)."""
    values, slopes, leaf_lo, leaf_hi, corners, vertices, on_lines, ranges = surface
    along = edge // 2
    v0, v1 = leaf_lo[cell, along], leaf_hi[cell, along]
    a0, a1 = corners[cell, own0], corners[cell, own1]
    for k in range(ranges[cell, edge, 0], ranges[cell, edge, 1]):
        v = on_lines[along, k]
        if vertices[v, along] < q[along]:
            v0, a0 = vertices[v, along], v
        else:
            v1, a1 = vertices[v, along], v
            break
    h00, h01, h10, h11 = _hermite((q[along] - v0) / (v1 - v0))
    value = h00 * values[a0] + h01 * values[a1] + (h10 * slopes[a0, along] + h11 * slopes[a1, along]) * (v1 - v0)
    return value, h00 * slopes[a0, 1 - along] + h01 * slopes[a1, 1 - along]


@njit(cache=True, inline="always")
def _blend_pair(low, high, t, width):
    """The cubic Hermite blend at ``t`` of two ``(value, slope)`` curves ``width`` apart."""
    h00, h01, h10, h11 = _hermite(t)
    return h00 * low[0] + h01 * high[0] + (h10 * low[1] + h11 * high[1]) * width


@njit(nogil=True, cache=True)
def _blend(Q, values, slopes, split_dim, split_value, left, right, leaf_of_node, leaf_lo, leaf_hi, corners,
           vertices, on_lines, ranges):
    """:meth:`KDSurface.blend`: per query, the descent to its leaf (``t_m = (x_m - lo_m) / D_m``
    clipped to ``[0, 1]``), the tensor-product Hermite sum over the ``2^d`` corners and, in 2-D,
    the south / north and west / east edge curves blended across the leaf, less that sum."""
    n, d = Q.shape
    out = np.empty(n)
    H0 = np.empty((d, 2))  # H0 (t_m; 0 / 1)
    H1 = np.empty((d, 2))  # D_m H1 (t_m; 0 / 1)
    t = np.empty(d)
    width = np.empty(d)
    surface = (values, slopes, leaf_lo, leaf_hi, corners, vertices, on_lines, ranges)
    for i in range(n):
        q = Q[i]
        cell = leaf_of_node[_down(q, split_dim, split_value, left, right)]
        for m in range(d):
            width[m] = leaf_hi[cell, m] - leaf_lo[cell, m]
            t[m] = min(max((q[m] - leaf_lo[cell, m]) / width[m], 0.0), 1.0)
            H0[m, 0], H0[m, 1], h10, h11 = _hermite(t[m])
            H1[m, 0], H1[m, 1] = h10 * width[m], h11 * width[m]
        acc = 0.0
        for c in range(1 << d):
            v = corners[cell, c]
            prod = 1.0
            for m in range(d):
                prod *= H0[m, (c >> m) & 1]
            acc += prod * values[v]
            for m in range(d):
                others = 1.0
                for o in range(d):
                    if o != m:
                        others *= H0[o, (c >> o) & 1]
                acc += H1[m, (c >> m) & 1] * others * slopes[v, m]
        if d == 2:
            south = _edge_curve(q, cell, 0, 0, 1, surface)
            north = _edge_curve(q, cell, 1, 2, 3, surface)
            west = _edge_curve(q, cell, 2, 0, 2, surface)
            east = _edge_curve(q, cell, 3, 1, 3, surface)
            acc = (_blend_pair(south, north, t[1], width[1]) + _blend_pair(west, east, t[0], width[0])) - acc
        out[i] = acc
    return out
