"""Local geometry: locally linear embedding and local PCA.

Both are local models fitted on a neighbourhood:

* **LLE** reconstructs each point from its k nearest neighbours (a kNN kernel with the uniform
  profile) with an affine local linear model, then finds the global coordinates that the same
  weights reconstruct best.
* **local PCA** is the eigen-decomposition of the kernel-weighted covariance at a query, the
  localization trick applied to PCA.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg, sparse
from scipy.sparse.linalg import LinearOperator, eigsh, splu
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import BANDWIDTH_CONSTRAINT, KERNEL_PARAMS, N_JOBS_CONSTRAINT, non_negative, positive
from ..engine import map_blocks
from ..engine import BoundKernel, check_design_fits, local_covariance
from ..engine import neighbors as nb
from ..kernels.bandwidth import safe_mean
from ._base import FLOATS, LocalKernelMixin
from ..engine import map_queries
from ..engine import check_empty

EIGEN_SOLVERS = ("auto", "dense", "arpack")
LLE_METHODS = ("standard", "modified", "hessian", "ltsa")
#: Bytes of (neighbours x features) differences one block of Gram solves may hold.
_GRAM_BUDGET = 64 * 2**20


def _check_n_components(value, high):
    """The data-dependent bound of ``n_components`` (its type is in ``_parameter_constraints``)."""
    if value > high:
        raise ValueError(f"n_components must be between 1 and {high}, got {value}")


def barycenter_weights(X, Y, ind, reg, n_jobs=None):
    """Affine reconstruction weights of each ``X[i]`` from its neighbours ``Y[ind[i]]``.

    The local linear model at ``x_i``: ``min_w |x_i - sum_j w_j y_j|^2`` subject to
    ``sum_j w_j = 1``. With ``C = Y[ind[i]] - x_i`` and the Gram matrix ``G = C C^T`` the
    solution is ``w = G^{-1} 1 / (1^T G^{-1} 1)``; ``G`` is regularised as in scikit-learn:
    ``G += reg * trace(G) * I`` (``reg * I`` when the trace is 0). All solves of a block are
    one batched ``np.linalg.solve`` on stacked ``(k, k)`` systems.
    """
    n, k = ind.shape
    B = np.empty((n, k), dtype=X.dtype)
    block = max(1, int(_GRAM_BUDGET // (8 * k * max(X.shape[1], k) * 3)))

    def run(rows):
        C = Y[ind[rows]] - X[rows, None, :]
        G = C @ C.transpose(0, 2, 1)
        trace = np.trace(G, axis1=1, axis2=2)
        G[:, np.arange(k), np.arange(k)] += np.where(trace > 0, reg * trace, reg)[:, None]
        try:
            w = np.linalg.solve(G, np.ones((len(G), k, 1), dtype=G.dtype))[..., 0]
        except np.linalg.LinAlgError as exc:  # reg = 0 with more neighbours than dimensions
            raise ValueError(f"a local Gram matrix is singular ({exc}): with {k} neighbours in {X.shape[1]} "
                             f"dimensions it needs reg > 0, got reg={reg}") from exc
        B[rows] = w / w.sum(axis=1, keepdims=True)

    map_blocks(run, n, block, n_jobs)
    return B


def _local_svd(X, ind, rows, centre, full=True):
    """Left singular vectors and squared singular values of each neighbourhood's offsets.

    ``C_i = X[ind[i]] - c_i`` (shape ``(k, d)``; ``c_i`` = the neighbourhood's mean when
    ``centre == "mean"``, else the point ``x_i``). Returns ``(U, s2)`` with ``U`` of shape
    ``(b, k, k)``, columns by decreasing ``s2``, and ``s2`` of shape ``(b, min(k, d))``: the
    eigen-decomposition of the local Gram matrix ``C_i C_i^T``. With more neighbours than
    dimensions an SVD of ``C_i`` (its last ``k - d`` columns span the null space of the Gram
    matrix); otherwise ``eigh`` of the Gram matrix, as scikit-learn chooses, so that the small
    eigenvalues agree with it to round-off. ``full=False``: only the leading ``min(k, d)``
    columns of ``U`` (the null space is not needed).
    """
    C = X[ind[rows]]
    C = C - (C.mean(axis=1, keepdims=True) if centre == "mean" else X[rows, None, :])
    k, d = C.shape[1], C.shape[2]
    if k > d:
        U, s, _ = np.linalg.svd(C, full_matrices=full)
        return U, s * s
    vals, vecs = np.linalg.eigh(C @ C.transpose(0, 2, 1))
    return vecs[:, :, ::-1], vals[:, ::-1]


def _alignment_matrix(idx, L):
    """``M = sum_i S_i L_i S_i^T``: the local ``(m, m)`` matrices ``L[i]`` over the index sets
    ``idx[i]`` scattered into an ``(n, n)`` sparse matrix (repeated entries summed)."""
    n, m = idx.shape
    rows = np.repeat(idx, m, axis=1).ravel()
    cols = np.tile(idx, (1, m)).ravel()
    return sparse.coo_matrix((L.ravel(), (rows, cols)), shape=(n, n)).tocsc()


def _block_rows(n, k, d):
    """Points per block of local decompositions: a few ``(k, max(k, d))`` arrays each."""
    return max(1, int(_GRAM_BUDGET // (8 * k * max(d, k) * 4)))


def ltsa_alignment(X, ind, n_components, n_jobs=None):
    """Local tangent space alignment (Zhang & Zha, 2004): ``M`` whose null space is the embedding.

    Each neighbourhood (``k`` neighbours, the point itself excluded as in scikit-learn) is
    centred; ``U_i`` holds the ``n_components`` leading left singular vectors of the centred
    offsets (the local tangent coordinates) and ``G_i = [1 / sqrt(k), U_i]``. The alignment
    error of global coordinates ``Y`` is ``sum_i |(I - G_i G_i^T) Y_i|^2 = tr(Y^T M Y)`` with
    ``M = sum_i S_i (I - G_i G_i^T) S_i^T``.
    """
    n, k = ind.shape
    L = np.empty((n, k, k))

    def run(rows):
        U, _ = _local_svd(X, ind, rows, "mean", full=False)
        G = U[:, :, :n_components]
        L[rows] = -(G @ G.transpose(0, 2, 1)) - 1.0 / k
        L[rows, np.arange(k), np.arange(k)] += 1.0

    map_blocks(run, n, _block_rows(n, k, X.shape[1]), n_jobs)
    return _alignment_matrix(ind, L)


def hessian_alignment(X, ind, n_components, hessian_tol, n_jobs=None):
    """Hessian eigenmaps (Donoho & Grimes, 2003): ``M`` whose null space is the embedding.

    In each centred neighbourhood, ``U_i`` (``k x c``) are the leading left singular vectors
    (local tangent coordinates) and ``Y_i = [1, U_i, (U_i[:, a] U_i[:, b])_{a <= b}]`` is the
    design of a local quadratic model, ``1 + c + c (c + 1) / 2`` columns. Its complete QR
    factorisation ``Y_i = Q_i R_i`` gives ``H_i = Q_i[:, c + 1:]``: the directions orthogonal to
    every affine function of the tangent coordinates, which measure the local Hessian (those
    of the quadratic columns and, as in scikit-learn, the rest of the orthogonal complement).
    Each column is divided by its sum (unless that sum is below ``hessian_tol`` in magnitude)
    and ``M = sum_i S_i H_i H_i^T S_i^T``.
    """
    n, k = ind.shape
    c = n_components
    L = np.empty((n, k, k))

    def run(rows):
        U, _ = _local_svd(X, ind, rows, "mean", full=False)
        U = U[:, :, :c]
        quad = [U[:, :, a:a + 1] * U[:, :, a:] for a in range(c)]
        Y = np.concatenate([np.ones((len(U), k, 1)), U] + quad, axis=2)
        Q = np.linalg.qr(Y, mode="complete")[0]
        H = Q[:, :, c + 1:]
        S = H.sum(axis=1, keepdims=True)
        S[np.abs(S) < hessian_tol] = 1.0
        H = H / S
        L[rows] = H @ H.transpose(0, 2, 1)

    map_blocks(run, n, _block_rows(n, k, X.shape[1]), n_jobs)
    return _alignment_matrix(ind, L)


def modified_alignment(X, ind, n_components, reg, modified_tol, n_jobs=None):
    """Modified LLE (Zhang & Wang, 2007): ``M`` from several local weight vectors per point.

    With ``C_i = X[ind[i]] - x_i``, let ``lambda_1 >= ... >= lambda_k`` and ``v_1 .. v_k`` be the
    eigenvalues and vectors of the local Gram matrix ``C_i C_i^T`` (``min(k, d)`` of them
    non-zero), ``rho_i = sum_{j > c} lambda_j / sum_{j <= c} lambda_j`` and ``eta`` the median of
    ``rho_i``. Point ``i`` keeps ``s_i`` vectors: the ``k - min(k, d)`` zero eigenvalues and the
    largest number ``s`` of the smallest non-zero ones whose sum is below ``eta`` times the sum
    of the others. With ``V_i`` those ``s_i`` eigenvectors, ``a = V_i^T 1``,
    ``alpha_i = |a| / sqrt(s_i)``, the Householder vector ``h = (alpha_i 1 - a) / |alpha_i 1 - a|``
    (0 when that norm is below ``modified_tol``) and ``w_i`` the regularised barycentric weights,
    the ``s_i`` weight vectors are

    .. math::

        W_i = V_i (I - 2 h h^T) + (1 - \\alpha_i)\\, w_i 1^T ,

    each summing to 1 (when ``h != 0``), and ``M = sum_i S_i [-1^T; W_i] [-1^T; W_i]^T S_i^T`` over
    the index set ``(i, ind[i])``.
    """
    n, k = ind.shape
    d = X.shape[1]
    nev = min(k, d)
    V = np.empty((n, k, k))
    evals = np.empty((n, nev))

    def decompose(rows):
        V[rows], s2 = _local_svd(X, ind, rows, "point")
        evals[rows] = s2[:, :nev]

    block = _block_rows(n, k, d)
    map_blocks(decompose, n, block, n_jobs)
    w_reg = barycenter_weights(X, X, ind, reg, n_jobs)
    eta = np.median(evals[:, n_components:].sum(axis=1) / evals[:, :n_components].sum(axis=1))
    # s_i: how many of the smallest eigenvalues sum to less than eta times the rest
    cum = np.cumsum(evals, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail_over_head = cum[:, -1:] / cum[:, :-1] - 1.0  # decreasing in the head's length
    s_all = np.sum(tail_over_head < eta, axis=1) + (k - nev)
    L = np.empty((n, k + 1, k + 1))

    def run(rows):
        s = s_all[rows]
        keep = (np.arange(k)[None, :] >= (k - s)[:, None]).astype(np.float64)  # the last s_i columns
        Vi = V[rows] * keep[:, None, :]
        a = Vi.sum(axis=1)  # V_i^T 1, zero outside the kept columns
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(s > 0, np.linalg.norm(a, axis=1) / np.sqrt(s), 0.0)
        h = alpha[:, None] * keep - a
        norm_h = np.linalg.norm(h, axis=1)
        h = np.where((norm_h >= modified_tol)[:, None], h / np.where(norm_h > 0, norm_h, 1.0)[:, None], 0.0)
        W = (Vi - 2.0 * (Vi @ h[:, :, None]) * h[:, None, :]
             + (1.0 - alpha)[:, None, None] * w_reg[rows][:, :, None] * keep[:, None, :])
        W_hat = np.concatenate([-keep[:, None, :], W], axis=1)  # rows: the point, then its neighbours
        L[rows] = W_hat @ W_hat.transpose(0, 2, 1)

    map_blocks(run, n, block, n_jobs)
    return _alignment_matrix(np.c_[np.arange(n), ind], L)


class LocallyLinearEmbedding(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Locally linear embedding (Roweis & Saul, 2000) and its modified, Hessian and LTSA variants.

    **Kernel:** the kNN kernel with the uniform profile (the ``n_neighbors`` nearest other
    samples, equal weight). **Values:** the neighbours' coordinates. **Local model:** an affine
    combination fitted by regularised least squares,

    .. math::

        W_i = \\arg\\min_{\\sum_j w_j = 1} \\Big|x_i - \\sum_{j \\in N_k(i)} w_j x_j\\Big|^2
              + \\mathrm{reg}\\,\\mathrm{tr}(G_i)\\,|w|^2 .

    The embedding ``Y`` minimises ``sum_i |y_i - sum_j W_ij y_j|^2 = tr(Y^T M Y)`` with
    ``M = (I - W)^T (I - W)`` sparse, under ``Y^T Y = I``: the eigenvectors of ``M`` for its
    smallest eigenvalues after the constant one (eigenvalue 0, since the rows of ``W`` sum
    to 1). Agrees with scikit-learn's ``LocallyLinearEmbedding(method="standard")``.

    The other methods keep the kNN neighbourhoods and fit a different local model in each; each
    gives a sparse symmetric ``M = sum_i S_i L_i S_i^T`` (``S_i`` selects neighbourhood ``i``)
    whose bottom eigenvectors, after the constant one, are the embedding, as above:

    * ``"modified"`` (Zhang & Wang, 2007): several affine weight vectors per point, from the
      smallest eigenvectors of its local Gram matrix, so that the local model does not
      depend on one ill-conditioned solve;
    * ``"hessian"`` (Donoho & Grimes, 2003): a local quadratic model in the tangent coordinates
      of each neighbourhood; ``M`` penalises the Hessian of the embedding; needs
      ``n_neighbors > n_components (n_components + 3) / 2``;
    * ``"ltsa"`` (Zhang & Zha, 2004): local tangent space alignment, the embedding that best
      agrees with each neighbourhood's local PCA coordinates up to an affine map.

    Each equals scikit-learn's ``LocallyLinearEmbedding(method=...)`` (its neighbourhoods
    exclude the point itself, as scikit-learn's do).

    Parameters
    ----------
    n_neighbors : int, default=5
        ``k``, the neighbours of each point (itself excluded); must be < n_samples.
    n_components : int, default=2
        Dimension of the embedding; at most n_features.
    reg : float, default=1e-3
        Regularisation of the Gram matrices, relative to their trace.
    eigen_solver : {"auto", "dense", "arpack"}, default="auto"
        "dense": ``scipy.linalg.eigh`` of the dense ``M`` (small problems). "arpack": the
        sparse ``M`` factorised once (sparse LU with a symmetric minimum-degree ordering) and
        ``scipy.sparse.linalg.eigsh`` in shift-invert mode about 0. "auto" picks as
        scikit-learn does: "arpack" for more than 200 samples and ``n_components + 1 < 10``.
    tol : float, default=1e-6
        Convergence tolerance of "arpack".
    max_iter : int, default=100
        Maximum Arnoldi iterations of "arpack".
    random_state : int, RandomState or None, default=None
        Seeds the starting vector of "arpack" (drawn as in scikit-learn).
    n_jobs : int or None, default=None
        Threads over blocks of Gram solves (None: all cores).
    method : {"standard", "modified", "hessian", "ltsa"}, default="standard"
        The local model (see above).
    hessian_tol : float, default=1e-4
        ``"hessian"``: a Hessian estimator whose column sum is below this in magnitude is not
        normalised by it.
    modified_tol : float, default=1e-12
        ``"modified"``: a Householder vector shorter than this is taken as 0 (no reflection).
        ``"modified"`` regularises its weights with ``reg``; scikit-learn fixes that
        regularisation at 1e-3 (the default ``reg``), whatever ``reg`` says.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
    reconstruction_error_ : float
        ``tr(Y^T M Y)``, the sum of the eigenvalues of the embedding.
    weights_ : sparse matrix of shape (n_samples, n_samples)
        The reconstruction weights ``W`` (CSR); ``method="standard"`` only (the other methods
        have no single weight per neighbour).
    X_fit_ : ndarray of shape (n_samples, n_features)

    Examples
    --------
    >>> from sklearn.datasets import make_swiss_roll
    >>> from localkit import LocallyLinearEmbedding
    >>> X, _ = make_swiss_roll(400, random_state=0)
    >>> Y = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="dense").fit_transform(X)
    >>> Y.shape
    (400, 2)
    """

    def __init__(self, n_neighbors=5, n_components=2, reg=1e-3, eigen_solver="auto", tol=1e-6,
                 max_iter=100, random_state=None, n_jobs=None, method="standard", hessian_tol=1e-4,
                 modified_tol=1e-12):
        self.n_neighbors = n_neighbors
        self.n_components = n_components
        self.reg = reg
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.method = method
        self.hessian_tol = hessian_tol
        self.modified_tol = modified_tol

    _parameter_constraints: dict = {
        "n_neighbors": positive(Integral),
        "n_components": positive(Integral),
        "reg": non_negative(),
        "eigen_solver": [StrOptions(set(EIGEN_SOLVERS))],
        "tol": non_negative(),
        "max_iter": positive(Integral),
        "random_state": ["random_state"],
        "n_jobs": N_JOBS_CONSTRAINT,
        "method": [StrOptions(set(LLE_METHODS))],
        "hessian_tol": non_negative(),
        "modified_tol": non_negative(),
    }

    def _check_params(self, n, d):
        """What depends on the data (the rest is in ``_parameter_constraints``)."""
        if n < 2:
            raise ValueError(f"LocallyLinearEmbedding needs at least 2 samples, got n_samples={n}")
        if self.n_neighbors >= n:
            raise ValueError(f"n_neighbors must be < n_samples={n}, got {self.n_neighbors}")
        _check_n_components(self.n_components, min(d, n - 1))
        c = self.n_components
        if self.method == "hessian" and self.n_neighbors <= c * (c + 3) // 2:
            raise ValueError(f"method='hessian' needs n_neighbors > n_components * (n_components + 3) / 2 = "
                             f"{c * (c + 3) // 2}, got n_neighbors={self.n_neighbors}")
        if self.method == "modified" and self.n_neighbors < c:
            raise ValueError(f"method='modified' needs n_neighbors >= n_components={c}, "
                             f"got n_neighbors={self.n_neighbors}")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Compute the reconstruction weights and the embedding. Returns ``self``."""
        X = validate_data(self, X, dtype=np.float64)
        n, d = X.shape
        self._check_params(n, d)
        # the weights and the embedding do not change when X is scaled: by a power of two (exact)
        # that brings |x| below 1, distances and Gram matrices neither overflow nor underflow
        top = np.max(np.abs(X))
        self._exponent = int(np.frexp(top)[1]) if top > 0 else 0
        Xu = np.ldexp(X, -self._exponent)
        self.index_ = nb.make_index(Xu, "euclidean")
        _, ind = nb.kneighbors(self.index_, Xu, self.n_neighbors, exclude_self=True)
        self.__dict__.pop("weights_", None)  # a refit with another method has none
        M = self._alignment(Xu, ind)
        self.embedding_, self.reconstruction_error_ = self._null_space(M)
        self.X_fit_ = X
        self._n_features_out = self.n_components
        return self

    def _alignment(self, Xu, ind):
        """The sparse symmetric ``M`` of ``self.method`` (its null space is the embedding)."""
        n, c = len(Xu), self.n_components
        if self.method == "modified":
            return modified_alignment(Xu, ind, c, self.reg, self.modified_tol, self.n_jobs)
        if self.method == "hessian":
            return hessian_alignment(Xu, ind, c, self.hessian_tol, self.n_jobs)
        if self.method == "ltsa":
            return ltsa_alignment(Xu, ind, c, self.n_jobs)
        data = barycenter_weights(Xu, Xu, ind, self.reg, self.n_jobs).ravel()
        indptr = np.arange(0, n * self.n_neighbors + 1, self.n_neighbors)
        self.weights_ = sparse.csr_matrix((data, ind.ravel(), indptr), shape=(n, n))
        I_W = sparse.identity(n, format="csr") - self.weights_
        return (I_W.T @ I_W).tocsc()

    def _null_space(self, M):
        """Eigenvectors of ``M`` for eigenvalues 2 .. n_components + 1 (the first is constant)."""
        n, k = M.shape[0], self.n_components
        solver = self.eigen_solver
        if solver == "auto":
            solver = "arpack" if n > 200 and k + 1 < 10 else "dense"
        if solver == "dense":
            vals, vecs = linalg.eigh(M.toarray(), subset_by_index=(1, k), overwrite_a=True)
            order = np.argsort(np.abs(vals))
            return vecs[:, order], float(np.sum(vals))
        if k + 1 >= n:
            raise ValueError(f"eigen_solver='arpack' needs n_components + 1 < n_samples={n}; use 'dense'")
        # shift-invert about 0: one sparse LU of M; a symmetric ordering keeps its fill-in low
        try:
            lu = splu(M, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                      options={"SymmetricMode": True})
        except RuntimeError as exc:
            raise ValueError(f"eigen_solver='arpack' could not factorise the matrix M of method={self.method!r} "
                             f"({exc}); it is singular, use eigen_solver='dense' or a larger reg") from exc
        op = LinearOperator(M.shape, matvec=lu.solve, dtype=M.dtype)
        v0 = check_random_state(self.random_state).uniform(-1, 1, n)
        vals, vecs = eigsh(M, k + 1, sigma=0.0, OPinv=op, tol=self.tol, maxiter=self.max_iter, v0=v0)
        order = np.argsort(vals)
        return vecs[:, order[1:]], float(np.sum(vals[order[1:]]))

    @map_queries
    def transform(self, X: ArrayLike) -> np.ndarray:
        """Embed new points: reconstruct each from its ``n_neighbors`` nearest training points
        (the standard local model, the barycentric weights above, whatever ``method``, as
        scikit-learn) and apply those weights to their embeddings."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        Xu = np.ldexp(X.astype(np.float64), -self._exponent)  # the coordinates of index_
        _, ind = nb.kneighbors(self.index_, Xu, self.n_neighbors)
        w = barycenter_weights(Xu, np.ldexp(self.X_fit_, -self._exponent), ind, self.reg, self.n_jobs)
        return np.einsum("qk,qkc->qc", w, self.embedding_[ind]).astype(X.dtype, copy=False)

    def fit_transform(self, X: ArrayLike, y: None = None) -> np.ndarray:
        """Fit and return the embedding of the training points."""
        return self.fit(X).embedding_


