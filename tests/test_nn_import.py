"""torch is an optional extra: localkit works without it, localkit.nn says which extra to install."""
import subprocess
import sys

# A machine without PyTorch: an import hook that finds no torch. (Setting sys.modules["torch"] =
# None also blocks it, but scipy's array-API helpers look torch up in sys.modules and trip on None.)
NO_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoTorch())
"""

USE_LOCALKIT = NO_TORCH + """
import numpy as np
import localkit
from localkit import LocalMeanRegressor
X = np.linspace(0, 1, 20)[:, None]
print(LocalMeanRegressor().fit(X, X.ravel()).predict(X[:2]).shape)
assert "torch" not in sys.modules
"""

IMPORT_NN = """
try:
    import localkit.nn
except ImportError as exc:
    print("IMPORT-ERROR:", exc)
"""


def run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_localkit_works_without_torch():
    assert run(USE_LOCALKIT).strip() == "(2,)"


def test_nn_without_torch_names_the_extra():
    for block in (NO_TORCH, 'import sys\nsys.modules["torch"] = None\n'):
        out = run(block + IMPORT_NN)
        assert "IMPORT-ERROR:" in out and 'pip install ".[nn]"' in out


def test_import_localkit_does_not_import_torch():
    assert run("import sys, localkit; print('torch' in sys.modules)").strip() == "False"


def test_import_localkit_nn_takes_only_what_attention_needs():
    """``import localkit.nn`` took 2.3x ``import torch``: the engine's package imported every estimator
    module, scikit-learn (with pandas and scipy.stats), numba and scipy's special functions. The nn
    layers need none of them to be imported (they load where a call needs them)."""
    code = ("import sys, localkit.nn; print(sorted(m for m in ('sklearn', 'numba', 'pandas', 'scipy.stats', "
            "'scipy.special', 'scipy.sparse', 'localkit.models.regression') if m in sys.modules))")
    assert run(code).strip() == "[]"
    # the layers still run, and the engine's names are there when asked for
    run("import torch, localkit.nn as nn, localkit.engine as e\n"
        "q = torch.randn(1, 4, 8)\n"
        "assert nn.kernel_attention(q, q, q).shape == (1, 4, 8)\n"
        "assert e.BoundKernel is __import__('localkit.engine.bound', fromlist=['x']).BoundKernel")
