"""Learned localization kernels for tables (ModernNCA, TabR): a local mean whose kernel is
``k(|f(x*) - f(x)| / h)`` in an embedding ``f`` learned end to end by the exact leave-one-out loss
of that local mean.

The embedding is trained with PyTorch (the ``nn`` extra, imported only when a model is fitted);
once trained, the training rows are embedded once and bound to the engine in ``fit``, and every
prediction is an engine pass over them (a local mean of the targets or one-hot labels), so that a
``predict`` pays only for embedding its queries.
"""
from __future__ import annotations

import functools
from numbers import Integral, Real

import numpy as np
from joblib import Parallel, delayed
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.preprocessing import LabelEncoder, QuantileTransformer
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d, validate_data

from .._extras import install_extra
from .._params import N_JOBS_CONSTRAINT
from .._validation import check_class_labels, check_regression_target
from ..engine import EngineOptions, bind
from ..kernels import Kernel
from ._base import KeptBindings

#: the profiles the kernel may take: smooth in ``u`` away from 0, so the leave-one-out loss has a gradient
PROFILES = ("laplacian", "gaussian", "cauchy")
EMBEDDINGS = ("plr", "linear", "identity")
#: ``n_ensembles="auto"``: AUTO_MEMBERS members up to AUTO_MEMBERS_UP_TO training rows,
#: AUTO_MEMBERS_BEYOND beyond
AUTO_MEMBERS, AUTO_MEMBERS_UP_TO, AUTO_MEMBERS_BEYOND = 3, 10_000, 2
#: ``ema_epochs="auto"``: a moving average over this many epochs beyond AUTO_MEMBERS_UP_TO rows
AUTO_EMA_EPOCHS = 3.0
#: query rows per block when weights are read for :meth:`explain`
EXPLAIN_BLOCK = 256


def _torch_net():
    """The PyTorch side (:mod:`localkit.nn.tabular`), or an ImportError naming the extra."""
    try:
        from ..nn import tabular
    except ImportError as exc:  # pragma: no cover - exercised on machines without torch
        raise ImportError(f"LearnedKernelRegressor and LearnedKernelClassifier train with PyTorch, an optional "
                          f"extra: {install_extra('nn')}") from exc
    return tabular


