"""The tour's machinery: rows, timing, figures, and the discovery of sections.

A section is a module ``localkit/tour/<name>.py`` (no leading underscore) that defines
``ORDER`` (an int: where it goes in the table), ``TITLE`` and ``run(ctx) -> list[Row]``.
Sections are found by listing the package, so adding one touches no other file.
"""
from __future__ import annotations

import contextlib
import importlib
import pkgutil
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._timing import median_time
from ..exceptions import LocalkitConvergenceWarning


@dataclass
class Row:
    """One method of the map: localkit against its reference on the same data."""

    method: str
    localkit: str          # e.g. "R^2=0.812" or "mean=0.4312"
    reference: str         # the reference's name and its result, e.g. "statsmodels KernelReg 0.812"
    agreement: float       # max |localkit - reference| over the compared outputs
    t_localkit: float      # seconds
    t_reference: float     # seconds (nan when there is nothing to time)
    tolerance: float = np.nan  # the stated tolerance the agreement must meet (nan: informative)

    @property
    def compared(self):
        """A comparison with a stated tolerance; otherwise the row only shows values side by side
        (``agreement`` is then informative, e.g. a gain, and is not shown as a difference)."""
        return bool(np.isfinite(self.tolerance))

    @property
    def ok(self):
        return not self.compared or self.agreement <= self.tolerance

    @property
    def speed(self):
        """``"3.2x faster"`` / ``"4.1x slower"``: the reference's time over localkit's, where both
        were timed; localkit is slower on some small problems, and the table says so."""
        if not (np.isfinite(self.t_localkit) and np.isfinite(self.t_reference)) or min(self.t_localkit,
                                                                                      self.t_reference) <= 0:
            return "-"
        ratio = self.t_reference / self.t_localkit
        return f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"


#: First runs shorter than this are repeated, untimed the first time (:meth:`TourContext.timed`)
WARM_UP_SECONDS = 2.0


class TourContext:
    """What a section gets: where figures go, a seeded generator, a timer, and ``echo`` for a
    row that runs long enough to say what it is doing."""

    def __init__(self, out_dir="tour_output", seed=0, echo=print):
        self.echo = echo
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(seed)
        self.figures = []

    @staticmethod
    def timed(func, *args, repeat=1, **kwargs):
        """``(result, seconds)``: the median of ``repeat`` runs, after one untimed run where that run
        takes less than ``WARM_UP_SECONDS``. A first call in a process pays once what later calls
        do not: numba loading its compiled functions from the cache (0.5-1.4 s for local PCA on
        iris, against 2 ms warm, so that ``localkit tour --only geometry`` called it 1,777x slower
        than PCA), a library importing its modules. Where the first run is longer, that share is
        small and the row is not run twice for it."""
        def call():
            return func(*args, **kwargs)

        result, first = median_time(call, 1)
        if first >= WARM_UP_SECONDS and repeat == 1:
            return result, first
        return median_time(call, repeat)

    def figure_path(self, name):
        """Path for a PNG called ``name``; the figure is listed at the end of the tour."""
        path = self.out_dir / f"{name}.png"
        self.figures.append(path)
        return path


def section_names():
    """The names of the tour's section modules (files in this package without a leading _)."""
    here = [str(Path(__file__).parent)]  # this package's folder (importing the package would be a cycle)
    return sorted(m.name for m in pkgutil.iter_modules(here) if not m.name.startswith("_"))


def sections(only=None):
    """The tour's section modules (those named in ``only``, or all), in ``ORDER``."""
    mods = [importlib.import_module(f"localkit.tour.{name}") for name in section_names()
            if not only or name in only]
    return sorted(mods, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


@contextlib.contextmanager
def iteration_budget():
    """Fits that stop at ``max_iter`` on purpose: the tour gives an optimiser a fixed budget of
    iterations (unsupervised kernel regression and unregularised metric learning keep improving
    their training loss for thousands of iterations: 10x the budget still stops at ``max_iter``),
    and compares what it reaches. Their :class:`~localkit.exceptions.LocalkitConvergenceWarning`
    is that documented behaviour, so it is not shown; every other warning is."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LocalkitConvergenceWarning)
        yield


def _fmt_time(t):
    return "-" if not np.isfinite(t) else (f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s")


def format_table(rows):
    """The tour's table: values (localkit's, the reference's) apart from their difference, which
    is shown only for rows compared to a tolerance ("-" where a row only shows values); the
    timings and which side is faster (localkit is slower on some small problems)."""
    header = ["method", "localkit", "reference", "max |diff|", "tolerance", "localkit time", "ref. time",
              "localkit is", "ok"]
    body = [[r.method, r.localkit, r.reference, f"{r.agreement:.2e}" if r.compared else "-",
             f"{r.tolerance:.0e}" if r.compared else "-", _fmt_time(r.t_localkit), _fmt_time(r.t_reference),
             r.speed, ("yes" if r.ok else "NO") if r.compared else "-"] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(b) for b in body])


def run_tour(out_dir="tour_output", only=None, echo=print):
    """Run every section (or those named in ``only``), print the table; return (rows, failures)."""
    import matplotlib

    matplotlib.use("Agg")
    ctx = TourContext(out_dir, echo=echo)
    rows, failures = [], []
    unknown = set(only or ()) - set(section_names())
    if unknown:
        raise ValueError(f"unknown tour section(s) {sorted(unknown)}; known: {section_names()}")
    for mod in sections(only):
        name = mod.__name__.rsplit(".", 1)[1]
        echo(f"-- {getattr(mod, 'TITLE', name)}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # the references' own deprecations
                new = mod.run(ctx)
        except Exception:  # a broken section is reported, and the tour fails at the end
            failures.append((name, traceback.format_exc()))
            echo(traceback.format_exc())
            continue
        for r in new:
            if r.compared:
                echo(f"   {r.method}: max |diff| {r.agreement:.2e} <= {r.tolerance:.0e} "
                     f"({'ok' if r.ok else 'OUT OF TOLERANCE'})")
            else:  # values side by side, no tolerance: no difference to judge
                echo(f"   {r.method}: {r.localkit}; {r.reference}")
        rows.extend(new)
    echo("")
    echo(format_table(rows))
    echo("")
    for path in ctx.figures:
        echo(f"figure: {path}")
    failures += [(r.method, "out of tolerance") for r in rows if not r.ok]
    return rows, failures
