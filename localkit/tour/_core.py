"""The tour's machinery: rows, timing, figures, and the discovery of sections.

A section is a module ``localkit/tour/<name>.py`` (no leading underscore) that defines
``ORDER`` (an int: where it goes in the table), ``TITLE`` and ``run(ctx) -> list[Row]``.
Sections are found by listing the package, so adding one touches no other file.
"""
from __future__ import annotations

import importlib
import pkgutil
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._timing import median_time


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
    def ok(self):
        return not np.isfinite(self.tolerance) or self.agreement <= self.tolerance


class TourContext:
    """What a section gets: where figures go, a seeded generator, a timer."""

    def __init__(self, out_dir="tour_output", seed=0):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(seed)
        self.figures = []

    @staticmethod
    def timed(func, *args, repeat=1, **kwargs):
        """``(result, seconds)``: the median of ``repeat`` runs."""
        return median_time(lambda: func(*args, **kwargs), repeat)

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


def _fmt_time(t):
    return "-" if not np.isfinite(t) else (f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s")


def format_table(rows):
    header = ["method", "localkit", "reference", "max |diff|", "tolerance", "localkit time", "ref. time", "ok"]
    body = [[r.method, r.localkit, r.reference, f"{r.agreement:.2e}",
             "-" if not np.isfinite(r.tolerance) else f"{r.tolerance:.0e}",
             _fmt_time(r.t_localkit), _fmt_time(r.t_reference), "yes" if r.ok else "NO"] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(b) for b in body])


def run_tour(out_dir="tour_output", only=None, echo=print):
    """Run every section (or those named in ``only``), print the table; return (rows, failures)."""
    import matplotlib

    matplotlib.use("Agg")
    ctx = TourContext(out_dir)
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
            echo(f"   {r.method}: max |diff| {r.agreement:.2e} ({'ok' if r.ok else 'OUT OF TOLERANCE'})")
        rows.extend(new)
    echo("")
    echo(format_table(rows))
    echo("")
    for path in ctx.figures:
        echo(f"figure: {path}")
    failures += [(r.method, "out of tolerance") for r in rows if not r.ok]
    return rows, failures
