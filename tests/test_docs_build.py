"""The documentation's sources, packaging metadata and README hold together (no Sphinx run here:
`make docs` builds the site; these checks catch what would break it or leave it incomplete)."""
import ast
import importlib.util
import os
import re
import tomllib
from pathlib import Path

import pytest

import localkit
import localkit.nn
import localkit.plot

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _api_entries():
    """{module: names} listed by the autosummary directives of docs/api.rst."""
    entries, module = {}, None
    for line in (DOCS / "api.rst").read_text().splitlines():
        if line.startswith(".. currentmodule::"):
            module = line.split("::")[1].strip()
        elif re.fullmatch(r"   [A-Za-z_]\w*", line) and module is not None:
            entries.setdefault(module, set()).add(line.strip())
    return entries


@pytest.mark.parametrize("module", [localkit, localkit.nn, localkit.plot], ids=lambda m: m.__name__)
def test_every_public_name_is_in_the_api_reference(module):
    listed = _api_entries().get(module.__name__, set())
    missing = sorted(set(module.__all__) - listed)
    assert not missing, f"add {missing} to docs/api.rst under '.. currentmodule:: {module.__name__}'"
    stale = sorted(listed - set(module.__all__))
    assert not stale, f"docs/api.rst lists {stale}, which {module.__name__}.__all__ does not export"


def _examples():
    return sorted((ROOT / "examples").glob("plot_*.py"))


def test_gallery_has_at_least_eight_titled_examples():
    examples = _examples()
    assert len(examples) >= 8
    for path in examples:
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"{path.name} needs a docstring: sphinx-gallery takes its title from it"
        title, underline = doc.splitlines()[:2]
        assert underline == "=" * len(title), f"{path.name}: the title must be underlined by '=' to its length"


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_gallery_examples_use_no_network(path):
    source = path.read_text()
    # scikit-learn's fetch_* and urllib/requests download at run time; the build is offline
    assert not re.search(r"\bfetch_\w+|urllib|requests|urlopen|http[s]?://", source), path.name


def test_conf_fetches_nothing_and_treats_warnings_as_errors():
    assert (DOCS / "_static" / "mathjax" / "tex-svg.js").is_file()  # formulas render without a CDN
    assert "sphinx-build -W --keep-going" in (ROOT / "Makefile").read_text()
    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    conf_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf_module)
    assert {"numpydoc", "sphinx_gallery.gen_gallery", "sphinx.ext.autosummary"} <= set(conf_module.extensions)
    assert "sphinx.ext.intersphinx" not in conf_module.extensions  # it would fetch inventories
    assert not getattr(conf_module, "intersphinx_mapping", None)


def test_gallery_order_lists_existing_examples():
    spec = importlib.util.spec_from_file_location("gallery_order", DOCS / "gallery_order.py")
    order = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(order)
    names = {p.name for p in _examples()}
    assert set(order.ORDER) <= names, f"gallery_order.ORDER names missing files: {set(order.ORDER) - names}"


def test_user_guide_globs_its_folder():
    # other pages are dropped into docs/user_guide/ without editing the toctree
    assert re.search(r":glob:\n\n   user_guide/\*", (DOCS / "user_guide.rst").read_text())
    for page in ("user_guide", "api", "install", "design", "auto_examples/index"):
        assert f"   {page}\n" in (DOCS / "index.rst").read_text()


def _python_blocks(path):
    text = path.read_text()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text)
    return ["\n".join(line[3:] for line in block.splitlines()) for block in blocks]


@pytest.mark.parametrize("page", ["index.rst", "user_guide/01_idea.rst", "user_guide/03_kernels_and_bandwidths.rst",
                                  "user_guide/04_gpu.rst"])
def test_documentation_code_runs(page, monkeypatch):
    # pages may set environment variables (the GPU page: SCIPY_ARRAY_API); undone afterwards
    monkeypatch.setenv("SCIPY_ARRAY_API", os.environ.get("SCIPY_ARRAY_API", "0"))
    blocks = _python_blocks(DOCS / page)
    assert blocks
    namespace = {}
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)


