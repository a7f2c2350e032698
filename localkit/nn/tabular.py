"""The PyTorch side of :mod:`localkit.models.learned_kernel`: the embedding ``f`` and its training
by the exact leave-one-out loss of the local mean over a random fraction of candidates.

Imported only from inside ``LearnedKernelRegressor.fit`` / ``LearnedKernelClassifier.fit`` and
their prediction paths, so that ``import localkit`` stays free of torch. Prediction itself is an
engine pass over the embedded training rows (bound once in ``fit``); this module only embeds.
"""
from __future__ import annotations

import copy
import math
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from ..kernels.profiles import get_profile


class PeriodicEmbedding(nn.Module):
    """PLR embeddings of numeric columns (Gorishniy et al., 2022): column ``j`` goes to
    ``ReLU(W [cos(2 pi c_j x_j), sin(2 pi c_j x_j)] + b)``, frequencies ``c_j`` learned (initialised
    ``N(0, frequency_scale^2)``), the linear map shared by the columns ("lite")."""

    def __init__(self, n_features, n_frequencies, frequency_scale, d_embedding):
        super().__init__()
        self.frequencies = nn.Parameter(torch.randn(n_features, n_frequencies) * frequency_scale)
        self.linear = nn.Linear(2 * n_frequencies, d_embedding)

    def forward(self, x):
        v = 2 * math.pi * self.frequencies[None] * x[..., None]
        return torch.relu(self.linear(torch.cat([torch.cos(v), torch.sin(v)], dim=-1))).flatten(1)


class Embedding(nn.Module):
    """``f(x)``: numeric columns through PLR embeddings (``embedding="plr"``) or as they are
    (``"linear"``), categorical columns one-hot (one learned row per level; an unseen level, code 0,
    is the zero row), one linear map to ``n_components`` and ``n_blocks`` residual ReLU blocks."""

    def __init__(self, n_numeric, n_levels, *, embedding, n_components, n_frequencies, frequency_scale,
                 d_embedding, n_blocks, d_block, dropout):
        super().__init__()
        self.plr = (PeriodicEmbedding(n_numeric, n_frequencies, frequency_scale, d_embedding)
                    if embedding == "plr" and n_numeric else None)
        width = n_numeric * (d_embedding if self.plr is not None else 1)
        self.numeric = nn.Linear(width, n_components) if width else None
        offsets = np.concatenate([[0], np.cumsum(n_levels)[:-1]]) if len(n_levels) else np.zeros(0)
        self.register_buffer("offsets", torch.as_tensor(offsets, dtype=torch.long))
        self.categorical = nn.Embedding(int(np.sum(n_levels)) + 1, n_components, padding_idx=0) if len(n_levels) else None
        if self.categorical is not None:
            nn.init.normal_(self.categorical.weight, std=1.0 / math.sqrt(max(len(n_levels), 1)))
            with torch.no_grad():
                self.categorical.weight[0].zero_()
        self.bias = nn.Parameter(torch.zeros(n_components)) if self.numeric is None else None
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(n_components, d_block), nn.ReLU(), nn.Dropout(dropout),
                                                  nn.Linear(d_block, n_components)) for _ in range(n_blocks))

    def forward(self, x, codes):
        z = self.bias if self.numeric is None else self.numeric(x if self.plr is None else self.plr(x))
        if self.categorical is not None:
            # code 0: an unseen level (zero row); level l of column c: offsets[c] + l (l >= 1)
            idx = torch.where(codes > 0, codes + self.offsets[None], torch.zeros_like(codes))
            z = z + self.categorical(idx).sum(1)
        if self.bias is not None and z.dim() == 1:
            z = z.expand(x.shape[0], -1)
        for block in self.blocks:
            z = z + block(z)
        return z


class LearnedKernel(nn.Module):
    """The embedding, the bandwidth ``h = exp(log_h)`` (positive by construction) and, with
    ``local_linear``, the slope ``t`` of the local-linear head ``y_i + (f(x*) - f(x_i)) t``."""

    def __init__(self, embedding, bandwidth, n_outputs, local_linear, n_components):
        super().__init__()
        self.embedding = embedding
        self.log_h = nn.Parameter(torch.tensor(float(math.log(bandwidth))))
        self.slope = nn.Parameter(torch.zeros(n_components, n_outputs)) if local_linear else None


def loo_logits(zq, zc, log_h, log_k, same):
    """Log-weights ``log k(|zq_i - zc_j|^2 / h^2)`` of queries against candidates, a query's own
    row (``same[i, j]``: candidate ``j`` is query ``i``) left out."""
    d2 = (zq * zq).sum(1, keepdim=True) + (zc * zc).sum(1)[None] - 2.0 * zq @ zc.T
    u2 = d2.clamp_min(0.0) * torch.exp(-2.0 * log_h)
    return log_k(u2).masked_fill(same, -math.inf)


