"""The engine on any array library: PyTorch tensors (CPU or CUDA), CuPy, through the array API.

scikit-learn's convention: with ``sklearn.config_context(array_api_dispatch=True)`` (and
``SCIPY_ARRAY_API=1``), arrays that are not NumPy's are computed on their own device and the
result comes back in the same library on the same device. NumPy input keeps the NumPy engine
(and its compiled CPU paths).

The algorithm is the engine's streaming local mean: blocks of queries against blocks of
samples, the log-weights of each block from one matrix product (queries recentred per block, so
that float32 keeps its digits far from the origin), an online log-sum-exp across sample blocks
(as flash attention does). Memory is one block, never ``n_queries x n_samples``. The kernel's
profile is the very statement of :mod:`localkit.kernels.profiles`, bound to the namespace.
"""
from __future__ import annotations

import math

import numpy as np

from .blocks import block_sizes
from .paths import LOG_WEIGHT_TOL
from .results import LocalSums

#: Cells of one kernel block on an accelerator (float32: 256 MiB); on a CPU the engine's budget rules
ACCELERATOR_BLOCK_CELLS = 2**26


def foreign_namespace(*arrays):
    """The array namespace of ``arrays`` when array-API dispatch is on and they are not NumPy's;
    ``None`` otherwise (then the NumPy engine runs)."""
    from sklearn.utils._array_api import _is_numpy_namespace, get_namespace

    present = [a for a in arrays if a is not None and not isinstance(a, (int, float, str, list, tuple))]
    if not present or all(isinstance(a, np.ndarray) for a in present):
        return None
    foreign = [a for a in present if not isinstance(a, np.ndarray)]
    xp, is_array_api = get_namespace(*foreign)
    return None if not is_array_api or _is_numpy_namespace(xp) else xp


def _device(xp, a):
    from sklearn.utils._array_api import device

    return device(a)


def _as_float(xp, a, name, like=None, ndim=(1, 2)):
    """``a`` as a floating array of the namespace (on ``like``'s device), validated."""
    if like is not None:
        a = xp.asarray(np.asarray(a) if isinstance(a, (list, tuple)) else a, device=_device(xp, like))
    if not xp.isdtype(a.dtype, "real floating"):
        if not xp.isdtype(a.dtype, ("integral", "bool")):
            raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
        a = xp.astype(a, xp.float32 if like is not None and like.dtype == xp.float32 else xp.float64)
    if a.ndim not in ndim:
        raise ValueError(f"{name} must be {' or '.join(f'{d}-D' for d in ndim)}, got shape {tuple(a.shape)}")
    if a.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(a.shape)}); at least one value is needed")
    if not bool(xp.all(xp.isfinite(a))):
        raise ValueError(f"{name} contains NaN or infinity; all values must be finite")
    return a