@dataclass
class LocalPCAResult:
    """Local PCA at each query.

    mean : (n_queries, d) the kernel-weighted mean ``m(x*)``.
    components : (n_queries, n_components, d) principal axes, largest variance first; each
        axis signed so that its largest-magnitude entry is positive (scikit-learn's rule).
    explained_variance : (n_queries, n_components) eigenvalues of the weighted covariance.
    explained_variance_ratio : (n_queries, n_components) those over the total local variance.
    """

    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray


class LocalPCA(ClassNamePrefixFeaturesOutMixin, LocalKernelMixin, TransformerMixin, BaseEstimator):
    """Local principal component analysis: PCA of the kernel-weighted sample at each query.

    **Kernel:** any localization kernel centred on the query ``x*``. **Values:** the offsets
    ``x_i - x*`` and their products (one engine pass of weighted moments about the query: no
    digits lost to a far origin, in float32 too). **Local
    model:** a Gaussian (PCA) model fitted with the weights ``w_i(x*)``,

    .. math::

        m(x^*) = \\sum_i w_i(x^*)\\, x_i, \\qquad
        \\Sigma(x^*) = \\sum_i w_i(x^*)\\, (x_i - m)(x_i - m)^T = V \\Lambda V^T,

    the local components are the leading columns of ``V``. As the bandwidth grows the weights
    become uniform and this is the global PCA (scikit-learn's ``explained_variance_`` divides
    by ``n - 1`` where the weighted covariance divides by ``n``; the ratios agree).
    :meth:`transform` projects each point onto the local axes at that point,
    ``z(x) = V_k(x)^T (x - m(x))``.

    Parameters
    ----------
    n_components : int, default=2
    kernel, bandwidth, n_neighbors, metric, empty, algorithm, n_jobs
        The kernel and engine options of :class:`localkit.LocalMeanRegressor`, with these
        values: ``kernel`` a profile name ("gaussian", "epanechnikov", "tricube", "biweight",
        "triweight", "triangular", "uniform", "cosine", "laplacian", "cauchy", or
        scikit-learn's aliases) or "softmax"; ``bandwidth`` a number, one per feature, "scott",
        "silverman", "isj" or "sj" (no "cv"); ``metric`` "euclidean", "manhattan",
        "chebyshev" or "minkowski"; ``empty`` "nearest", "nan" or "raise"; ``algorithm``
        "auto", "dense", "neighbors" or "compiled" (the weighted covariances have no binned or
        streamed form). ``kernel="uniform", n_neighbors=k`` gives the PCA of the k nearest
        samples.

    Attributes
    ----------
    X_fit_ : ndarray of shape (n_samples, n_features)
    bandwidth_, kernel_ : the resolved kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalPCA
    >>> t = np.linspace(0, np.pi, 200)
    >>> X = np.c_[np.cos(t), np.sin(t)]  # a half circle
    >>> lpca = LocalPCA(n_components=1, bandwidth=0.05).fit(X)
    >>> np.abs(lpca.local_components([[0.0, 1.0]])).round(2)  # tangent at the top
    array([[[1., 0.]]])
    """

    def __init__(self, n_components=2, kernel="gaussian", bandwidth=1.0, n_neighbors=None,
                 metric="euclidean", empty="nearest", algorithm="auto", n_jobs=None):
        self.n_components = n_components
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.empty = empty
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    # no bandwidth="cv": it chooses h by the error of predicting targets, and local PCA has none
    _parameter_constraints: dict = {**KERNEL_PARAMS, "bandwidth": BANDWIDTH_CONSTRAINT,
                                    "n_components": positive(Integral)}

    def _wide_bandwidth_tends_to_the_mean(self):  # a wide kernel gives the global PCA
        return False

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Store the samples and resolve the kernel. Returns ``self``."""
        X = validate_data(self, X, dtype=FLOATS)
        _check_n_components(self.n_components, X.shape[1])
        try:  # each query's moments (local_covariance's degree-1 design) must fit the memory budget
            check_design_fits(X.shape[1], 1, X.dtype.itemsize)
        except ValueError:  # said in LocalPCA's terms: it has no degree
            raise ValueError(f"LocalPCA holds an n_features x n_features covariance per query, and n_features="
                             f"{X.shape[1]} is more than the memory budget allows; reduce the features first "
                             "(e.g. sklearn.decomposition.PCA)") from None
        self._fit_kernel(X)
        self.X_fit_ = X
        self._bound_kernel = BoundKernel(self.kernel_, X)  # every transform's moments are a pass over it
        self.center_ = safe_mean(X)
        # local covariances hold squares of the spread: refuse what no float of X's dtype can hold
        spread = float(np.max(np.abs(X - self.center_)))
        if not spread * spread * X.shape[1] < np.finfo(X.dtype).max:
            raise ValueError(f"X spreads {spread:.3g} around its mean: its local covariances (squares of that) "
                             f"exceed the {X.dtype} range; rescale X")
        self._n_features_out = self.n_components
        return self

    @map_queries
    def transform(self, X: ArrayLike) -> np.ndarray:
        """Local PCA scores: each point projected onto its own local principal directions.

        .. math::

            z(x) = V_k(x)^T \\big(x - m(x)\\big)

        with ``m(x)`` the kernel-weighted mean and ``V_k(x)`` the ``n_components`` leading axes of
        the weighted covariance at the point ``x`` itself (:meth:`local_pca` at ``x``). The
        axes turn with ``x``, so unlike a global PCA the map is not linear: ``z`` is where ``x``
        sits relative to its neighbourhood's centre, in that neighbourhood's principal frame
        (signed as :meth:`local_components` signs them). With a bandwidth much larger than the
        data it is scikit-learn's ``PCA.transform`` up to the signs of the axes.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components)
        """
        X = self._validate_queries(X)
        local = self._local_pca(X)
        return np.einsum("qkd,qd->qk", local.components, X - local.mean)

    def local_pca(self, X):
        """Weighted mean, components and explained variances at each row of ``X``."""
        return self._local_pca(self._validate_queries(X))

    def _local_pca(self, X):
        # moments about each query: no digits lost to how far it sits from the data's centre
        mean, cov, empty, nearest = local_covariance(X, self.X_fit_, self.kernel_, algorithm=self.algorithm,
                                                     n_jobs=self.n_jobs, bound=self._bound_kernel)
        if empty.any():  # the engine's policy; "nearest": a neighbourhood of one point, no variance
            check_empty(self.empty, int(empty.sum()), stacklevel=3, what="local PCA results", n_queries=len(empty))
            if self.empty == "nearest":
                mean[empty] = self.X_fit_[nearest[empty]]
        vals, vecs = np.linalg.eigh(cov)
        k = self.n_components
        vals, vecs = vals[:, ::-1][:, :k], vecs[:, :, ::-1][:, :, :k]
        comps = vecs.transpose(0, 2, 1)
        big = np.argmax(np.abs(comps), axis=2)
        comps *= np.sign(np.take_along_axis(comps, big[:, :, None], axis=2))
        vals = np.maximum(vals, 0.0)
        total = np.trace(cov, axis1=1, axis2=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(total[:, None] > 0, vals / total[:, None], 0.0)
        result = LocalPCAResult(mean, comps, vals, ratio)
        if self.empty == "nan" and empty.any():
            for part in (result.mean, result.components, result.explained_variance, result.explained_variance_ratio):
                part[empty] = np.nan
        return result

    def local_components(self, X):
        """The local principal axes, shape (n_queries, n_components, n_features)."""
        return self.local_pca(X).components

    def local_explained_variance(self, X):
        """The local variances along those axes, shape (n_queries, n_components)."""
        return self.local_pca(X).explained_variance
