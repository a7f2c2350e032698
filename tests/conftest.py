import os

import matplotlib
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")

# Property-based and fuzz tests: "ci" (the default) is small and reproducible, so that the whole
# fuzzing suite stays well under a minute on two cores; HYPOTHESIS_PROFILE=long explores far more.
# Tests that set max_examples themselves keep it; the fuzz tests scale theirs from the profile.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=_QUIET)
settings.register_profile("long", max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def dispatch(monkeypatch):
    """scikit-learn's array-API dispatch (PyTorch tensors in, tensors out) for one test."""
    import sklearn

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")  # scikit-learn requires it for array-API dispatch
    with sklearn.config_context(array_api_dispatch=True):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_terminal_summary(terminalreporter):
    """The fuzz and robustness suites' size and time, in every run's summary (CI's log too)."""
    reports = [r for outcome in ("passed", "failed", "xfailed", "skipped")
               for r in terminalreporter.getreports(outcome)
               if r.when == "call" and "/test_fuzz_" in f"/{r.nodeid}"]
    if reports:
        failed = sum(r.outcome == "failed" for r in reports)
        seconds = sum(r.duration for r in reports)
        terminalreporter.write_line(
            f"fuzz suite: {len(reports)} cases ({failed} failed), {seconds:.1f} s; hypothesis profile "
            f"{os.environ.get('HYPOTHESIS_PROFILE', 'ci')!r}, up to {settings.default.max_examples} examples a case")
