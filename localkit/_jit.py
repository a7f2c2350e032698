"""numba's ``njit`` for localkit's compiled passes, with an on-disk cache keyed by the package.

numba keys a function cached on disk (``cache=True``) by a stamp of its own source file only, not
of the modules whose functions and tables it compiles in: after an upgrade (or a ``git checkout``)
that changed ``kernels/profiles.py``'s order or ``fused/cpu_attention.py``'s profile table but not
the file of the pass that inlines them, the old machine code would be loaded and run the old
dispatch table, silently. Importing this module registers, ahead of numba's own, a cache locator
for the functions defined inside the localkit package: it stores them where numba would (the same
directory, ``NUMBA_CACHE_DIR`` honoured) but stamps them with ``(numba's stamp of the file,
localkit's version, the SHA-256 of every ``.py`` file of the package)``, so that any change to the
package's code makes every cached entry stale and recompiled. Every module of localkit that caches
a compiled function takes ``njit`` from here (``tests/test_structure.py`` checks it).

``NUMBA_CACHE_LOCATOR_CLASSES``, when a user sets it, replaces numba's list of locators and this
one with it.
"""
from __future__ import annotations

import functools
import hashlib
import os

import numba
from numba.core import caching

from ._compiling import announce_compilation

__all__ = ["njit", "package_stamp"]

_ROOT = os.path.dirname(os.path.abspath(__file__))

# the first call of a compiled path on a cold numba cache says so when it compiles for long
announce_compilation()


@functools.cache
def package_stamp() -> tuple[str, str]:
    """``(version, digest)``: localkit's version and the SHA-256 of the relative paths and contents
    of every ``.py`` file of the package (computed once per process)."""
    from . import __version__

    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(_ROOT):
        subfolders[:] = sorted(s for s in subfolders if s != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, _ROOT).replace(os.sep, "/").encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read() + b"\0")
    return __version__, digest.hexdigest()


def _inside_package(py_file) -> bool:
    path = os.path.abspath(py_file)
    return os.path.commonpath([path, _ROOT]) == _ROOT


class PackageStampLocator(caching._CacheLocator):
    """numba's locator for a function of localkit (the first of numba's own that accepts it) with
    the package's stamp added to the file's: see the module's docstring."""

    def __init__(self, inner):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return self._inner.get_source_stamp(), package_stamp()

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _inside_package(py_file):
            return None
        for other in _impl_class()._locator_classes:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


def _impl_class():
    return getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba >= 0.60 / 0.59


def _register():
    locators = _impl_class()._locator_classes
    if PackageStampLocator not in locators:
        locators.insert(0, PackageStampLocator)


_register()

#: ``numba.njit``, once the package's locator is registered (decorating with ``cache=True`` picks
#: the locator at once)
njit = numba.njit