def local_mean_loss(logits, values, targets, kind, zq=None, zc=None, slope=None):
    """The local mean of ``values`` under ``softmax(logits)`` against ``targets``: mean squared error
    (``kind="squared"``, with the local-linear correction when ``slope`` is given) or the log-loss
    of the local class probabilities (``kind="log"``, ``values`` one-hot, ``targets`` class codes)."""
    w = torch.softmax(logits, dim=1)
    if kind == "squared":
        pred = w @ values
        if slope is not None:
            pred = pred + zq @ slope - w @ (zc @ slope)
        return ((pred - targets) ** 2).mean()
    p = (w @ values).clamp_min(1e-12)
    return -torch.log(p.gather(1, targets[:, None])).mean()


@contextmanager
def torch_threads(n):
    """``torch.set_num_threads(n)`` inside the block only (None: as it is)."""
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def embed(model, Xn, codes, device, batch=8192, dtype=torch.float32):
    """``f`` of the rows (no gradient, eval mode) as a NumPy array of the model's dtype (float32: the
    engine keeps it, and its passes over the embedded rows run in float32)."""
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(Xn), batch):
            x = torch.as_tensor(Xn[s:s + batch], dtype=dtype, device=device)
            c = torch.as_tensor(codes[s:s + batch], dtype=torch.long, device=device)
            out.append(model.embedding(x, c).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.log_h.numel()))


def train(model, Xn, codes, targets, values, *, kind, kernel, train_rows, val_rows, candidate_ratio, max_candidates, batch_size,
          lr, weight_decay, max_epochs, patience, seed, device, bar):
    """AdamW on the leave-one-out loss: each batch of training rows against a random fraction of
    the training rows as candidates; after each epoch the loss of the held-out rows against all
    training rows; the best state kept (early stopping after ``patience`` epochs without progress).
    Returns ``(best_epoch, n_epochs, history)``."""
    log_k = get_profile(kernel).log_k_for(torch)
    gen = torch.Generator().manual_seed(seed)
    x_all = torch.as_tensor(Xn, dtype=torch.float32, device=device)
    c_all = torch.as_tensor(codes, dtype=torch.long, device=device)
    t_all = torch.as_tensor(targets, device=device)
    v_all = torch.as_tensor(values, dtype=torch.float32, device=device)
    tr = torch.as_tensor(train_rows, dtype=torch.long)
    n_tr = len(tr)
    n_cand = int(math.ceil(candidate_ratio * n_tr))
    if max_candidates is not None:
        n_cand = min(n_cand, max_candidates)
    n_cand = min(n_tr, max(n_cand, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, best_epoch, history = math.inf, copy.deepcopy(model.state_dict()), 0, []
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        order = tr[torch.randperm(n_tr, generator=gen)]
        for s in range(0, n_tr, batch_size):
            q = order[s:s + batch_size]
            cand = tr[torch.randperm(n_tr, generator=gen)[:n_cand]]
            rows = torch.cat([q, cand]).to(device)
            z = model.embedding(x_all[rows], c_all[rows])
            zq, zc = z[:len(q)], z[len(q):]
            same = (q[:, None] == cand[None]).to(device)
            logits = loo_logits(zq, zc, model.log_h, log_k, same)
            loss = local_mean_loss(logits, v_all[cand.to(device)], t_all[q.to(device)], kind, zq, zc, model.slope)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        val = evaluate(model, x_all, c_all, t_all, v_all, tr, val_rows, kind, log_k, device)
        history.append(val)
        bar.update()
        bar.set_postfix(val_loss=f"{val:.4g}", refresh=False)
        if val < best - 1e-7 * abs(best) or not math.isfinite(best):
            best, best_epoch, best_state = val, epoch, copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return best_epoch, epoch, history


def evaluate(model, x_all, c_all, t_all, v_all, tr, val_rows, kind, log_k, device, batch=1024):
    """The loss of the held-out rows (the training rows themselves, left out one at a time, when
    nothing is held out) against all training rows."""
    model.eval()
    held = torch.as_tensor(val_rows, dtype=torch.long) if len(val_rows) else tr
    with torch.no_grad():
        zc = model.embedding(x_all[tr.to(device)], c_all[tr.to(device)])
        vc = v_all[tr.to(device)]
        total = 0.0
        for s in range(0, len(held), batch):
            q = held[s:s + batch]
            zq = model.embedding(x_all[q.to(device)], c_all[q.to(device)])
            same = (q[:, None] == tr[None]).to(device)
            logits = loo_logits(zq, zc, model.log_h, log_k, same)
            total += float(local_mean_loss(logits, vc, t_all[q.to(device)], kind, zq, zc, model.slope)) * len(q)
    return total / len(held)
