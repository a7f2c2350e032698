"""numba's on-disk cache of localkit's compiled passes follows an upgrade of the package.

numba stamps a cached function with a hash of its own file only; a pass that inlines a dispatch
table from another module (the compact pass's profiles, the fused attention's table) would load
its old machine code after an upgrade that changed only the table. Each test copies the package
into a temporary directory (its own ``__pycache__``), runs a pass in a fresh interpreter, changes
a table in the copy as an upgrade would, and runs again.
"""
import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import localkit

PACKAGE = pathlib.Path(localkit.__file__).parent


def _copy_package(tmp_path):
    root = tmp_path / "site"
    shutil.copytree(PACKAGE, root / "localkit", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _run(root, script):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _edit(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


_TABLE = """
from ._jit import njit

@njit(inline="always")
def weight(code, u):
    if code == 0:
        return 1.0 - u
    return 1.0 - u * u
"""

_PASS = """
from ._jit import njit
from ._probe_table import weight

@njit(cache=True)
def total(code, u):
    return weight(code, u)
"""

_PROBE = """
import json
from localkit import _probe_pass
value = _probe_pass.total(0, 0.5)
print(json.dumps({"value": value, "hits": sum(_probe_pass.total.stats.cache_hits.values())}))
"""


def test_a_changed_table_in_another_module_is_never_loaded_from_the_old_cache(tmp_path):
    """Two small modules inside the package: a cached function and the table it inlines; after
    the table changes (and its caller's file does not), the cached entry is stale."""
    root = _copy_package(tmp_path)
    (root / "localkit" / "_probe_table.py").write_text(_TABLE)
    (root / "localkit" / "_probe_pass.py").write_text(_PASS)
    assert _run(root, _PROBE) == {"value": 0.5, "hits": 0}
    assert _run(root, _PROBE) == {"value": 0.5, "hits": 1}  # the cache is live: unchanged, it is loaded
    _edit(root / "localkit" / "_probe_table.py", "return 1.0 - u\n", "return 2.0 - u\n")
    assert _run(root, _PROBE) == {"value": 1.5, "hits": 0}
    assert _run(root, _PROBE) == {"value": 1.5, "hits": 1}  # the new entry is cached in turn


_COMPACT = """
import json
import numpy as np
from localkit.engine import local_mean
from localkit.engine.passes import compiled

rng = np.random.default_rng(0)
X = rng.uniform(size=(400, 2)); y = np.sin(3 * X[:, 0]) + X[:, 1]; Q = rng.uniform(size=(60, 2))
m = local_mean(Q, X, y, kernel="tricube", bandwidth=0.3, algorithm="compiled")
u = np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1)) / 0.3
w = np.where(u < 1, (1 - np.minimum(u, 1) ** 3) ** 3, 0.0)  # tricube, in float64
print(json.dumps({"err": float(np.abs(m - w @ y / w.sum(1)).max()),
                  "hits": sum(compiled._window_sums(compiled.COMPACT.index("tricube")).stats.cache_hits.values())}))
"""


def test_reordered_profiles_recompile_the_compact_pass(tmp_path):
    """The issue's case at the current commit: reordering ``kernels/profiles.py`` changes the codes
    the compiled compact pass dispatches on (``passes/compiled.py`` unchanged); before the package
    stamp, the old entry was loaded and the tricube local mean was 0.06 off."""
    root = _copy_package(tmp_path)
    first = _run(root, _COMPACT)
    assert first["hits"] == 0 and first["err"] < 1e-12
    assert _run(root, _COMPACT)["hits"] == 1
    _edit(root / "localkit" / "kernels" / "profiles.py",
          '        _poly_profile("epanechnikov", _log_poly_a2_b1, _slope_poly_a2_b1, 2, 1),\n'
          '        _poly_profile("tricube", _log_tricube, _slope_tricube, 3, 3),\n',
          '        _poly_profile("tricube", _log_tricube, _slope_tricube, 3, 3),\n'
          '        _poly_profile("epanechnikov", _log_poly_a2_b1, _slope_poly_a2_b1, 2, 1),\n')
    upgraded = _run(root, _COMPACT)
    assert upgraded["hits"] == 0 and upgraded["err"] < 1e-12


def _cached_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cache=True" in path.read_text():
            yield path


def _imports_njit_from_the_package(path):
    tree = ast.parse(path.read_text())
    takes = any(isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("_jit") and node.level
                and any(alias.name == "njit" for alias in node.names) for node in ast.walk(tree))
    bypasses = any(isinstance(node, ast.Attribute) and node.attr in ("njit", "jit")
                   and isinstance(node.value, ast.Name) and node.value.id == "numba" for node in ast.walk(tree))
    bypasses |= any(isinstance(node, ast.ImportFrom) and node.module == "numba"
                    and any(alias.name in ("njit", "jit") for alias in node.names) for node in ast.walk(tree))
    return takes and not bypasses


def test_every_cached_function_is_compiled_with_the_packages_locator():
    modules = list(_cached_modules())
    assert len(modules) >= 8
    wrong = [str(p.relative_to(PACKAGE)) for p in modules if p.name != "_jit.py" and not _imports_njit_from_the_package(p)]
    assert wrong == []


def test_the_locator_check_can_fail(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text("import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x\n")
    assert not _imports_njit_from_the_package(stray)
    stray.write_text("from .._jit import njit\n\n@njit(cache=True)\ndef f(x):\n    return x\n")
    assert _imports_njit_from_the_package(stray)
    stray.write_text("from numba import njit\n\nfrom .._jit import njit\n")
    assert not _imports_njit_from_the_package(stray)


@pytest.mark.parametrize("inside", [True, False])
def test_the_stamp_covers_the_package_only(inside):
    from localkit import _jit

    path = PACKAGE / "engine" / "stream.py" if inside else pathlib.Path(pytest.__file__)
    assert _jit._inside_package(str(path)) is inside
    version, digest = _jit.package_stamp()
    assert version == localkit.__version__ and len(digest) == 64
