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
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from .._progress import progress
from ..engine import EngineOptions, bind
from ..kernels import Kernel
from .functional import kernel_attention

#: the bandwidth's refit after training searches ``[h / REFIT_SPAN, h * REFIT_SPAN]`` to
#: REFIT_XATOL in ``log h``, moved on at most REFIT_ROUNDS times while the minimiser lies at an end
REFIT_SPAN, REFIT_XATOL, REFIT_ROUNDS = 4.0, 0.02, 4


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
    """The embedding, the bandwidth ``h = exp(log_h)`` (positive by construction), with
    ``local_linear`` the slope ``t`` of the local-linear head ``y_i + (f(x*) - f(x_i)) t``, and with
    ``n_levels`` (the levels of each categorical column) a Li-Racine factor per categorical
    column: a mismatch of levels multiplies the weight by ``r_j = exp(-softplus(a_j))`` in (0, 1)."""

    def __init__(self, embedding, bandwidth, n_outputs, local_linear, n_components, n_levels=None):
        super().__init__()
        self.embedding = embedding
        self.log_h = nn.Parameter(torch.tensor(float(math.log(bandwidth))))
        self.slope = nn.Parameter(torch.zeros(n_components, n_outputs)) if local_linear else None
        self.n_levels = None if not n_levels else list(n_levels)
        # a_j = 0: r_j = 1/2 at the start, halfway between ignoring the column and splitting on it
        self.mismatch = nn.Parameter(torch.zeros(len(n_levels))) if self.n_levels else None

    def log_factors(self):
        """``log r_j = -softplus(a_j)`` of each categorical column (None without factors)."""
        return None if self.mismatch is None else -nn.functional.softplus(self.mismatch)


def local_mean(zq, zc, values, log_h, kernel, same=None, factors=None):
    """The local mean ``sum_j w_ij values_j`` of the queries ``zq`` over the candidates ``zc``,
    ``w_ij`` proportional to ``k(|zq_i - zc_j| / h)`` (``h = exp(log_h)``, profile ``kernel``),
    through :func:`localkit.nn.kernel_attention`. ``same[i, j]`` (candidate ``j`` is query ``i``)
    leaves a query's own row out; with ``factors = (cq, cc, log_r)`` (the codes of queries and
    candidates, the log Li-Racine factors) a weight is multiplied by ``r_l`` for each column ``l``
    where the levels differ (:func:`mismatch_bias`). Without ``same``, no ``(L, S)`` array is formed
    for the profiles of the compiled CPU pass: it runs forward and backward over tiles, the
    factors added tile by tile."""
    return kernel_attention(zq[None], zc[None], values[None], kernel, bandwidth=torch.exp(log_h),
                            mask=None if same is None else ~same[None],
                            pair_bias=None if factors is None else mismatch_bias(*factors))[0]


def mismatch_bias(cq, cc, log_r):
    """The Li-Racine factors as a pair bias of :func:`localkit.nn.kernel_attention`: ``(a, b)`` with
    ``<a_i, b_j> = sum_l log r_l [cq_il != cc_jl]`` = ``sum_l log r_l - sum_l log r_l [cq_il = cc_jl]``:
    ``b_j`` the one-hot codes of candidate ``j`` and a 1, ``a_i`` ``-log r_l`` at query ``i``'s level of
    each column ``l`` and ``sum_l log r_l``."""
    sizes = (torch.maximum(cq.amax(0), cc.amax(0)) + 1).tolist()
    one_hot = lambda codes, col: nn.functional.one_hot(codes[:, col], sizes[col]).to(log_r.dtype)
    a = torch.cat([one_hot(cq, col) * -log_r[col] for col in range(len(sizes))]
                  + [log_r.sum().expand(len(cq), 1)], dim=1)
    b = torch.cat([one_hot(cc, col) for col in range(len(sizes))] + [log_r.new_ones(len(cc), 1)], dim=1)
    return a, b


def local_mean_loss(zq, zc, values, targets, kind, log_h, kernel, same=None, factors=None, slope=None):
    """The leave-one-out loss of the local mean (:func:`local_mean`) of ``values`` against
    ``targets``: mean squared error (``kind="squared"``; with ``slope`` ``t`` the local-linear
    prediction ``sum_j w_ij (values_j + (zq_i - zc_j) t)``) or the log-loss of the local class
    probabilities (``kind="log"``, ``values`` one-hot, ``targets`` class codes)."""
    if kind == "squared":
        if slope is None:
            pred = local_mean(zq, zc, values, log_h, kernel, same, factors)
        else:  # one pass for both means: sum_j w_ij [values_j, zc_j t]
            means = local_mean(zq, zc, torch.cat([values, zc @ slope], dim=1), log_h, kernel, same, factors)
            pred = means[:, :values.shape[1]] + zq @ slope - means[:, values.shape[1]:]
        return ((pred - targets) ** 2).mean()
    p = local_mean(zq, zc, values, log_h, kernel, same, factors).clamp_min(1e-12)
    return -torch.log(p.gather(1, targets[:, None])).mean()


