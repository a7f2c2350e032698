"""Writing a file so that a crash, or another run writing it at the same time, never leaves it
half-written or loses what that other run wrote.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path, write, binary=False):
    """Write ``path`` through ``write(file)``: into a temporary file of its own folder (a unique
    name: runs sharing ``path`` each have theirs; a fixed ``path.tmp`` made one of two runs fail
    with FileNotFoundError), then moved over ``path`` by ``os.replace``, so ``path`` is always
    whole: the old file or the new one. The new file keeps the permissions of the one it
    replaces (0o644 if there was none)."""
    path = Path(path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def folder_lock(folder):
    """An exclusive lock (``fcntl.flock``, POSIX) on ``folder`` itself, for a read-modify-write of
    a file in it: a lock on the file would not do, since :func:`write_atomically` replaces it by
    another (a waiting run would hold a lock on the old one), and a lock file would be left over."""
    import fcntl  # POSIX only: imported by the one caller that needs it

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