def xp_local_sums(xp, queries, samples, values, kernel, *, exclude_self=False, sample_weight=None, options=None):
    """:func:`localkit.local_sums` for arrays of the namespace ``xp`` (fixed bandwidths, every
    profile and the softmax kernel, ``exclude_self``, ``sample_weight``, the empty policy)."""
    from .options import EngineOptions

    options = EngineOptions() if options is None else options
    if kernel.n_neighbors is not None:
        raise ValueError("n_neighbors (kNN bandwidths) is not available for array-API inputs yet; pass "
                         "NumPy arrays, or a fixed bandwidth")
    if kernel.metric != "euclidean":
        raise ValueError(f"metric={kernel.metric!r} is not available for array-API inputs; use 'euclidean'")
    X = _as_float(xp, samples, "samples")
    if X.ndim == 1:
        X = xp.reshape(X, (-1, 1))
    n, d = X.shape
    dtype = X.dtype
    Q = X if queries is None else _as_float(xp, queries, "queries", like=X)
    if Q.ndim == 1:
        Q = xp.reshape(Q, (-1, 1))
    if Q.shape[1] != d:
        raise ValueError(f"queries has {Q.shape[1]} features, but {d} were expected")
    Q = xp.astype(Q, dtype)
    if exclude_self and (Q.shape[0] != n or n < 2):
        raise ValueError("exclude_self=True needs the queries to be the samples, and at least 2 of them")
    squeeze = False
    if values is None:
        V = xp.zeros((n, 0), dtype=dtype, device=_device(xp, X))
    else:
        V = _as_float(xp, values, "values", like=X)
        squeeze = V.ndim == 1
        V = xp.astype(xp.reshape(V, (V.shape[0], -1)), dtype)
        if V.shape[0] != n:
            raise ValueError(f"values has {V.shape[0]} rows but samples has {n}; they must match")
    weight, log_weight_max, dead = None, 0.0, None
    if sample_weight is not None:
        c = _as_float(xp, sample_weight, "sample_weight", like=X, ndim=(1,))
        if c.shape[0] != n:
            raise ValueError(f"sample_weight must have shape (n_samples,) = ({n},), got {tuple(c.shape)}")
        if bool(xp.any(c < 0)):
            raise ValueError("sample_weight must be >= 0 everywhere")
        top = float(xp.max(c))
        if top == 0:
            raise ValueError("sample_weight is zero everywhere; at least one sample must carry weight")
        weight, log_weight_max, dead = xp.astype(c / top, dtype), math.log(top), c == 0

    h = xp_bandwidth(xp, kernel, X)
    if kernel.is_softmax:
        Qs, Xs = Q / h, X
    else:
        centre = xp.mean(X, axis=0)
        hh = xp.asarray(h, dtype=dtype, device=_device(xp, X))
        Qs, Xs = (Q - centre) / hh, (X - centre) / hh
    if _flex_fits(xp, Qs, Xs, kernel, options):
        S, shift = flex_sums(Qs, Xs, V, weight, kernel, exclude_self)
    else:
        V_aug = xp.concat([V, xp.ones((n, 1), dtype=dtype, device=_device(xp, X))], axis=1)
        if weight is not None:
            V_aug = V_aug * weight[:, None]
        S, shift = _stream(xp, Qs, Xs, V_aug, kernel, exclude_self, options)
    mean = S[:, :-1] / S[:, -1:]
    log_sum = shift + xp.log(S[:, -1]) + log_weight_max
    empty = ~(log_sum > -math.inf)
    if bool(xp.any(empty)):
        mean, log_sum = _empty_policy(xp, options.empty, Qs, Xs, V, mean, log_sum, empty, exclude_self, dead)
    if values is None:
        return LocalSums(None, log_sum, empty)
    return LocalSums(mean[:, 0] if squeeze else mean, log_sum, empty)


def xp_bandwidth(xp, kernel, X):
    """The bandwidth as a float or a per-feature tuple; rules from the samples' spread (computed
    on the device, scale-free)."""
    from ..kernels.bandwidth import rule_factor

    if isinstance(kernel.bandwidth, str):
        n, d = X.shape
        if n < 2:
            raise ValueError(f"bandwidth={kernel.bandwidth!r} needs at least 2 samples, got {n}")
        centred = X - xp.mean(X, axis=0)
        scale = xp.max(xp.abs(centred), axis=0)
        safe = xp.where(scale > 0, scale, xp.ones_like(scale))
        sigma = xp.std(centred / safe, axis=0, correction=1) * scale
        h = [rule_factor(kernel.bandwidth, n, d) * float(s) for s in sigma]
        if not all(math.isfinite(v) and v > 0 for v in h):
            raise ValueError(f"bandwidth={kernel.bandwidth!r} gave {h} (zero spread or beyond the float range); "
                             "give the bandwidth explicitly")
        return h[0] if d == 1 else h
    h = kernel.resolve_bandwidth(np.zeros((2, X.shape[1])))  # numbers and per-feature arrays: validated
    return float(h) if np.ndim(h) == 0 else [float(v) for v in h]