def product_kernel(profile, h, d, log_factors, n_levels):
    """``(kernel, columns)``: the learned kernel as the engine binds it, on rows laid out
    ``[f(x), codes[:, columns]]``: ``k(|f(x*) - f(x)| / h)`` on the first ``d`` columns and, with
    factors (``log_factors`` not None), times an Aitchison-Aitken factor for each categorical
    column of two levels or more. Its smoothing ``lam_j = r_j (c_j - 1) / (1 + r_j (c_j - 1))``
    (``c_j`` levels, fixed) weighs a mismatch ``lam_j / (c_j - 1) = r_j (1 - lam_j)``: ``r_j``
    times a match, the factor trained; a level unseen at fit (code 0) mismatches every row
    alike, which a local mean does not see. A column of one level tells no row from another."""
    columns = [] if log_factors is None else [j for j, c in enumerate(n_levels) if c >= 2]
    if not columns:
        return Kernel(profile, bandwidth=h), columns
    r, c = np.exp(np.asarray(log_factors, dtype=np.float64)[columns]), np.asarray(n_levels)[columns]
    factor = Kernel("aitchison_aitken", bandwidth=r * (c - 1) / (1 + r * (c - 1)),
                    features=list(range(d, d + len(columns)))).with_levels([np.arange(1, k + 1) for k in c])
    return Kernel(profile, bandwidth=h, features=list(range(d))) * factor, columns


def kernel_rows(z, codes, columns):
    """The rows :func:`product_kernel`'s kernel takes: ``[z, codes[:, columns]]`` (``z`` alone
    without columns)."""
    return np.hstack([z, np.asarray(codes)[:, columns].astype(z.dtype)]) if columns else z


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


def embed(model, Xn, codes, device, dtype=torch.float64):
    """``f`` of the rows (no gradient, eval mode) as a NumPy array of ``dtype``, the model's."""
    x = torch.as_tensor(Xn, dtype=dtype, device=device)
    c = torch.as_tensor(codes, dtype=torch.long, device=device)
    return _embed_rows(model, x, c, torch.arange(len(x)))


class Table(NamedTuple):
    """The rows :func:`train` learns from: the standardised numeric columns ``Xn``, the category
    codes, the targets and the values the local mean averages (n_rows, n_outputs)."""

    Xn: np.ndarray
    codes: np.ndarray
    targets: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Schedule:
    """How :func:`train` runs: the loss (``kind`` "regression" or "classification", the profile
    named ``kernel``) and the estimator's training parameters of the same names."""

    kind: str
    kernel: str
    candidate_ratio: float
    max_candidates: int | None
    batch_size: int
    lr: float
    weight_decay: float
    max_epochs: int
    patience: int
    ema_epochs: float
    refit_bandwidth: bool


