"""A compiled path's first call on a cold numba cache is not silent: a compilation of a localkit
function lasting more than a moment writes one line to stderr, and its time when it ends."""
import io
import time
from types import SimpleNamespace

import numba
from numba.core import event

import localkit.engine  # noqa: F401  (registers the listener)
from localkit import _compiling


def _event(is_start, module="localkit.engine.passes.compiled", qualname="_window_sums"):
    func = SimpleNamespace(__module__=module, __qualname__=qualname)
    return SimpleNamespace(is_start=is_start, is_end=not is_start, data={"dispatcher": SimpleNamespace(py_func=func)})


def test_a_long_compilation_says_so_and_a_short_one_does_not(monkeypatch):
    monkeypatch.delenv("LOCALKIT_QUIET", raising=False)
    out = io.StringIO()
    notice = _compiling._Notice(stream=out, delay=0.05)
    notice.notify(_event(True))
    notice.notify(_event(True, qualname="_k"))  # a callee compiled inside: rides along
    time.sleep(0.3)
    notice.notify(_event(False))
    notice.notify(_event(False))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("localkit: compiling engine.passes.compiled._window_sums for its first call")
    assert lines[1].startswith("localkit: compiled engine.passes.compiled._window_sums in ")
    quick = io.StringIO()
    notice = _compiling._Notice(stream=quick, delay=5.0)
    notice.notify(_event(True))
    notice.notify(_event(False))
    other = _compiling._Notice(stream=quick, delay=0.0)  # another library's compilation: not ours to announce
    other.notify(_event(True, module="somebody.else"))
    time.sleep(0.1)
    other.notify(_event(False, module="somebody.else"))
    assert quick.getvalue() == ""


def test_quiet_and_registered_once(monkeypatch):
    monkeypatch.setenv("LOCALKIT_QUIET", "1")
    out = io.StringIO()
    notice = _compiling._Notice(stream=out, delay=0.0)
    notice.notify(_event(True))
    time.sleep(0.1)
    notice.notify(_event(False))
    assert out.getvalue() == ""
    _compiling.announce_compilation()
    ours = [n for n in event._registered["numba:compile"] if isinstance(n, _compiling._Notice)]
    assert len(ours) == 1


def test_a_real_compilation_reaches_the_listener():
    """numba's own compile events drive it: a function of a localkit module compiled fresh."""
    seen = []

    class Recording(_compiling._Notice):
        def on_start(self, event):
            seen.append(("start", _compiling._is_localkit(event.data), _compiling._name(event.data)))
            super().on_start(event)

    notice = Recording(stream=io.StringIO(), delay=60.0)
    event.register("numba:compile", notice)
    try:
        namespace = {"__name__": "localkit.probe"}
        exec("def probe(x):\n    return x * 2.0 + 1.0\n", namespace)
        assert numba.njit(namespace["probe"])(1.5) == 4.0
    finally:
        event.unregister("numba:compile", notice)
    assert ("start", True, "probe.probe") in seen
    assert notice.depth == 0 and notice.timer is None  # its end event closed it