class _LearnedKernelBase(KeptBindings, BaseEstimator):
    """What the regressor and the classifier share: the table's encoding, the training loop
    (in :mod:`localkit.nn.tabular`) and the engine passes over the bound embedded rows."""

    _parameter_constraints: dict = {
        "kernel": [StrOptions(set(PROFILES))],
        "embedding": [StrOptions(set(EMBEDDINGS))],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "bandwidth": [Interval(Real, 0, None, closed="neither")],
        "n_frequencies": [Interval(Integral, 1, None, closed="left")],
        "frequency_scale": [Interval(Real, 0, None, closed="neither")],
        "d_embedding": [Interval(Integral, 1, None, closed="left")],
        "n_blocks": [Interval(Integral, 0, None, closed="left")],
        "d_block": [Interval(Integral, 1, None, closed="left")],
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "candidate_ratio": [Interval(Real, 0, 1, closed="right")],
        "max_candidates": [Interval(Integral, 2, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "max_epochs": [Interval(Integral, 0, None, closed="left")],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "ema_epochs": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "refit_bandwidth": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "scaling": [StrOptions({"quantile", "standard"}), None],
        "categorical_features": ["array-like", None],
        "handle_unknown": [StrOptions({"ignore", "error"})],
        "categorical_factors": ["boolean"],
        "n_ensembles": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "device": [str, None],
        "n_jobs": N_JOBS_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose", None],
    }

    # -- the table -------------------------------------------------------------------------
    def _split_columns(self, X, reset):
        """``(numeric, categorical)`` of ``X``: a float64 array of the numeric columns and an
        object array of the categorical ones. At fit (``reset``) the categorical columns are
        found: a DataFrame's ``category``, ``object``, ``string`` and ``bool`` (``boolean``) columns, or
        ``categorical_features`` (indices, names or a boolean mask)."""
        is_frame = hasattr(X, "columns") and hasattr(X, "dtypes")
        if is_frame:
            validate_data(self, X, skip_check_array=True, reset=reset)  # names and count checked
            if reset:
                kinds = [str(dtype) for dtype in X.dtypes]
                found = [i for i, k in enumerate(kinds)
                         if k in ("category", "object", "bool", "boolean", "string", "str") or k.startswith("string")]
                self.categorical_columns_ = np.asarray(sorted(set(found) | set(self._given_categorical(X.shape[1]))),
                                                       dtype=int)
            if X.shape[1] != self.n_features_in_:  # validate_data names it; kept for clarity
                raise ValueError(f"X has {X.shape[1]} columns, but {type(self).__name__} was fitted with "
                                 f"n_features_in_={self.n_features_in_}")
            cat = self.categorical_columns_
            num = np.setdiff1d(np.arange(X.shape[1]), cat)
            numeric = X.iloc[:, num].to_numpy(dtype=np.float64, na_value=np.nan) if len(num) else \
                np.zeros((len(X), 0))
            categorical = X.iloc[:, cat].astype(object).to_numpy() if len(cat) else np.zeros((len(X), 0), object)
        else:
            if reset:
                A = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=True)
                self.categorical_columns_ = np.asarray(self._given_categorical(A.shape[1]), dtype=int)
            else:
                A = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False)
            cat = self.categorical_columns_
            num = np.setdiff1d(np.arange(A.shape[1]), cat)
            try:
                numeric = np.asarray(A[:, num], dtype=np.float64)
            except ValueError as exc:  # strings (a TypeError, for objects that are no number, passes)
                raise ValueError(f"X: the numeric columns {num.tolist()} must hold numbers; name the categorical "
                                 "columns with categorical_features (indices, names or a boolean mask) or pass a "
                                 "DataFrame with category/object columns") from exc
            categorical = np.asarray(A[:, cat], dtype=object)
        if len(X) == 0 if is_frame else numeric.shape[0] == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={numeric.shape}) while a minimum of 1 is required.")
        if not np.all(np.isfinite(numeric)):
            bad = np.flatnonzero(~np.all(np.isfinite(numeric), axis=0))
            raise ValueError(f"X: the numeric columns {num[bad].tolist()} hold NaN or inf; "
                             f"{type(self).__name__} does not impute: impute them (e.g. sklearn's SimpleImputer) "
                             "or mark the column categorical")
        return numeric, categorical

    def _given_categorical(self, n_features):
        """``categorical_features`` as column indices (names through ``feature_names_in_``)."""
        given = self.categorical_features
        if given is None:
            return []
        given = np.asarray(given)
        if given.dtype == bool:
            if given.shape != (n_features,):
                raise ValueError(f"categorical_features: a boolean mask needs one entry per column "
                                 f"(n_features={n_features}), got shape {given.shape}")
            return np.flatnonzero(given).tolist()
        names = getattr(self, "feature_names_in_", None)
        out = []
        for c in given.ravel().tolist():
            if isinstance(c, str):
                if names is None or c not in list(names):
                    raise ValueError(f"categorical_features: {c!r} is not a column name of X "
                                     f"(names: {None if names is None else list(names)})")
                out.append(list(names).index(c))
            elif isinstance(c, (int, np.integer)) and -n_features <= c < n_features:
                out.append(int(c) % n_features)
            else:
                raise ValueError(f"categorical_features must hold column indices in [0, {n_features}), names, or "
                                 f"be a boolean mask; got {c!r}")
        return out

    def _encode(self, X, reset=False):
        """``(numeric, codes)``: the numeric columns scaled (``scaling``) and each categorical column
        as level codes 1..L (0: a level not seen at fit, see ``handle_unknown``)."""
        numeric, categorical = self._split_columns(X, reset)
        if reset:
            self.categories_ = []
            for j in range(categorical.shape[1]):
                self.categories_.append(np.asarray(sorted({_level(v) for v in categorical[:, j]}), dtype=object))
            if self.scaling == "quantile" and numeric.shape[1]:
                self._scaler = QuantileTransformer(output_distribution="normal", n_quantiles=min(1000, len(numeric)),
                                                   subsample=10**9, random_state=0).set_output(transform="default").fit(numeric)
            elif self.scaling == "standard" and numeric.shape[1]:
                self._scaler = (numeric.mean(0), np.where(numeric.std(0) > 0, numeric.std(0), 1.0))
            else:
                self._scaler = None
        if self._scaler is not None:
            numeric = (self._scaler.transform(numeric) if hasattr(self._scaler, "transform")
                       else (numeric - self._scaler[0]) / self._scaler[1])
        codes = np.zeros(categorical.shape, dtype=np.int64)
        for j, levels in enumerate(self.categories_):
            keys = np.asarray([_level(v) for v in categorical[:, j]], dtype=object)
            pos = np.searchsorted(levels, keys) if len(keys) else np.zeros(0, int)
            pos = np.minimum(pos, len(levels) - 1)
            seen = levels[pos] == keys
            if not np.all(seen) and self.handle_unknown == "error":
                raise ValueError(f"X: column {self.categorical_columns_[j]} holds categories not seen at fit "
                                 f"({sorted(set(keys[~seen].tolist()))[:5]}); handle_unknown='ignore' embeds them as "
                                 "no level (the zero row)")
            codes[:, j] = np.where(seen, pos + 1, 0)
        return numeric, codes

    # -- fit -------------------------------------------------------------------------------
    def _fit_embedding(self, X, targets, values, kind, n_outputs, value_rows):
        """Train ``n_ensembles`` embeddings on the leave-one-out loss and bind each member's
        embedded training rows with ``value_rows(member)`` (the values its local mean averages)."""
        numeric, codes = self._encode(X, reset=True)
        n = len(numeric)
        if n < 3:
            raise ValueError(f"{type(self).__name__} needs at least 3 samples (leave-one-out against the others), "
                             f"got n_samples={n}")
        self._check_identity()
        rng = check_random_state(self.random_state)
        E = self.n_ensembles_ = ((AUTO_MEMBERS if n <= AUTO_MEMBERS_UP_TO else AUTO_MEMBERS_BEYOND)
                                 if self.n_ensembles == "auto" else int(self.n_ensembles))
        seeds = rng.randint(0, 2**31 - 1, size=E)
        self.members_ = []
        self.n_epochs_, self.best_epoch_, self.loss_curves_ = [], [], []
        if self.embedding == "identity":
            self.bandwidth_ = np.full(E, float(self.bandwidth))
            Z = self._identity_queries(numeric, codes)
            for e in range(E):
                self.members_.append(None)
                self._keep(f"member{e}", bind(Kernel(self.kernel, bandwidth=float(self.bandwidth)),
                                              self._to_device(Z)), self._to_device(value_rows(e, Z)))
            self.embedding_ = [Z for _ in range(E)]
            return self
        net = _torch_net()
        import torch

        device = torch.device(self.device or "cpu")
        n_val = int(round(self.validation_fraction * n)) if n >= 20 else 0
        table = net.Table(numeric, codes, targets, values)
        schedule = net.Schedule(kind=kind, kernel=self.kernel, candidate_ratio=self.candidate_ratio,
                                max_candidates=self.max_candidates, batch_size=self.batch_size, lr=self.lr,
                                weight_decay=self.weight_decay, max_epochs=self.max_epochs, patience=self.patience,
                                ema_epochs=self._ema_epochs(n),
                                refit_bandwidth=self.refit_bandwidth)
        threads = self._threads()
        # members are independent: on the host they train side by side, a process each, on the
        # threads shared out (torch's threads scale poorly on these batches: on a diamonds fold,
        # 2 cores, two members side by side took 1.25-1.5 times one member's time on two threads)
        workers = min(threads, E) if device.type == "cpu" else 1
        jobs = []
        with torch.random.fork_rng(devices=[]):
            for e in range(E):
                seed = int(seeds[e])
                torch.manual_seed(seed)
                order = np.random.RandomState(seed).permutation(n)
                model = net.LearnedKernel(
                    net.Embedding(numeric.shape[1], [len(c) for c in self.categories_], embedding=self.embedding,
                                  n_components=self.n_components, n_frequencies=self.n_frequencies,
                                  frequency_scale=self.frequency_scale, d_embedding=self.d_embedding,
                                  n_blocks=self.n_blocks, d_block=self.d_block, dropout=self.dropout),
                    self.bandwidth, n_outputs, self._local_linear(), self.n_components,
                    n_levels=self._factor_levels()).to(device)
                jobs.append(dict(model=model, rng_state=torch.get_rng_state(), seed=seed,
                                 val_rows=np.sort(order[:n_val]), train_rows=np.sort(order[n_val:]),
                                 desc=f"{type(self).__name__}" + (f" {e + 1}/{E}" if E > 1 else "")))
        fit_member = functools.partial(net.fit_member, table=table, schedule=schedule, device=device,
                                       threads=max(1, threads // workers), verbose=self.verbose)
        # max_nbytes=None: the table goes to the workers pickled (joblib's read-only memory maps
        # would be torch tensors over read-only memory)
        trained = (Parallel(n_jobs=workers, backend="loky", max_nbytes=None)(delayed(fit_member)(**job)
                                                                              for job in jobs)
                   if workers > 1 else [fit_member(**job) for job in jobs])
        bandwidths, embedded = [], []
        with net.torch_threads(threads):
            for e, (model, best_epoch, n_epochs, history) in enumerate(trained):
                self.best_epoch_.append(best_epoch)
                self.n_epochs_.append(n_epochs)
                self.loss_curves_.append(np.asarray(history))
                # trained in float32, embedded in float64: a row's f(x) does not depend on the rows
                # it is embedded with (float32 products differ by block size, scikit-learn's
                # subset invariance), and the engine's float64 pass binds the rows as they are
                model = model.double()
                Z = net.embed(model, numeric, codes, device)
                h = float(torch.exp(model.log_h.detach()))
                bandwidths.append(h)
                slope = None if model.slope is None else model.slope.detach().cpu().numpy()
                log_r = model.log_factors()
                member = _Member({k: v.cpu() for k, v in model.state_dict().items()}, slope,
                                 None if log_r is None else log_r.detach().cpu().numpy())
                kernel, member.columns = net.product_kernel(self.kernel, h, Z.shape[1], member.factors,
                                                            self._factor_levels())
                self.members_.append(member)
                # bound in float64: the engine keeps the values in the samples' dtype (targets near
                # 1e300 overflow float32)
                self._keep(f"member{e}", bind(kernel, self._to_device(member.rows(Z, codes))),
                           self._to_device(value_rows(e, Z, slope)))
                embedded.append(Z)
        self._net_shape = (numeric.shape[1], [len(c) for c in self.categories_], n_outputs)
        self.bandwidth_ = np.asarray(bandwidths)
        self.embedding_ = embedded
        return self

    def _ema_epochs(self, n):
        """``ema_epochs`` resolved for ``n`` training rows ("auto": AUTO_EMA_EPOCHS beyond
        AUTO_MEMBERS_UP_TO rows, where an epoch holds many steps; none up to it)."""
        if self.ema_epochs == "auto":
            return AUTO_EMA_EPOCHS if n > AUTO_MEMBERS_UP_TO else 0.0
        return float(self.ema_epochs)

    def _local_linear(self):
        """Whether the model learns a local-linear slope: ``local_linear`` resolved ("auto": with a
        learned embedding; the classifier has none)."""
        given = getattr(self, "local_linear", False)
        return self.embedding != "identity" if isinstance(given, str) else bool(given)

    def _check_identity(self):
        asked = {"local_linear": self._local_linear(), "categorical_factors": bool(self.categorical_factors)}
        for name in ("local_linear", "categorical_factors"):
            if self.embedding == "identity" and asked[name]:
                raise ValueError(f"{name}=True learns a part of the kernel; embedding='identity' learns nothing: "
                                 f"use embedding='plr' or 'linear', or {name}=False")

    def _to_device(self, array):
        """``array`` where the passes run: on the host (NumPy) for ``device=None``, else a float64
        tensor on ``device``, which the engine binds and passes over there."""
        if self.device is None:
            return array
        import torch

        return torch.as_tensor(array, dtype=torch.float64, device=self.device)

    def _factor_levels(self):
        """The number of levels of each categorical column with ``categorical_factors`` (else None)."""
        return [len(c) for c in self.categories_] if self.categorical_factors else None

    def _threads(self):
        """The cores ``n_jobs`` gives (None: 1, the project's convention; -1: every core)."""
        if self.n_jobs is None:
            return 1
        import os

        return os.cpu_count() if self.n_jobs < 0 else self.n_jobs

    def _engine_options(self):
        """The engine's threads for the passes over the bound rows: ``n_jobs``, read at each pass."""
        return EngineOptions(n_jobs=self.n_jobs)

    # -- predict ---------------------------------------------------------------------------
    def _embed_queries(self, X):
        """``[(f_e(X), queries_e)]`` for each member, ``X`` checked and encoded as at fit: the
        embedding and the rows the member's bound kernel takes (with Li-Racine factors, the
        embedding followed by the categorical codes)."""
        check_is_fitted(self, "members_")
        numeric, codes = self._encode(X)
        if self.embedding == "identity":
            Z = self._identity_queries(numeric, codes)
            return [(Z, self._to_device(Z)) for _ in self.members_]
        net = _torch_net()
        out = []
        with net.torch_threads(self._threads()):
            for member in self.members_:
                Z = net.embed(self._model(member), numeric, codes, self.device or "cpu")
                out.append((Z, self._to_device(member.rows(Z, codes))))
        return out

    def _identity_queries(self, numeric, codes):
        """``f(x)`` of ``embedding="identity"``: the numeric columns as given (after ``scaling``) and
        the categorical ones one-hot (an unseen level: all zeros)."""
        parts = [numeric]
        for j, levels in enumerate(self.categories_):
            parts.append((codes[:, j, None] == np.arange(1, len(levels) + 1)[None]).astype(np.float64))
        return np.concatenate(parts, axis=1)

    def _model(self, member):
        """The trained module of ``member`` (rebuilt once from its state, then cached)."""
        if member.module is None:
            net = _torch_net()
            n_numeric, n_levels, n_outputs = self._net_shape
            model = net.LearnedKernel(
                net.Embedding(n_numeric, n_levels, embedding=self.embedding, n_components=self.n_components,
                              n_frequencies=self.n_frequencies, frequency_scale=self.frequency_scale,
                              d_embedding=self.d_embedding, n_blocks=self.n_blocks, d_block=self.d_block,
                              dropout=self.dropout),
                1.0, n_outputs, member.slope is not None, self.n_components,
                n_levels=None if member.factors is None else n_levels).double()
            model.load_state_dict(member.state)
            model.eval()
            member.module = model.to(self.device or "cpu")
        return member.module

    def _member_means(self, X, *, loo=False):
        """Each member's local mean (one engine pass over its bound embedded rows) at ``X``
        (at the training rows, each left out of its own mean, with ``loo``)."""
        if loo:
            check_is_fitted(self, "members_")
            return [_to_host(self._kept_sums(f"member{e}", None, options=self._engine_options(),
                                             exclude_self=True).mean)
                    for e in range(len(self.members_))]
        means = []
        for e, (Z, Q) in enumerate(self._embed_queries(X)):
            mean = _to_host(self._kept_sums(f"member{e}", Q, options=self._engine_options()).mean)
            slope = self.members_[e].slope if self.members_[e] is not None else None
            if slope is not None:
                mean = mean + (Z @ slope).reshape(mean.shape)
            means.append(mean)
        return means

    def explain(self, X: ArrayLike, n_rows: int = 10):
        """The training rows that carry each prediction: ``(weights, indices)``, each of shape
        ``(n_queries, n_rows)``, the largest normalised weights ``w_i(x*) = K(x*, x_i) / sum_j
        K(x*, x_j)`` first (averaged over the ensemble's members), and the rows' positions in the
        training data. The prediction is ``sum_i w_i(x*) v_i`` over all training rows (plus the
        local-linear term with ``local_linear``); these are its largest terms.

        Weights are read from the bound kernel in blocks of queries (memory ``256 x n_samples``)."""
        if not (isinstance(n_rows, Integral) and n_rows >= 1):
            raise ValueError(f"n_rows must be an integer >= 1, got {n_rows!r}")
        Qs = [Q for _, Q in self._embed_queries(X)]
        n_samples = self._kept["member0"][0].bound.n_samples
        k = min(int(n_rows), n_samples)
        n_q = len(Qs[0])
        weights, indices = np.empty((n_q, k)), np.empty((n_q, k), dtype=np.intp)
        for s in range(0, n_q, EXPLAIN_BLOCK):
            W = sum(_to_host(self._kept[f"member{e}"][0].bound.weights(Q[s:s + EXPLAIN_BLOCK]))
                    for e, Q in enumerate(Qs))
            W = W / len(Qs)
            top = np.argpartition(-W, k - 1, axis=1)[:, :k] if k < n_samples else np.tile(np.arange(n_samples),
                                                                                          (len(W), 1))
            order = np.argsort(-np.take_along_axis(W, top, axis=1), axis=1, kind="stable")
            top = np.take_along_axis(top, order, axis=1)
            indices[s:s + len(W)] = top
            weights[s:s + len(W)] = np.take_along_axis(W, top, axis=1)
        return weights, indices

    def embed(self, X: ArrayLike) -> np.ndarray:
        """The learned embedding ``f(X)`` of the first member, shape ``(n_queries, n_components)``
        (the coordinates in which the kernel measures distances)."""
        return self._embed_queries(X)[0][0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.non_deterministic = False
        return tags


class _Member:
    """One trained member: the module's state (what a pickle holds), the local-linear slope, the
    log Li-Racine factors and the categorical columns its bound kernel compares."""

    def __init__(self, state, slope, factors):
        self.state, self.slope, self.factors, self.columns, self.module = state, slope, factors, [], None

    def rows(self, Z, codes):
        """The rows the member's bound kernel takes: ``[f(x), codes[:, columns]]``."""
        return _torch_net().kernel_rows(Z, codes, self.columns)

    def __getstate__(self):
        return {"state": self.state, "slope": self.slope, "factors": self.factors, "columns": self.columns}

    def __setstate__(self, state):
        self.__init__(state["state"], state["slope"], state["factors"])
        self.columns = state["columns"]


def _to_host(array):
    """An engine result as a float64 NumPy array (tensors on a device copied back)."""
    return np.asarray(array.cpu() if hasattr(array, "cpu") else array, dtype=np.float64)


def _require_y(estimator, y):
    if y is None:
        raise ValueError(f"{type(estimator).__name__} requires y to be passed, but the target y is None")


def _level(v):
    """A categorical value as a sortable key (missing values are one level, ``"nan"``)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "nan"
    try:
        import pandas as pd  # pd.NA

        if v is pd.NA or v is pd.NaT:
            return "nan"
    except ImportError:  # pragma: no cover
        pass
    return str(v)


_DOC_PARAMS = """
    kernel : {"laplacian", "gaussian", "cauchy"}, default="laplacian"
        The profile ``k`` of ``u = |f(x*) - f(x)| / h`` (:class:`localkit.Kernel`'s):
        "laplacian" ``exp(-u)`` (ModernNCA's ``softmax(-d)``), "gaussian" ``exp(-u^2 / 2)``,
        "cauchy" ``1 / (1 + u^2)``.
    embedding : {"plr", "linear", "identity"}, default="plr"
        ``f``: "plr": each numeric column through periodic features ``cos, sin(2 pi c_j x_j)`` with
        learned frequencies, a linear map and a ReLU (PLR, "lite": the map shared by the columns),
        categorical columns one-hot (one learned vector per level), a linear map to
        ``n_components`` and ``n_blocks`` residual ReLU blocks; "linear": the same without the
        periodic features; "identity": no learning, ``f(x) = [numeric columns after scaling,
        one-hot categorical columns]`` with ``h = bandwidth`` (then the model is
        :class:`~localkit.LocalMeanRegressor`'s local mean with that kernel and bandwidth).
    n_components : int, default=128
        The dimension of ``f``.
    bandwidth : float, default=1.0
        The initial ``h`` (learned with ``f``, as ``h = exp(log h)``: positive by construction).
    n_frequencies : int, default=48
        Periodic features per numeric column.
    frequency_scale : float, default=FREQUENCY_SCALE
        Standard deviation of the frequencies' initialisation (on columns scaled to unit spread):
        the scale of the detail ``f`` resolves along a column at the start (``2 pi c_j`` radians
        per unit of ``x_j``); training moves the frequencies little from there. The regressor's
        default is 0.2, the classifier's ModernNCA's 0.05. One regressor member on the benchmark's
        diamonds folds (seed 0, one thread): test RMSE 538.1 at 0.05 (mean of 3 folds), 525.5 at
        0.2 and 523.0 at 0.5; at 0.2 the RMSEs of ``AER::CPS1988`` (0.5180, 0.5181),
        ``Ecdat::Wages`` (0.2789, 0.2793) and ``Ecdat::Computers`` (147.1, 146.5) held. The
        classifier's ROC-AUC on ``mlc_churn`` fell at 0.2 (3 folds, seeds 0-3: mean 0.9261 ->
        0.9222; each seed's fold 0 by 0.004-0.010), and on ``Ecdat::HI`` held (0.8823, 0.8824).
    d_embedding : int, default=32
        The dimension of each numeric column's embedding.
    n_blocks : int, default=1
        Residual blocks ``z + W_2 dropout(ReLU(W_1 z))`` after the linear map.
    d_block : int, default=256
        The blocks' hidden width.
    dropout : float in [0, 1), default=0.1
        Dropout inside the residual blocks (none with ``n_blocks=0``).
    candidate_ratio : float in (0, 1], default=0.3
        The fraction of the training rows drawn anew for each batch as the candidates of its
        local means (ModernNCA's sample rate; at least 64 rows).
    max_candidates : int or None, default=2048
        At most this many candidates per batch (None: no limit). The cost of a batch grows as
        ``batch_size x candidates``; the cap keeps an epoch linear in ``n_samples``.
    batch_size : int, default=1024
    lr : float, default=2e-3
        AdamW's learning rate.
    weight_decay : float, default=1e-5
        AdamW's decoupled weight decay.
    max_epochs : int, default=100
        The most passes over the training rows (0: no training, the initial embedding).
    patience : int, default=32
        Early stopping: training stops after this many epochs without a lower held-out loss, and
        the best epoch's model is kept. The held-out loss can rest on a plateau for 20 epochs and
        more before falling again (with the local-linear head on diamonds: 21 epochs).
    ema_epochs : float or "auto", default="auto"
        Keep an exponential moving average of the weights instead of the weights as trained,
        with a time constant of ``ema_epochs`` epochs: after each step ``a = d a + (1 - d) w``,
        ``d = max(0, 1 - 1 / (ema_epochs x steps per epoch))``; the held-out loss that early
        stopping reads is then the average's. The stochastic steps (batches against sampled
        candidates) scatter the weights around the path the loss falls along, and where an epoch
        holds many steps their average lies nearer it. "auto": 3 epochs beyond 10,000 training
        rows, none up to it (where ``n_ensembles="auto"`` averages three members). On diamonds
        (30 steps per epoch, the benchmark's 3 folds x 2 seeds) about 3.3 epochs lowered the mean
        test RMSE from 535.5 to 532.9, and on ``AER::CPS1988`` (16 steps per epoch) 3 epochs
        lowered it on each fold by 0.16-0.29%, and the classifier's ROC-AUC on ``Ecdat::HI``
        (13 steps per epoch) rose on each fold (mean 0.8818 -> 0.8824); on tables of 3 steps per
        epoch it gained little or lost (``Ecdat::Computers`` RMSE 147.5 -> 146.7, ``Ecdat::Wages``
        0.2792 -> 0.2800, ``mlc_churn`` ROC-AUC 0.9290 -> 0.9271). 0: the weights as trained.
    refit_bandwidth : bool, default=True
        After training, choose ``h`` again at the kept embedding: the minimiser of the held-out
        loss of the local mean over all training rows (a bounded search in ``log h`` over
        ``[h / 4, 4 h]``, moved on while the minimiser lies at an end; kept only where it lowers
        that loss). Training averages over a random fraction of the rows; ``predict`` averages
        over all of them, where a smaller ``h`` does better (on diamonds, one member trained with
        a residual block: test RMSE 549.8 at the trained ``h``, 545.6 at ``0.8 h``).
    validation_fraction : float in [0, 1), default=0.15
        The part of the training data held out for early stopping (not below 20 rows: none; 0:
        the leave-one-out loss of the training rows against all training rows decides). Held-out
        rows are embedded and bound with the others once training ends.
    scaling : {"quantile", "standard"} or None, default="quantile"
        How numeric columns are scaled before ``f``: "quantile" maps each to a normal
        distribution by its empirical quantiles (scikit-learn's ``QuantileTransformer``, robust
        to skew and outliers), "standard" to zero mean and unit variance, None leaves them.
    categorical_features : array-like of int, str or bool, or None, default=None
        Columns of a NumPy ``X`` (or, besides those found, of a DataFrame) taken as categorical:
        indices, names (for a DataFrame) or a boolean mask. A DataFrame's ``category``,
        ``object``, ``string`` and ``bool`` columns (pandas' nullable ``boolean`` too) are
        categorical. A missing categorical value (None, NaN, ``pd.NA``) is a level of its own.
    handle_unknown : {"ignore", "error"}, default="ignore"
        A category not seen at fit: "ignore" embeds it as no level (the zero one-hot row, the
        column then adds nothing to ``f``, as scikit-learn's ``OneHotEncoder(handle_unknown=
        "ignore")``); "error" raises a ``ValueError``.
    categorical_factors : bool, default=False
        Multiply the kernel by a learned Li-Racine factor per categorical column: a row whose
        level differs from the query's weighs ``r_l`` times one that agrees, ``0 < r_l < 1``
        learned with ``f`` (``r_l = exp(-softplus(a_l))``, from ``1/2``),

        .. math::

            K(x^*, x) = k\\big(|f(x^*) - f(x)| / h\\big) \\prod_l r_l^{[x^*_l \\ne x_l]},

        bound to the engine as the product with an Aitchison-Aitken kernel per column of two
        levels or more (``lam_l = r_l (c_l - 1) / (1 + r_l (c_l - 1))``, ``c_l`` levels). A level
        unseen at fit differs from every row alike, so that column then leaves the weights as
        they are. Training takes the factors as a pair bias of
        :func:`localkit.nn.kernel_attention` (``r^[mismatch]`` from one-hot codes), so on the CPU
        the profiles of its compiled pass (all but the Gaussian) train without forming a
        batch's ``(L, S)`` weights.
    n_ensembles : int or "auto", default="auto"
        Members trained from different seeds; the prediction is the mean of their local means.
        "auto": 3 members up to 10,000 training rows, 2 beyond (an epoch costs about
        ``n_samples x min(candidate_ratio n_samples, max_candidates)``: three members on 10,000
        rows cost less than one on 30,000). A member's result moves with its seed and with
        round-off; the mean of two moves less. On the benchmark's diamonds folds (36,000 training
        rows) two members lowered the mean test RMSE from 525.5 to 521.4, better on every fold
        (with ``frequency_scale=0.05``: from 538.5 to 533.2 on one machine and from 535.8 to 532.9
        on another), in 1.25-1.5 times one member's wall time with ``n_jobs=-1`` on 2 cores (twice
        on one core); on ``AER::CPS1988``'s log wage from 0.5184 to 0.5180.
    device : str or None, default=None
        Where the embedding trains and predicts (a torch device: "cpu", "cuda", "cuda:1"). With a
        device, the embedded training rows are bound there as float64 tensors and every
        prediction embeds its queries and runs the engine's pass on that device (a pickle holds
        them there: unpickle where that device exists). None: training on the CPU, the rows
        bound on the host as NumPy arrays.
    n_jobs : int or None, default=None
        The cores a fit and its predictions take (None: 1, the project's convention for
        ``n_jobs``; -1: every core). With several members on the CPU, ``w = min(n_jobs,
        n_ensembles_)`` of them train side by side, a worker process each (joblib's loky), on
        ``n_jobs // w`` torch threads each; a single member trains on ``n_jobs`` torch threads.
        Torch's thread count is restored after. A ``random_state`` gives the same model again at
        the same ``n_jobs``, and members trained side by side on one thread each are those that
        ``n_jobs=1`` trains in turn; other thread counts sum in other orders, and the rounding
        leads training elsewhere, as another seed would (on diamonds, one member of ModernNCA's
        published settings: test RMSE 527.5 with one thread, 539.2 with two).
    random_state : int, RandomState or None, default=None
        Seeds the members' initialisation, held-out split, batches and candidates.
    verbose : None, bool or int, default=None
        A progress bar of the epochs with the held-out loss: True shows it, False never, None on
        a terminal for fits longer than 2 s."""

_DOC_ATTRS = """
    n_ensembles_ : int
        The members trained (``n_ensembles`` resolved).
    bandwidth_ : ndarray of shape ``(n_ensembles_,)``
        The learned ``h`` of each member.
    embedding_ : list of ndarray of shape (n_samples, n_components)
        Each member's embedded training rows, bound to the engine in ``fit``.
    best_epoch_, n_epochs_ : list of int
        Per member: the epoch kept and the epochs run.
    loss_curves_ : list of ndarray
        Per member: the held-out loss after each epoch.
    categorical_columns_ : ndarray of int
        The columns taken as categorical; ``categories_`` their levels (as strings).
    n_features_in_, feature_names_in_ : as scikit-learn's."""

_DOC_MATH = """
    .. math::

        \\hat m(x^*) = \\frac{\\sum_i K(x^*, x_i)\\, v_i}{\\sum_j K(x^*, x_j)}, \\qquad
        K(x^*, x) = k\\big(|f(x^*) - f(x)|_2 / h\\big)

    with ``f`` a learned embedding of the table's rows (numeric and categorical columns) and
    ``h`` a learned bandwidth. ``f`` and ``h`` minimise the exact leave-one-out loss of this local
    mean, each row's own weight dropped from its mean:

    .. math::

        L = \\frac{1}{|B|} \\sum_{i \\in B} \\ell\\Big(y_i, \\frac{\\sum_{j \\in C, j \\ne i}
        K(x_i, x_j)\\, v_j}{\\sum_{j \\in C, j \\ne i} K(x_i, x_j)}\\Big)

    over batches ``B`` of training rows against a random fraction ``C`` of the training rows as
    candidates (drawn anew per batch, outside the batch where enough rows remain; the local means
    are :func:`localkit.nn.kernel_attention`'s fused pass), with AdamW and early stopping on held-out rows
    (ModernNCA, Ye et al., 2025). After training, the embedded training rows are bound to the
    engine once; ``predict`` embeds its queries and runs one engine pass over them."""


class LearnedKernelRegressor(RegressorMixin, _LearnedKernelBase):
    __doc__ = """Local mean of the targets under a kernel learned end to end (ModernNCA, TabR).
""" + _DOC_MATH + """ Here ``v_i = y_i`` and ``l`` the squared error on
    the standardised targets. With ``local_linear`` (the default) a learned slope ``t`` corrects each
    neighbour's value along the embedding (TabR's correction, a local linear model in the
    learned space with one global slope):

    .. math::

        \\hat m(x^*) = \\sum_i w_i(x^*) \\big(y_i + (f(x^*) - f(x_i))\\, t\\big)
                    = f(x^*)\\, t + \\sum_i w_i(x^*) \\big(y_i - f(x_i)\\, t\\big),

    still one engine pass (the values ``y_i - f(x_i) t`` bound in ``fit``).

    Parameters
    ----------""" + _DOC_PARAMS.replace("FREQUENCY_SCALE", "0.2") + """
    local_linear : bool or "auto", default="auto"
        Learn the slope ``t`` of the local-linear head above. "auto": with a learned embedding
        ("plr", "linear"); not with "identity", which learns nothing. On diamonds (the benchmark's
        3 folds, 2 seeds) the head lowered the mean test RMSE from 541.0 to 535.5.

    Attributes
    ----------""" + _DOC_ATTRS + """

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from localkit import LearnedKernelRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = LearnedKernelRegressor(max_epochs=3, n_ensembles=1, random_state=0).fit(X[:300], y[:300])
    >>> reg.predict(X[300:305]).shape
    (5,)
    >>> weights, rows = reg.explain(X[300:301], n_rows=3)
    >>> weights.shape, rows.shape
    ((1, 3), (1, 3))
    """

    _parameter_constraints: dict = {**_LearnedKernelBase._parameter_constraints,
                                    "local_linear": ["boolean", StrOptions({"auto"})]}

    def __init__(self, kernel="laplacian", embedding="plr", n_components=128, bandwidth=1.0, n_frequencies=48,
                 frequency_scale=0.2, d_embedding=32, n_blocks=1, d_block=256, dropout=0.1, candidate_ratio=0.3,
                 max_candidates=2048, batch_size=1024, lr=2e-3, weight_decay=1e-5, max_epochs=100, patience=32,
                 ema_epochs="auto", refit_bandwidth=True, validation_fraction=0.15,
                 scaling="quantile", categorical_features=None, handle_unknown="ignore", categorical_factors=False,
                 n_ensembles="auto",
                 local_linear="auto", device=None, n_jobs=None, random_state=None, verbose=None):
        self.kernel = kernel
        self.embedding = embedding
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.n_frequencies = n_frequencies
        self.frequency_scale = frequency_scale
        self.d_embedding = d_embedding
        self.n_blocks = n_blocks
        self.d_block = d_block
        self.dropout = dropout
        self.candidate_ratio = candidate_ratio
        self.max_candidates = max_candidates
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_epochs = max_epochs
        self.patience = patience
        self.ema_epochs = ema_epochs
        self.refit_bandwidth = refit_bandwidth
        self.validation_fraction = validation_fraction
        self.scaling = scaling
        self.categorical_features = categorical_features
        self.handle_unknown = handle_unknown
        self.categorical_factors = categorical_factors
        self.n_ensembles = n_ensembles
        self.local_linear = local_linear
        self.device = device
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Learn ``f`` and ``h`` on the leave-one-out loss, embed the training rows and bind them
        to the engine. Returns ``self``."""
        _require_y(self, y)
        y = check_array(y, ensure_2d=False, dtype=None, input_name="y", ensure_all_finite=False)
        if y.dtype == object:  # numbers held as objects (strings are refused below, by name)
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                pass
        y = check_regression_target(y, np.float64)
        if y.ndim > 2 or (y.ndim == 2 and y.shape[1] == 0):
            raise ValueError(f"y must have shape (n_samples,) or (n_samples, n_outputs), got {y.shape}")
        if hasattr(X, "shape") and len(y) != X.shape[0]:
            raise ValueError(f"X and y have inconsistent numbers of samples: {X.shape[0]} and {len(y)}")
        Y = y.reshape(len(y), -1)
        # standardised through max |y| first: the mean and spread of targets near 1e300 do not overflow
        top = np.max(np.abs(Y), axis=0)
        top = np.where(top > 0, top, 1.0)
        mean, scale = (Y / top).mean(0), (Y / top).std(0)
        scale = np.where(scale > 0, scale, 1.0)
        self._y_mean, self._y_scale = mean * top, scale * top
        T = ((Y / top - mean) / scale).astype(np.float32)
        self._y_shape = y.shape[1:]

        def value_rows(e, Z, slope=None):  # y_i - f(x_i) t (t in the targets' units)
            return Y if slope is None else Y - (Z @ slope) * self._y_scale

        self._fit_embedding(X, T, T, "squared", Y.shape[1], value_rows)
        for m in self.members_:
            if m is not None and m.slope is not None:
                m.slope = m.slope * self._y_scale  # the slope in the targets' units
        self.y_fit_ = y
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """``sum_i w_i(x*) y_i`` (plus the local-linear term), averaged over the members."""
        mean = np.mean(self._member_means(X), axis=0)
        return mean.reshape(len(mean), *self._y_shape)

    def loo_predict(self) -> np.ndarray:
        """Leave-one-out predictions at the training rows in the learned embedding: each row's own
        weight dropped from its local mean (one engine pass; the embedding is the one trained on
        all rows, so this is the error of the local mean at a fixed ``f``, not a refit of ``f``)."""
        mean = np.mean(self._member_means(None, loo=True), axis=0)
        if any(m is not None and m.slope is not None for m in self.members_):
            mean = mean + np.mean([Z @ m.slope for Z, m in zip(self.embedding_, self.members_)], axis=0)
        return mean.reshape(len(mean), *self._y_shape)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        return tags


class LearnedKernelClassifier(ClassifierMixin, _LearnedKernelBase):
    __doc__ = """Local class probabilities under a kernel learned end to end (ModernNCA).
""" + _DOC_MATH + """ Here ``v_i`` is the one-hot label of row ``i`` (the local mean is the
    vector of class probabilities) and ``l`` the log-loss of the true class.

    Parameters
    ----------""" + _DOC_PARAMS.replace("FREQUENCY_SCALE", "0.05") + """

    Attributes
    ----------""" + _DOC_ATTRS + """
    classes_ : ndarray of shape (n_classes,)

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from localkit import LearnedKernelClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = LearnedKernelClassifier(max_epochs=5, n_ensembles=1, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """

    def __init__(self, kernel="laplacian", embedding="plr", n_components=128, bandwidth=1.0, n_frequencies=48,
                 frequency_scale=0.05, d_embedding=32, n_blocks=1, d_block=256, dropout=0.1, candidate_ratio=0.3,
                 max_candidates=2048, batch_size=1024, lr=2e-3, weight_decay=1e-5, max_epochs=100, patience=32,
                 ema_epochs="auto", refit_bandwidth=True, validation_fraction=0.15,
                 scaling="quantile", categorical_features=None, handle_unknown="ignore", categorical_factors=False,
                 n_ensembles="auto",
                 device=None, n_jobs=None, random_state=None, verbose=None):
        self.kernel = kernel
        self.embedding = embedding
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.n_frequencies = n_frequencies
        self.frequency_scale = frequency_scale
        self.d_embedding = d_embedding
        self.n_blocks = n_blocks
        self.d_block = d_block
        self.dropout = dropout
        self.candidate_ratio = candidate_ratio
        self.max_candidates = max_candidates
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_epochs = max_epochs
        self.patience = patience
        self.ema_epochs = ema_epochs
        self.refit_bandwidth = refit_bandwidth
        self.validation_fraction = validation_fraction
        self.scaling = scaling
        self.categorical_features = categorical_features
        self.handle_unknown = handle_unknown
        self.categorical_factors = categorical_factors
        self.n_ensembles = n_ensembles
        self.device = device
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Learn ``f`` and ``h`` on the leave-one-out log-loss, embed the training rows and bind
        them (with their one-hot labels) to the engine. Returns ``self``."""
        _require_y(self, y)
        y = column_or_1d(check_array(y, ensure_2d=False, dtype=None, input_name="y"), warn=True)
        check_class_labels(y)
        if hasattr(X, "shape") and len(y) != X.shape[0]:
            raise ValueError(f"X and y have inconsistent numbers of samples: {X.shape[0]} and {len(y)}")
        enc = LabelEncoder().fit(y)
        self.classes_ = enc.classes_
        codes = enc.transform(y)
        onehot = np.eye(len(self.classes_))[codes]
        self._fit_embedding(X, codes.astype(np.int64), onehot.astype(np.float32), "log", len(self.classes_),
                            lambda e, Z, slope=None: onehot)
        self.y_fit_ = y
        return self

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """``sum_i w_i(x*) onehot(y_i)``, averaged over the members: shape ``(n_queries, n_classes)``."""
        return np.mean(self._member_means(X), axis=0)

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The most probable class."""
        check_is_fitted(self, "members_")
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def loo_predict_proba(self) -> np.ndarray:
        """Leave-one-out class probabilities at the training rows in the learned embedding."""
        return np.mean(self._member_means(None, loo=True), axis=0)