def train(model, table, schedule, *, train_rows, val_rows, seed, device, bar):
    """AdamW on the leave-one-out loss of the :class:`Table` ``table`` (:class:`Schedule`
    ``schedule``): each batch of training rows against a random fraction of the training rows as
    candidates (drawn from the rows outside the batch where enough remain, so that no query meets
    itself and the loss runs as one fused pass; else from all, each query's own row left out);
    after each epoch the loss of the held-out rows against all training rows, read at the
    weights' exponential moving average (:func:`ema_decay`) where ``ema_epochs`` is positive; the
    best state kept (early stopping after ``patience`` epochs without progress), and with
    ``refit_bandwidth`` its ``h`` chosen again on that loss (:meth:`HeldOut.refit_bandwidth`).
    Returns ``(best_epoch, n_epochs, history)``."""
    kind, kernel, batch_size, patience = schedule.kind, schedule.kernel, schedule.batch_size, schedule.patience
    gen = torch.Generator().manual_seed(seed)
    x_all = torch.as_tensor(table.Xn, dtype=torch.float32, device=device)
    c_all = torch.as_tensor(table.codes, dtype=torch.long, device=device)
    t_all = torch.as_tensor(table.targets, device=device)
    v_all = torch.as_tensor(table.values, dtype=torch.float32, device=device)
    tr = torch.as_tensor(train_rows, dtype=torch.long)
    n_tr = len(tr)
    n_cand = int(math.ceil(schedule.candidate_ratio * n_tr))
    if schedule.max_candidates is not None:
        n_cand = min(n_cand, schedule.max_candidates)
    n_cand = min(n_tr, max(n_cand, 64))
    held_out = HeldOut(x_all, c_all, t_all, v_all, train_rows, val_rows, kind, kernel)
    opt = torch.optim.AdamW(model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay)
    # the average is what early stopping reads and what is kept; training goes on from the weights
    averaged = None if not schedule.ema_epochs else torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(
            ema_decay(schedule.ema_epochs, math.ceil(n_tr / batch_size))))
    watched = model if averaged is None else averaged.module
    best, best_state, best_epoch, history = math.inf, copy.deepcopy(model.state_dict()), 0, []
    epoch = 0
    for epoch in range(1, schedule.max_epochs + 1):
        model.train()
        order = tr[torch.randperm(n_tr, generator=gen)]
        for s in range(0, n_tr, batch_size):
            q = order[s:s + batch_size]
            others = torch.cat([order[:s], order[s + batch_size:]])
            if len(others) >= n_cand:  # candidates outside the batch: no row is its own, no mask
                cand, same = others[torch.randperm(len(others), generator=gen)[:n_cand]], None
            else:  # a batch of (nearly) every row: candidates from all, each query's own left out
                cand = tr[torch.randperm(n_tr, generator=gen)[:n_cand]]
                same = (q[:, None] == cand[None]).to(device)
            rows = torch.cat([q, cand]).to(device)
            z = model.embedding(x_all[rows], c_all[rows])
            zq, zc = z[:len(q)], z[len(q):]
            factors = None if model.mismatch is None else (c_all[q.to(device)], c_all[cand.to(device)],
                                                           model.log_factors())
            loss = local_mean_loss(zq, zc, v_all[cand.to(device)], t_all[q.to(device)], kind, model.log_h, kernel,
                                   same, factors, model.slope)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if averaged is not None:
                averaged.update_parameters(model)
        val = held_out.loss(watched)
        history.append(val)
        bar.update()
        bar.set_postfix(val_loss=f"{val:.4g}", refresh=False)
        if val < best - 1e-7 * abs(best) or not math.isfinite(best):
            best, best_epoch, best_state = val, epoch, copy.deepcopy(watched.state_dict())
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    if schedule.refit_bandwidth and schedule.max_epochs:
        held_out.refit_bandwidth(model)
    return best_epoch, epoch, history


