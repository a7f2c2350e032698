"""verbose on every iterative estimator (one tqdm facility) and ConvergenceWarning at max_iter."""
import io
import re
import sys
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, make_blobs
from sklearn.exceptions import ConvergenceWarning

from localkit import (HopfieldNetwork, LazyAutoencoder, MeanShift, MetricLearningKernelRegressor,
                      RelaxationLabeling, TSKFuzzyClassifier, TSKFuzzyRegressor)
from localkit._progress import AUTO_DELAY, check_verbose, progress


@pytest.fixture(scope="module")
def blobs():
    return make_blobs(n_samples=90, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.4, random_state=0)


@pytest.fixture(scope="module")
def regression():
    X, y = load_diabetes(return_X_y=True)
    return X[:60, :3], y[:60]


def _partial_labels(y):
    out = np.full_like(y, -1)
    out[:: 10] = y[:: 10]
    return out


# (description on the bar, a fit that stops at max_iter, the same fit converged or shorter)
CASES = {
    "mean shift": lambda X, y, **kw: MeanShift(bandwidth=0.8, **kw).fit(X),
    "relaxation labeling": lambda X, y, **kw: RelaxationLabeling(kernel="gaussian", bandwidth=0.5, tol=0.0,
                                                                 **kw).fit(X, _partial_labels(y)),
    "Hopfield retrieval": lambda X, y, **kw: HopfieldNetwork(beta=0.5, tol=0.0, **kw).fit(X).predict(X[:5] + 0.3),
    "metric learning": lambda X, y, **kw: MetricLearningKernelRegressor(form="diagonal", **kw).fit(X, y),
    "lazy autoencoder": lambda X, y, **kw: LazyAutoencoder(n_components=1, **kw).fit(X),
    "TSKFuzzyRegressor refinement": lambda X, y, **kw: TSKFuzzyRegressor(n_rules=2, random_state=0, **kw).fit(
        X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2),
    "TSKFuzzyClassifier refinement": lambda X, y, **kw: TSKFuzzyClassifier(n_rules=2, random_state=0,
                                                                          **kw).fit(X, y),
}


def _data(name, blobs, regression):
    if name == "metric learning":
        return regression
    return blobs


@pytest.mark.parametrize("name", sorted(CASES))
def test_verbose_shows_a_bar_and_max_iter_warns(name, blobs, regression, capsys):
    X, y = _data(name, blobs, regression)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        CASES[name](X, y, max_iter=2, verbose=True)
    err = capsys.readouterr().err
    assert name in err and re.search(r"\d+/\d+ \[", err)  # tqdm's "n/total [elapsed]" counter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        CASES[name](X, y, max_iter=2, verbose=False)
        CASES[name](X, y, max_iter=2)  # automatic: stderr is not a terminal here
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_verbose_is_refused_by_name(name, blobs, regression):
    X, y = _data(name, blobs, regression)
    with pytest.raises(ValueError, match="verbose"):
        CASES[name](X, y, max_iter=2, verbose="loud")


def test_converged_fits_do_not_warn(blobs):
    X, _ = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        MeanShift(bandwidth=0.8).fit(X)
        MeanShift(kernel="epanechnikov", bandwidth=0.8).fit(X)


def test_losses_appear_on_optimizer_bars(regression, capsys):
    X, y = regression
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        MetricLearningKernelRegressor(form="diagonal", max_iter=3, verbose=True).fit(X, y)
    assert "loss=" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_automatic_mode_shows_only_on_a_terminal_and_after_a_delay(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with progress(10, "run", None) as bar:
        assert not bar.disable and bar.delay == AUTO_DELAY and not bar.leave
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress(10, "run", None) as bar:
        assert bar.disable
    with progress(10, "run", 1) as bar:  # an integer >= 1 asks for it, as in scikit-learn
        assert not bar.disable and bar.delay == 0


@pytest.mark.parametrize("value", [-1, 0.5, "yes", [1]])
def test_check_verbose(value):
    with pytest.raises(ValueError, match="verbose must be None"):
        check_verbose(value)


def test_a_bar_never_shown_takes_every_call_the_library_makes(capsys):
    with progress(10, "run", False) as bar:
        assert bar.disable
        bar.update()
        bar.update(3 - bar.n)
        bar.set_postfix(change="1e-3", refresh=False)
        bar.set_postfix_str("loss 1.0", refresh=False)
        bar.clear()
        bar.refresh()
    bar.close()
    assert capsys.readouterr().err == ""
