"""Sphinx configuration of the localkit documentation (``make docs``).

The build is offline: no intersphinx inventories are fetched, the gallery's examples use data
that ships with scikit-learn and scikit-image, and every warning is an error (``-W``).
"""
import os
import sys
from pathlib import Path

from sphinx_gallery.sorting import FunctionSortKey

import localkit

sys.path.insert(0, str(Path(__file__).parent))
import gallery_order  # noqa: E402  (beside this file)

os.environ.setdefault("MPLBACKEND", "Agg")

project = "localkit"
author = "the localkit developers"
copyright = "2026, the localkit developers"
version = release = localkit.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
mathjax_path = "mathjax/tex-svg.js"  # a copy in _static: formulas render without a CDN
exclude_patterns = ["_build", "**.ipynb_checkpoints", "sg_execution_times.rst"]

# API reference: one page per public name, generated from the lists in api.rst
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"  # the numpydoc Parameters section already states the types
numpydoc_show_class_members = False  # the class template lists the methods itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "within_subsection_order": FunctionSortKey(gallery_order.position),
    "doc_module": ("localkit",),
    "backreferences_dir": "generated/backreferences",
    "reference_url": {"localkit": None},  # links into these pages; no other site is consulted
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "min_reported_time": 1,
}

html_theme = "pydata_sphinx_theme"
html_title = f"localkit {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "install": [], "design": []}
html_show_sourcelink = False


def _skip_generated_request_methods(app, what, name, obj, skip, options):
    """scikit-learn generates ``set_fit_request`` & co. for metadata routing; its own docs
    describe them, and their docstrings point into scikit-learn's glossary."""
    return True if name.startswith("set_") and name.endswith("_request") else skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_generated_request_methods)
