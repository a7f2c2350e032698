"""Ctrl-C during a long engine pass (issue 26): it arrives as KeyboardInterrupt, not as numba's
SystemError, and soon, between two bounded compiled calls, not after the whole pass.

Each test interrupts the main thread (``_thread.interrupt_main``, what Ctrl-C does) from a timer
thread once the pass is under way, and counts the queries whose compiled call started: fewer than
all of them means the pass stopped early. No timing is asserted."""
from __future__ import annotations

import _thread
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import localkit.engine.passes.compiled as compact
import localkit.engine.local_models.loess_grid as loess_grid
from localkit import LocalPolynomialRegressor, local_mean
from localkit.engine.blocks import interruptible


def _spy(monkeypatch, module, name, rows_of):
    """Wrap the compiled ``module.name``: 0.3 s after its first call starts, a thread interrupts
    the main thread; returns the rows each call started with (a list) and that thread."""
    done, original, started = [], getattr(module, name), threading.Event()

    def spy(*args):
        done.append(rows_of(*args))
        started.set()
        return original(*args)

    def interrupt():
        started.wait()
        threading.Event().wait(0.3)
        _thread.interrupt_main()

    monkeypatch.setattr(module, name, spy)
    return done, threading.Thread(target=interrupt)


def _interrupted(call, timer):
    """Run ``call`` with ``timer`` going; the interrupt is delivered before this returns (were it
    late, it would stop the test session instead of failing the test)."""
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        try:
            call()
        finally:
            timer.join()


def test_ctrl_c_stops_the_compiled_compact_pass_between_chunks(monkeypatch):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100_000, 2)), rng.normal(size=100_000)  # 10 chunks, ~1 s each on a busy 2-core machine
    # compiled code loaded first: Ctrl-C then lands in a compiled call, not in numba's compiler (a
    # fresh clone's quick suite compiled here, and the interrupt was lost in 2 of 4 runs)
    local_mean(X[:10], X[:1000], y[:1000], kernel="epanechnikov", bandwidth=0.2, algorithm="compiled")
    # the pass compiled for this profile, spied on behind the module's per-profile lookup
    chunks = SimpleNamespace(run=compact._window_sums(compact.COMPACT.index("epanechnikov")))
    done, timer = _spy(monkeypatch, chunks, "run", lambda Q, *rest: len(Q))
    monkeypatch.setattr(compact, "_window_sums", lambda code: chunks.run)
    _interrupted(lambda: local_mean(X, X, y, kernel="epanechnikov", bandwidth=0.2, algorithm="compiled"), timer)
    assert sum(done) < len(X)  # the code before ran the whole pass in one compiled call


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_ctrl_c_during_loess_predict_is_a_keyboard_interrupt(monkeypatch, n_jobs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 2))  # blocks of 1,024 queries, ~0.3 s each on a busy 2-core machine
    y = X[:, 0] + rng.normal(size=len(X))
    model = LocalPolynomialRegressor(frac=0.3, n_jobs=n_jobs).fit(X, y)
    model.predict(X[:10])  # compiled code loaded: Ctrl-C then lands in a compiled call, not in the loading
    done, timer = _spy(monkeypatch, loess_grid, "_grid_accumulate", lambda *args: len(args[8]))  # Q
    _interrupted(lambda: model.predict(X), timer)  # numba's SystemError before (one job)
    assert sum(done) < len(X)  # two jobs: the queued blocks ran before


def test_a_system_error_is_a_keyboard_interrupt_only_when_one_caused_it():
    def compiled_call_interrupted():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set") from exc

    with pytest.raises(KeyboardInterrupt), interruptible():
        compiled_call_interrupted()
    with pytest.raises(SystemError, match="something else"), interruptible():
        raise SystemError("something else")