def test_ci_builds_the_docs_after_the_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "make docs" in ci
    assert ci.index("make test") < ci.index("make docs")


def test_wheel_metadata_ships_license_and_py_typed():
    project = PYPROJECT["project"]
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["localkit"]
    assert (ROOT / "localkit" / "py.typed").is_file()
    license_text = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause License" in license_text and "the localkit developers" in license_text
    assert "Typing :: Typed" in project["classifiers"]


def test_docs_extra_installs_the_build():
    docs = " ".join(PYPROJECT["project"]["optional-dependencies"]["docs"])
    for package in ("sphinx", "numpydoc", "sphinx-gallery", "pydata-sphinx-theme", "matplotlib"):
        assert package in docs


def _requirement_names(requirements):
    """The normalised distribution names of PEP 508 requirement strings."""
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")
            for r in requirements}


def _distributions_missing(sources, available):
    """The top-level imports of `sources` that neither the standard library, localkit nor a
    distribution in `available` provides: {module: distribution or None}."""
    import sys
    from importlib.metadata import packages_distributions

    providers = packages_distributions()
    missing = {}
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for top in {m.split(".")[0] for m in modules}:
                if top in sys.stdlib_module_names or top in ("localkit", "gallery_order"):
                    continue
                names = _requirement_names(providers.get(top, [top]))
                if not names & available:
                    missing[top] = sorted(names)
    return missing


def test_docs_extra_holds_what_the_gallery_imports():
    # `make docs` installs the docs extra alone on a fresh clone: every example the gallery runs,
    # and conf.py, must import only the core's and the docs extra's distributions
    project = PYPROJECT["project"]
    available = _requirement_names(project["dependencies"] + project["optional-dependencies"]["docs"])
    sources = [p.read_text() for p in _examples()] + [(DOCS / "conf.py").read_text()]
    assert _distributions_missing(sources, available) == {}
    assert '-e ".[docs]"' in (ROOT / "Makefile").read_text()
    # the check can fail: pandas outside the extras it is given is named
    assert "pandas" in _distributions_missing(["import pandas as pd\nimport os"], {"numpy"})


def test_project_names_no_package_index():
    # pip's default index needs no URL, and the project names no other index or its host
    for path in ("Makefile", "README.md", "docs/install.rst", "pyproject.toml", ".ci/run"):
        text = (ROOT / path).read_text()
        assert not re.search(r"--(extra-)?index-url|--find-links", text), path
        hosts = set(re.findall(r"https?://([^/\s]+)", text))
        assert not {h for h in hosts if "pypi" in h or "pytorch" in h or "pythonhosted" in h}, (path, hosts)


README = (ROOT / "README.md").read_text()


def test_readme_first_screen_shows_install_and_the_two_commands():
    first_screen = "\n".join(README.splitlines()[:60])
    for text in ("pip install .", "make tour", "make test", "docs/_static/speedups.png"):
        assert text in first_screen, text
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    for extra in re.findall(r"localkit\[(\w+)\]", README) + re.findall(r'"\.\[([\w,]+)\]"', README):
        assert set(extra.split(",")) <= extras, f"README names extra {extra!r}; pyproject has {sorted(extras)}"


def test_readme_links_stay_inside_the_repository():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).resolve().is_relative_to(ROOT), target
            assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"


def test_speedup_figure_reads_the_benchmark_results():
    spec = importlib.util.spec_from_file_location("readme_figure", DOCS / "readme_figure.py")
    figure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure)
    bars = figure.speedups((ROOT / "benchmarks" / "RESULTS.md").read_text())
    assert len(bars) >= 6
    assert all(value > 0 for _, value in bars)
    assert figure.FIGURE.is_file()
    with pytest.raises(ValueError, match="no section 'nonsense'"):
        figure.section_table("", "nonsense", "ratio")
    with pytest.raises(ValueError, match="no table with a column 'nonsense'"):
        figure.section_table((ROOT / "benchmarks" / "RESULTS.md").read_text(), "loess", "nonsense")
