"""Draw the speed-up figure of the README and the documentation's home page.

Every bar is a ratio measured by ``localkit bench`` and written to ``benchmarks/RESULTS.md``:
the reference implementation's time over localkit's, for the same result. Run after a benchmark
section changes::

    python docs/readme_figure.py          # writes docs/_static/speedups.png
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
FIGURE = ROOT / "docs" / "_static" / "speedups.png"


def section_table(text: str, name: str, column: str) -> list[dict[str, str]]:
    """The first markdown table of RESULTS.md's section ``name`` with a ``column``, one dict per row."""
    match = re.search(rf"<!-- begin {name} -->(.*?)<!-- end {name} -->", text, flags=re.S)
    if match is None:
        raise ValueError(f"RESULTS.md has no section {name!r}")
    # tables are runs of lines starting with "|", separated by prose
    for table in re.findall(r"(?:^\|.*\n?)+", match.group(1), flags=re.M):
        lines = table.strip().splitlines()
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        if column in header:
            return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
                    for line in lines[2:]]
    raise ValueError(f"section {name!r} of RESULTS.md has no table with a column {column!r}")


def seconds(cell: str) -> float:
    """``"0.231 s"``, ``"49.5 ms"`` or ``"3.09 s (5.0x)"`` in seconds."""
    value, unit = cell.split()[:2]
    return float(value) * {"s": 1.0, "ms": 1e-3}[unit]


def ratio(cell: str) -> float:
    """``"75.9x"`` -> 75.9."""
    return float(cell.rstrip("x"))


def speedups(text: str) -> list[tuple[str, float]]:
    """(label, reference time / localkit time) for the headline rows of RESULTS.md."""
    bars = []
    for row in section_table(text, "mean_shift", "ratio"):
        seeding = "bin seeding" if row["bin_seeding"] == "True" else "every point a seed"
        bars.append((f"mean shift, {row['n']} points, {seeding}\nvs scikit-learn MeanShift", ratio(row["ratio"])))
    for row in section_table(text, "local_mean", "localkit speed-up"):
        if row["implementation"].startswith(("KeOps", "statsmodels")):  # a ratio of pairs per second
            bars.append((f"Nadaraya-Watson, kernel pairs per second\nvs {row['implementation']} (n={row['n']})",
                         ratio(row["localkit speed-up"])))
    for row in section_table(text, "loess", "task"):
        if row["task"].startswith(("LOESS 1-D, frac=0.3, it=3", "local linear")):
            bars.append((f"{row['task']}, {row['size']}\nvs {row['peer']}",
                         seconds(row["peer time"]) / seconds(row["localkit time"])))
    r_loess = section_table(text, "loess", "R direct")[-1]
    bars.append((f"2-D LOESS, n={r_loess['n']}, degree {r_loess['degree']}\nvs R loess (exact fits)",
                 seconds(r_loess["R direct"]) / seconds(r_loess["localkit, 1 thread"])))
    lle = section_table(text, "lle", "scikit-learn")[-1]
    bars.append((f"locally linear embedding, n={lle['n']}\nvs scikit-learn",
                 seconds(lle["scikit-learn"]) / seconds(lle["localkit"])))
    for row in section_table(text, "nl_means", "peer time"):
        if row["image"] in ("512x512", "128x128"):
            bars.append((f"non-local means, {row['image']}\nvs {row['peer']}",
                         seconds(row["peer time"]) / seconds(row["localkit time"])))
    return bars


def draw(bars: list[tuple[str, float]], path: Path = FIGURE) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = sorted(bars, key=lambda bar: bar[1])
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(bars) + 1.3))
    positions = range(len(bars))
    ax.barh(positions, [value for _, value in bars], color="C0")
    ax.set_yticks(list(positions), [label for label, _ in bars], fontsize=8)
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    for y, (_, value) in enumerate(bars):
        ax.text(value * 1.05, y, f"{value:.1f}x", va="center", fontsize=8)
    ax.set_xlim(0.8, max(value for _, value in bars) * 2)
    ax.set_xlabel("speed-up: reference time / localkit time (same results; log scale)")
    ax.set_title("localkit against the reference implementations (benchmarks/RESULTS.md)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    draw(speedups(RESULTS.read_text()), Path(sys.argv[1]) if len(sys.argv) > 1 else FIGURE)
    print(f"wrote {FIGURE if len(sys.argv) < 2 else sys.argv[1]}")
