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


# Triton kernels (localkit.engine.triton_attention) run in Triton's interpreter where there is no
# GPU; Triton's JIT reads this when a kernel is defined, so it is set before any test imports one
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass


@pytest.fixture(autouse=True)
def _triton_interpreter_loop_bounds(monkeypatch):
    """Triton 3.6's interpreter takes ``int()`` of the one-element arrays it makes of program ids,
    which NumPy 2.4 refuses; loop bounds derived from them (causal, window) need the element."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        try:
            from triton.runtime import interpreter
        except ImportError:
            return
        patch = interpreter._patch_lang_tensor

        def patched(tensor, scope):
            patch(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

        monkeypatch.setattr(interpreter, "_patch_lang_tensor", patched)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
