"""A one-line notice when numba compiles one of localkit's functions for longer than a moment.

A compiled path is compiled by numba on its first call on a machine (and for each new argument
type), then kept in numba's cache on disk. On a cold cache that first call can take tens of
seconds with nothing on screen; :func:`announce_compilation` registers a listener on numba's
compile events that writes one line to stderr once a compilation of a localkit function has
lasted :data:`NOTICE_DELAY` seconds, and one more with its time when it ends. Compilations that
end sooner (and every call served from the cache) print nothing. ``LOCALKIT_QUIET=1`` silences it.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from numba.core import event

#: seconds a compilation runs before the notice is written
NOTICE_DELAY = 1.5

_installed = False


def announce_compilation():
    """Register the compile-event listener once per process (idempotent)."""
    global _installed
    if _installed:
        return
    event.register("numba:compile", _Notice())
    _installed = True


class _Notice(event.Listener):
    """A numba listener: the outermost compilation of a localkit function starts a timer; nested
    compilations (its callees) ride along."""

    def __init__(self, stream=None, delay=None):
        self.stream, self.delay = stream, delay
        self.depth, self.timer, self.started, self.shown, self.name = 0, None, 0.0, False, ""

    def on_start(self, event):
        self.depth += 1
        if self.depth == 1 and _is_localkit(event.data):
            self.started, self.shown, self.name = time.perf_counter(), False, _name(event.data)
            self.timer = threading.Timer(NOTICE_DELAY if self.delay is None else self.delay, self._show)
            self.timer.daemon = True
            self.timer.start()

    def on_end(self, event):
        self.depth = max(self.depth - 1, 0)
        if self.depth == 0 and self.timer is not None:
            self.timer.cancel()
            self.timer = None
            if self.shown:
                self._write(f"localkit: compiled {self.name} in {time.perf_counter() - self.started:.1f} s "
                            "(cached for later runs)")

    def _show(self):
        self.shown = True
        self._write(f"localkit: compiling {self.name} for its first call on this machine (numba; once, then "
                    "cached on disk)...")

    def _write(self, line):
        if os.environ.get("LOCALKIT_QUIET", "") not in ("", "0"):
            return
        stream = sys.stderr if self.stream is None else self.stream
        print(line, file=stream, flush=True)


def _is_localkit(data):
    func = getattr(data.get("dispatcher"), "py_func", None)
    return (getattr(func, "__module__", None) or "").startswith("localkit")  # None: a function made by exec


def _name(data):
    func = data["dispatcher"].py_func
    return f"{func.__module__.removeprefix('localkit.')}.{func.__qualname__}"