def fit_member(model, rng_state, table, schedule, *, train_rows, val_rows, seed, device, threads, desc, verbose):
    """One member of an ensemble, trained by :func:`train` on ``threads`` torch threads from the
    initialised ``model`` and the CPU random state ``rng_state`` that followed its initialisation
    (devices' generators seeded by ``seed``), so that a member trained in another process is the
    member trained here. Returns ``(model, best_epoch, n_epochs, history)``."""
    with torch_threads(threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_rng_state(rng_state)
        with progress(schedule.max_epochs, desc, verbose, unit="epoch") as bar:
            best_epoch, n_epochs, history = train(model, table, schedule, train_rows=train_rows, val_rows=val_rows,
                                                  seed=seed, device=device, bar=bar)
    return model, best_epoch, n_epochs, history


def ema_decay(ema_epochs, steps_per_epoch):
    """The per-step decay ``d = max(0, 1 - 1 / (ema_epochs x steps_per_epoch))`` of the weights' moving
    average ``a_k = d a_(k-1) + (1 - d) w_k`` (``a_1 = w_1``): a time constant of ``ema_epochs``
    epochs whatever the table's size (a decay fixed per step would average over hundreds of
    epochs on a table of one batch, and over a fraction of one on a large one)."""
    return max(0.0, 1.0 - 1.0 / (ema_epochs * steps_per_epoch))


class HeldOut:
    """The held-out loss that early stopping and the bandwidth's refit read: the local mean of the
    held-out rows (the training rows themselves, each left out of its own mean, when nothing is
    held out) over **all** training rows, one engine pass over the embedded training rows, as
    ``predict`` will run it."""

    def __init__(self, x_all, c_all, t_all, v_all, train_rows, val_rows, kind, kernel):
        self.x_all, self.c_all, self.t_all, self.v_all = x_all, c_all, t_all, v_all
        self.tr = torch.as_tensor(train_rows, dtype=torch.long)
        self.held = torch.as_tensor(val_rows, dtype=torch.long) if len(val_rows) else None
        self.kind, self.kernel = kind, kernel

    def embedded(self, model):
        """``(zc, zq, values, target, slope, factors)`` of the model as it is: the embedded training
        and held-out rows (``zq`` None: leave-one-out at the training rows), the values the local
        mean averages (``y_i - f(x_i) t`` with a local-linear slope ``t``), the held-out targets,
        the slope and the log Li-Racine factors (None without them)."""
        zc = _embed_rows(model, self.x_all, self.c_all, self.tr)
        zq = None if self.held is None else _embed_rows(model, self.x_all, self.c_all, self.held)
        log_r = model.log_factors()
        factors = None if log_r is None else log_r.detach().cpu().numpy()
        slope = None if model.slope is None else model.slope.detach().cpu().numpy()
        values = self.v_all[self.tr.to(self.v_all.device)].cpu().numpy()
        if slope is not None:  # y_i + (f(x*) - f(x_i)) t = f(x*) t + (y_i - f(x_i) t)
            values = values - zc @ slope
        target = self.t_all[(self.tr if self.held is None else self.held).to(self.t_all.device)].cpu().numpy()
        return zc, zq, values, target, slope, factors

    def loss(self, model, embedded=None, bandwidth=None):
        """The held-out loss at bandwidth ``h`` (the model's own for None)."""
        zc, zq, values, target, slope, factors = self.embedded(model) if embedded is None else embedded
        h = float(torch.exp(model.log_h.detach())) if bandwidth is None else float(bandwidth)
        kernel, columns = product_kernel(self.kernel, h, zc.shape[1], factors, model.n_levels)
        # the engine on torch's threads: one member's pass on every thread it trains on
        bound = bind(kernel, kernel_rows(zc, self._codes(self.tr), columns),
                     options=EngineOptions(n_jobs=torch.get_num_threads()))
        sums = (bound.sums(None, values, exclude_self=True) if zq is None
                else bound.sums(kernel_rows(zq, self._codes(self.held), columns), values))
        mean = np.asarray(sums.mean, dtype=np.float64).reshape(len(target), -1)
        if self.kind == "squared":
            if slope is not None:
                mean = mean + (zc if zq is None else zq) @ slope
            return float(np.mean((mean - target.reshape(mean.shape)) ** 2))
        p = np.take_along_axis(mean, target.reshape(-1, 1).astype(np.intp), axis=1)
        return float(-np.mean(np.log(np.maximum(p, 1e-12))))

    def _codes(self, rows):
        return self.c_all[rows.to(self.c_all.device)].cpu().numpy()

    def refit_bandwidth(self, model, span=REFIT_SPAN):
        """Set ``h`` to the minimiser of the held-out loss at the model's embedding: a bounded Brent
        search in ``log h`` over ``[h / span, h * span]``, moved on (at most ``REFIT_ROUNDS`` times)
        while the minimiser lies at an end. Training drew a fraction of the rows as candidates;
        over all of them, as ``predict`` averages, a local mean wants a smaller ``h``. The trained
        ``h`` is kept where no other does better."""
        from scipy.optimize import minimize_scalar

        embedded = self.embedded(model)
        log_h, best = float(model.log_h.detach()), self.loss(model, embedded)
        for _ in range(REFIT_ROUNDS):
            lo, hi = log_h - math.log(span), log_h + math.log(span)
            found = minimize_scalar(lambda t: self.loss(model, embedded, math.exp(t)), method="bounded",
                                    bounds=(lo, hi), options={"xatol": REFIT_XATOL})
            if not found.fun < best:
                break
            best, log_h = float(found.fun), float(found.x)
            if lo + 2 * REFIT_XATOL < log_h < hi - 2 * REFIT_XATOL:  # inside the bracket: a minimum
                break
        with torch.no_grad():
            model.log_h.fill_(log_h)
        return best


def _embed_rows(model, x_all, c_all, rows, batch=8192):
    """``f`` of ``x_all[rows]`` (eval mode, no gradient) as a NumPy array, in batches of rows."""
    model.eval()
    blocks = []
    with torch.no_grad():
        for s in range(0, max(len(rows), 1), batch):  # no rows: one empty (0, n_components) block
            r = rows[s:s + batch].to(x_all.device)
            blocks.append(model.embedding(x_all[r], c_all[r]).cpu().numpy())
    return np.concatenate(blocks)
