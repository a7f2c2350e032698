"""The layout the design promises (issue 22), checked from the source: layers import downwards
only, so no module of localkit is part of an import cycle, lazy imports inside functions
included (they hide a cycle from Python, not from a reader)."""
import ast
from pathlib import Path

import localkit

ROOT = Path(localkit.__file__).parent


def module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def _from_module(node, package):
    """The dotted module of ``from ... import`` in ``package``, relative imports resolved."""
    if not node.level:
        return node.module or ""
    stem = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(stem + ([node.module] if node.module else []))


def imported_modules(name):
    """The localkit modules that module ``name`` imports, anywhere in its source."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, package)
            for alias in node.names:  # ``from pkg import module`` names a module too
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        result.append(sorted(component))
    return result


def test_the_graph_is_read():
    graph = {m: imported_modules(m) for m in MODULES}
    assert "localkit.engine.bound" in graph["localkit.engine.binding"]
    assert "localkit.engine" in graph["localkit.models._base"]


def test_no_import_cycle():
    graph = {m: imported_modules(m) for m in MODULES}
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _imports_and_names(name, source=None):
    """``(modules, names)``: every module that module ``name`` imports (its full dotted name,
    relative imports resolved) and every identifier its source (or ``source``) uses."""
    path = MODULES.get(name, ROOT / "models" / "probe.py")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules, names = set(), set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add(_from_module(node, package))
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return modules, names


def _layer(prefix):
    return [m for m in MODULES if m == prefix or m.startswith(prefix + ".")]


def test_models_and_nn_reach_the_engine_through_its_door_only():
    """``from ..engine import ...`` and nothing deeper: the engine's submodules are its own."""
    for name in _layer("localkit.models") + _layer("localkit.nn"):
        deep = {m for m in _imports_and_names(name)[0] if m.startswith("localkit.engine.")}
        assert not deep, f"{name} imports {sorted(deep)}; import from localkit.engine"


#: what only the engine's backends may ask: which array library or cluster holds the data
BACKEND_QUESTIONS = {"is_dask_collection", "foreign_namespace", "namespace_of", "first_foreign", "_is_numpy_namespace",
                     "streamed_path", "xp_nearest", "xp_kneighbors", "to_host", "_convert_to_numpy", "dask_local_sums"}


def test_no_model_imports_dask_or_tests_an_array_namespace():
    for name in _layer("localkit.models"):
        modules, names = _imports_and_names(name)
        assert not {m for m in modules if m == "dask" or m.startswith("dask.")}, f"{name} imports dask"
        assert not names & BACKEND_QUESTIONS, f"{name} asks {sorted(names & BACKEND_QUESTIONS)}; use backend_of"


def test_the_structure_checks_can_fail():
    """The checks read what they claim to: a model that imports an engine submodule and dask is seen."""
    source = "import dask.array as da\nfrom ..engine.backends.array_api import foreign_namespace\nforeign_namespace(1)\n"
    modules, names = _imports_and_names("localkit.models.probe", source)
    assert "dask.array" in modules and "localkit.engine.backends.array_api" in modules
    assert "foreign_namespace" in names


def test_every_module_imports_on_its_own():
    """Importing any module first works: a package's ``__init__`` runs when one of its submodules is
    imported, a cycle the source graph above does not see (``engine.bound`` -> ``engine.backends``'s
    ``__init__`` -> ``backends.dask`` -> ``engine.bound``), and ``localkit.engine`` imports its names
    lazily, so no module may rely on another having been imported before it. One interpreter; each
    module imported after every localkit module (but numba's hooks) is dropped from ``sys.modules``."""
    import subprocess
    import sys

    names = sorted(m for m in MODULES if m != "localkit.__main__"
                   and not m.startswith(("localkit.nn", "localkit.fused", "localkit.tour")))
    # numba's hooks (the cache locator, the compile notice) are registered once per process: kept
    code = ("import importlib, sys\nfailed = []\nKEEP = ('localkit._jit', 'localkit._compiling')\n"
            f"for name in {names!r}:\n"
            "    for m in [m for m in sys.modules if (m == 'localkit' or m.startswith('localkit.')) and m not in KEEP]:\n"
            "        del sys.modules[m]\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except ImportError as exc:\n        failed.append(f'{name}: {exc}')\n"
            "print(failed)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


#: decorators whose compilers take flat arguments (numba, Triton, torch custom operators): exempt
COMPILED = {"njit", "jit", "intrinsic", "custom_op", "register_fake"}
#: private signatures that are a public one's arguments as given: kernel_attention's ten (SDPA's)
PUBLIC_ARGUMENTS = {"localkit.nn.functional._checked_call", "localkit.nn.functional._Call.__init__"}


def long_private_signatures(source, module, limit=10):
    """``module.[Class.]function`` of every private function (or method of a private class) in
    ``source`` with ``limit`` parameters or more (``self`` and ``cls`` not counted), compiled kernels
    aside."""
    found = []

    def visit(node, prefix, private_owner):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", child.name.startswith("_"))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                count = len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))
                decorators = set()
                for d in child.decorator_list:
                    d = d.func if isinstance(d, ast.Call) else d
                    while isinstance(d, ast.Attribute):
                        decorators.add(d.attr)
                        d = d.value
                    decorators.add(getattr(d, "id", ""))
                private = (child.name.startswith("_") and not child.name.startswith("__")) or private_owner
                if private and count >= limit and not decorators & COMPILED:
                    found.append(f"{module}.{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", private_owner)

    visit(ast.parse(source), "", False)
    return found


def test_no_private_function_takes_ten_parameters():
    """Options travel as objects (EngineOptions, the bound values, a pass's spec), not as argument
    lists: no private function takes ten parameters or more (issue 36)."""
    long = [name for module, path in MODULES.items() for name in long_private_signatures(path.read_text(), module)]
    assert sorted(set(long) - PUBLIC_ARGUMENTS) == []
    assert PUBLIC_ARGUMENTS <= set(long)  # the exemptions still exist (else drop them)


def test_the_signature_check_can_fail():
    source = ("def _f(a, b, c, d, e, f, g, h, i, j):\n    pass\n"
              "class _C:\n    def __init__(self, a, b, c, d, e, f, g, h, i, j):\n        pass\n"
              "@njit\ndef _g(a, b, c, d, e, f, g, h, i, j):\n    pass\n"
              "def public(a, b, c, d, e, f, g, h, i, j):\n    def _inner(a, b, c, d, e, f, g, h, i, j, *k):\n"
              "        pass\n")
    assert long_private_signatures(source, "m") == ["m._f", "m._C.__init__", "m.public._inner"]