def _flex_fits(xp, Qs, Xs, kernel, options):
    """FlexAttention fuses the whole local mean on CUDA in float32 (one kernel, no ``n x m``
    block in memory; ~2x the streamed blocks on an H200, see benchmarks/RESULTS.md) when its
    features keep the engine's error budget: the matrix-product form of ``u^2`` errs by about
    ``eps (|q|^2 + |x|^2)`` (no per-block recentring there), and the kinked profiles want exact
    differences."""
    from .flex import flex_available

    if options.block_size is not None or Qs.dtype != xp.float32 or not flex_available(Qs):
        return False
    if kernel.is_softmax:  # the logits q . x / h must stay finite in float32
        return float(xp.max(xp.abs(Qs))) * float(xp.max(xp.abs(Xs))) * Qs.shape[1] < 1e37
    if kernel.profile.exact_distance:
        return False
    reach = float(xp.max(xp.sum(Qs * Qs, axis=1))) + float(xp.max(xp.sum(Xs * Xs, axis=1)))
    return 2 * float(xp.finfo(Qs.dtype).eps) * reach <= LOG_WEIGHT_TOL[np.dtype(np.float32)]


def flex_sums(Qs, Xs, V, weight, kernel, exclude_self, compiled=True):
    """``(S, shift)`` as :func:`_stream` returns them (the last column of ``S`` the weight sum),
    from one FlexAttention call: the normalised means and the log-sum-exp of the log-weights;
    sample weights enter as log weights added to the scores. Torch tensors, scaled coordinates."""
    import torch

    from .flex import flex_kernel_attention

    width = V.shape[1]
    values = torch.nn.functional.pad(V, (0, max(16, -(-width // 16) * 16) - width))  # Triton's tiles
    one = torch.ones((1, 1, 1), dtype=Qs.dtype, device=Qs.device)
    out, lse = flex_kernel_attention("softmax" if kernel.is_softmax else kernel.profile.name, Qs[None], Xs[None],
                                     values[None], one, False, None, None, compiled, exclude_self=exclude_self,
                                     log_weight=None if weight is None else torch.log(weight), return_lse=True)
    S = torch.cat([out[0, :, :width], torch.ones_like(out[0, :, :1])], dim=1)
    return S, lse[0].to(Qs.dtype)


def _stream(xp, Qs, Xs, V_aug, kernel, exclude_self, options):
    """``(S, shift)``: weighted sums ``S * exp(shift)`` over sample blocks, online log-sum-exp."""
    n_q, n_s, width = Qs.shape[0], Xs.shape[0], V_aug.shape[1]
    on_cpu = "cpu" in str(_device(xp, Qs))
    if options.block_size is not None or on_cpu:
        bq, bs = block_sizes(n_q, n_s, 4 if Qs.dtype == xp.float32 else 8, block_size=options.block_size,
                             memory_budget=options.memory_budget)
    else:
        bs = min(n_s, 8192)
        bq = max(1, min(n_q, ACCELERATOR_BLOCK_CELLS // bs))
    log_k = None if kernel.is_softmax else kernel.profile.log_k_for(xp)
    gaussian = not kernel.is_softmax and kernel.profile.name == "gaussian"
    eps = float(xp.finfo(Qs.dtype).eps)
    order = xp.arange(n_q, device=_device(xp, Qs))
    if not kernel.is_softmax:  # compact query blocks (sorted along the widest coordinate)
        widest = int(xp.argmax(xp.max(Qs, axis=0) - xp.min(Qs, axis=0)))
        order = xp.argsort(Qs[:, widest])
        Qs = xp.take(Qs, order, axis=0)
    S_blocks, shift_blocks = [], []
    for r0 in range(0, n_q, bq):
        Q = Qs[r0:r0 + bq, ...]
        exact = kernel.profile.exact_distance if not kernel.is_softmax else False
        if not kernel.is_softmax:  # recentred per block: cancellation independent of the origin
            centre = (xp.min(Q, axis=0) + xp.max(Q, axis=0)) / 2
            Q = Q - centre
            # the matrix-product form errs by ~eps |q|^2 in u^2 (see localkit.engine.paths)
            tol = LOG_WEIGHT_TOL[np.dtype(np.float32 if Qs.dtype == xp.float32 else np.float64)]
            exact = exact or 2 * eps * float(xp.max(xp.sum(Q * Q, axis=1))) > tol
        q_sq = xp.sum(Q * Q, axis=1)
        m = xp.full((Q.shape[0],), -math.inf, dtype=Qs.dtype, device=_device(xp, Qs))
        S = xp.zeros((Q.shape[0], width), dtype=Qs.dtype, device=_device(xp, Qs))
        for c0 in range(0, n_s, bs):
            X = Xs[c0:c0 + bs, ...]
            if kernel.is_softmax:
                L = Q @ xp.permute_dims(X, (1, 0))
            else:
                X = X - centre
                u2 = _sq_distances(xp, Q, q_sq, X, exact)
                L = -0.5 * u2 if gaussian else log_k(u2)
            if exclude_self:
                rows = order[r0:r0 + Q.shape[0]]
                cols = xp.arange(c0, c0 + X.shape[0], device=_device(xp, Qs))
                L = xp.where(rows[:, None] == cols[None, :], -math.inf, L)
            new = xp.maximum(m, xp.max(L, axis=1))
            safe = xp.where(new > -math.inf, new, xp.zeros_like(new))
            S = S * xp.exp(m - safe)[:, None] + xp.exp(L - safe[:, None]) @ V_aug[c0:c0 + bs, ...]
            m = new
        S_blocks.append(S)
        shift_blocks.append(xp.where(m > -math.inf, m, xp.zeros_like(m)))
    inverse = xp.argsort(order)
    return xp.take(xp.concat(S_blocks, axis=0), inverse, axis=0), xp.take(xp.concat(shift_blocks, axis=0), inverse)


def _sq_distances(xp, Q, q_sq, X, exact):
    """``|q - x|^2`` of a block: one matrix product, or differences for the profiles with a kink
    at 0 (Laplacian, triangular), whose square root would show the product's ~1e-8 error."""
    if not exact:
        inner = Q @ xp.permute_dims(X, (1, 0))
        return xp.clip(q_sq[:, None] + xp.sum(X * X, axis=1)[None, :] - 2 * inner, min=0)
    step = max(1, ACCELERATOR_BLOCK_CELLS // max(1, X.shape[0] * Q.shape[1]) // 8)
    return xp.concat([xp.sum((Q[i:i + step, None, :] - X[None, :, :]) ** 2, axis=2)
                      for i in range(0, Q.shape[0], step)], axis=0)


def _empty_policy(xp, policy, Qs, Xs, V, mean, log_sum, empty, exclude_self, dead):
    count = int(xp.sum(xp.astype(empty, xp.int64)))
    if policy == "raise":
        raise ValueError(f"{count} queries have an empty neighbourhood (no sample inside the kernel's support); "
                         "widen the bandwidth, use a non-compact kernel, or pass empty='nearest' or 'nan'")
    if policy == "nan":
        import warnings

        warnings.warn(f"{count} queries have an empty neighbourhood; their local means are NaN (empty='nan')",
                      RuntimeWarning, stacklevel=4)
        return xp.where(empty[:, None], math.nan, mean), log_sum
    # the nearest sample that carries weight: an argmin of exact squared distances, streamed
    parts = []
    for r0 in range(0, Qs.shape[0], 256):
        Q = Qs[r0:r0 + 256, ...]
        best = xp.full((Q.shape[0],), math.inf, dtype=Qs.dtype, device=_device(xp, Qs))
        arg = xp.zeros((Q.shape[0],), dtype=xp.int64, device=_device(xp, Qs))
        for c0 in range(0, Xs.shape[0], 1024):
            X = Xs[c0:c0 + 1024, ...]
            D = xp.sum((Q[:, None, :] - X[None, :, :]) ** 2, axis=2)
            if exclude_self:
                rows = xp.arange(r0, r0 + Q.shape[0], device=_device(xp, Qs))
                cols = xp.arange(c0, c0 + X.shape[0], device=_device(xp, Qs))
                D = xp.where(rows[:, None] == cols[None, :], math.inf, D)
            if dead is not None:
                D = xp.where(dead[None, c0:c0 + 1024], math.inf, D)
            d = xp.min(D, axis=1)
            better = d < best
            best = xp.where(better, d, best)
            arg = xp.where(better, xp.argmin(D, axis=1) + c0, arg)
        parts.append(arg)
    nearest = xp.take(V, xp.concat(parts, axis=0), axis=0)
    return xp.where(empty[:, None], nearest, mean), log_sum
