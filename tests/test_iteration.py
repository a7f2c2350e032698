"""The fixed-point driver (localkit.engine.iteration) and the compiled compact-kernel pass."""
import importlib
import warnings

import numpy as np
import pytest

from localkit.engine import local_sums
from localkit.engine.passes.compiled import COMPACT
from localkit.engine.iteration import (ConvergenceWarning, iterate, row_norm_change, sum_abs_change)
from localkit.kernels import PROFILES


def test_global_converges_to_the_fixed_point_and_counts_updates():
    # Heron's iteration for sqrt(2): quadratic convergence, so a handful of updates
    out = iterate(lambda x: 0.5 * (x + 2 / x), np.array([1.0]), tol=1e-14, max_iter=50)
    assert out.converged
    assert abs(out.state[0] - np.sqrt(2)) < 1e-15
    assert 4 <= out.n_iter <= 7


def test_start_state_is_not_modified_and_history_holds_every_state():
    x0 = np.array([1.0, 4.0])
    out = iterate(lambda x: x / 2, x0, tol=0.1, max_iter=100, history=True)
    assert np.array_equal(x0, [1.0, 4.0])
    assert len(out.history) == out.n_iter + 1
    assert np.array_equal(out.history[0], x0)
    np.testing.assert_array_equal(out.history[-1], out.state)
    # stops at the first update whose max change is below 0.1: 4 / 2^k - 4 / 2^(k+1) = 2^(1-k)
    assert out.n_iter == 6


def test_max_iter_reached_warns_and_reports_not_converged():
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        out = iterate(lambda x: x + 1.0, np.zeros(2), tol=1e-3, max_iter=3)
    assert out.n_iter == 3 and not out.converged
    np.testing.assert_array_equal(out.state, [3.0, 3.0])


def test_inclusive_and_strict_tolerance():
    step = lambda x: x + 0.5  # the change is exactly 0.5
    assert iterate(step, np.zeros(1), tol=0.5, max_iter=5, inclusive=True).n_iter == 1
    with pytest.warns(ConvergenceWarning):
        assert iterate(step, np.zeros(1), tol=0.5, max_iter=5).n_iter == 5


def test_per_row_freezes_converged_rows_and_calls_step_only_on_moving_rows():
    seen = []

    def step(rows_state, rows):
        seen.append(rows.copy())
        return rows_state / 2

    x0 = np.array([[1.0], [1024.0]])
    out = iterate(step, x0, tol=1.0, max_iter=100, per_row=True, change=row_norm_change)
    assert out.converged.all()
    # row 0 stops at once (change 0.5 < 1), row 1 halves until its step is below 1
    assert out.row_iter.tolist() == [1, 11]
    assert out.n_iter == 11
    assert seen[0].tolist() == [0, 1] and all(s.tolist() == [1] for s in seen[1:])
    np.testing.assert_array_equal(out.state, [[0.5], [0.5]])


def test_per_row_warning_counts_rows_still_moving():
    with pytest.warns(ConvergenceWarning, match="some rows still moving") as rec:
        out = iterate(lambda s, r: s * np.where(r == 0, 0.0, 2.0)[:, None] + (r == 1)[:, None],
                      np.ones((2, 1)), tol=1e-3, max_iter=4, per_row=True)
    assert out.converged.tolist() == [True, False]
    assert (rec[0].message.n_unconverged, rec[0].message.n_rows) == (1, 2)


def test_progress_bar_writes_to_stderr(capsys):
    iterate(lambda x: x / 2, np.ones(1), tol=1e-3, max_iter=50, progress=True, name="halving")
    err = capsys.readouterr().err
    assert "halving" in err and "/50" in err and err.endswith("\n")
    iterate(lambda x: x / 2, np.ones(1), tol=1e-3, max_iter=50, progress=False)
    assert capsys.readouterr().err == ""


def test_sum_abs_change():
    assert sum_abs_change(np.array([1.0, -1.0]), np.zeros(2)) == 2.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(tol=-1.0, max_iter=5), "tol"),
    (dict(tol=np.nan, max_iter=5), "tol"),
    (dict(tol=1e-3, max_iter=0), "max_iter"),
    (dict(tol=1e-3, max_iter=2.5), "max_iter"),
    (dict(tol=1e-3, max_iter=5, progress="yes"), "progress"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        iterate(lambda x: x, np.zeros(1), **kwargs)


# -- the compiled compact pass agrees with the engine's dense path ---------------------------
@pytest.mark.parametrize("bandwidth", [0.9, [0.9, 1.3, 0.7]])
@pytest.mark.parametrize("name", sorted(COMPACT))
def test_compact_pass_equals_dense_engine(name, bandwidth, rng):
    assert PROFILES[name].compact
    X = rng.normal(size=(400, 3))
    V = rng.normal(size=(400, 2))
    Q = rng.normal(size=(50, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # empty="nan" warns about empty rows
        ref = local_sums(Q, X, V, name, bandwidth, algorithm="dense", empty="nan")
        out = local_sums(Q, X, V, name, bandwidth, algorithm="compiled", empty="nan")
    filled = ~ref.empty
    assert np.array_equal(out.empty, ref.empty)
    np.testing.assert_allclose(out.mean[filled], ref.mean[filled], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.log_weight_sum[filled], ref.log_weight_sum[filled], rtol=0, atol=1e-12)


def test_compact_pass_boundary_is_inclusive_and_empty_policy():
    x = np.array([[0.0], [1.0], [2.5]])
    out = local_sums([[0.0], [10.0]], x, x[:, 0], "uniform", 1.0, algorithm="compiled")
    assert out.mean[0] == 0.5  # the sample at distance exactly h counts
    assert out.empty.tolist() == [False, True] and out.mean[1] == 2.5  # nearest sample
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums([[10.0]], x, x, "uniform", 1.0, algorithm="compiled", empty="raise")


def test_compact_pass_rejects_what_it_cannot_do():
    x = np.zeros((3, 1))
    for kwargs in [dict(kernel="gaussian"), dict(kernel="uniform", n_neighbors=2),
                   dict(kernel="uniform", exclude_self=True), dict(kernel="uniform", metric="manhattan")]:
        with pytest.raises(ValueError, match="algorithm='compiled' cannot compute this pass: "):
            local_sums(x, x, x, algorithm="compiled", **kwargs)


def test_auto_takes_the_compiled_pass_in_few_dimensions(rng, monkeypatch):
    paths = importlib.import_module("localkit.engine.passes")

    calls = []  # the planner dispatches through the PATHS table
    monkeypatch.setitem(paths.PATHS, "compiled", lambda *a, f=paths.PATHS["compiled"]: calls.append(1) or f(*a))
    X = rng.normal(size=(300, 3))
    auto = local_sums(X, X, X[:, 0], "epanechnikov", 0.8)
    assert calls
    np.testing.assert_allclose(auto.mean, local_sums(X, X, X[:, 0], "epanechnikov", 0.8, algorithm="dense").mean,
                               rtol=0, atol=1e-12)
