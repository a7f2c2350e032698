"""The package surface: docstring examples run, every public estimator is checked."""
import doctest
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from sklearn.base import BaseEstimator

import localkit

MODULES = sorted(m.name for m in pkgutil.walk_packages(localkit.__path__, "localkit.")
                 if ".tour" not in m.name and not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_every_public_name_resolves():
    for name in localkit.__all__:
        assert getattr(localkit, name) is not None


def test_every_public_estimator_runs_check_estimator_in_the_suite():
    """Each estimator exported by localkit has a test calling sklearn's check_estimator on it."""
    texts = [p.read_text() for p in Path(__file__).parent.glob("test_*.py")]
    estimators = [n for n in localkit.__all__
                  if inspect.isclass(getattr(localkit, n)) and issubclass(getattr(localkit, n), BaseEstimator)]
    assert len(estimators) >= 10
    missing = [n for n in estimators if not any("check_estimator(" in t and n in t for t in texts)]
    assert not missing, f"no check_estimator test for {missing}"


def test_public_functions_and_classes_have_docstrings():
    undocumented = [n for n in localkit.__all__ if not (getattr(localkit, n).__doc__ or "").strip()]
    assert not undocumented
