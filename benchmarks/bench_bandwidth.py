"""The plug-in bandwidth rules of issue 24 against their references: ``bandwidth="isj"`` against
KDEpy's ``improved_sheather_jones`` (what ``FFTKDE(bw="ISJ")`` calls) in the same process, and
``bandwidth="sj"`` against R's ``bw.SJ`` timed inside R (``system.time``, through Rscript; skipped
where R is not installed), on the same data, with their relative differences."""
import os
import sys
from pathlib import Path

import numpy as np
from localkit._timing import interleaved, median_time

TITLE = "Plug-in bandwidths: 'isj' against KDEpy's ISJ, 'sj' against R's bw.SJ"


def run(quick=False):
    from localkit.kernels.plugin import improved_sheather_jones, sheather_jones

    sizes, repeat = ((10_000, 100_000), 3) if quick else ((100_000, 1_000_000), 7)
    try:
        from KDEpy.bw_selection import improved_sheather_jones as kdepy_isj
    except ImportError:
        kdepy_isj = None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # R's reference lives with the tests
    from r_reference import have_r, r_bw_sj

    improved_sheather_jones(np.arange(200.0) ** 1.5)  # compile the binning passes outside the timing
    sheather_jones(np.arange(200.0) ** 1.5)
    rows, version = [], None
    for n in sizes:
        rng = np.random.default_rng(0)
        x = np.concatenate([rng.normal(0.0, 1.0, n - n // 4), rng.normal(3.0, 0.5, n // 4)])
        if kdepy_isj is not None:
            (t_ours, t_peer), (h_ours, h_peer) = interleaved(
                [lambda: improved_sheather_jones(x), lambda: kdepy_isj(x[:, None])], repeat)
            rows.append(("isj", n, "KDEpy 1.1 ISJ", t_ours, t_peer, h_ours, h_peer))
        if have_r():
            h_ours, t_ours = median_time(lambda: sheather_jones(x), repeat)
            h_peer, t_peer, version = r_bw_sj(x, repeats=repeat)
            rows.append(("sj", n, "R bw.SJ", t_ours, t_peer, h_ours, h_peer))
    if not rows:
        return None
    lines = [
        f"A two-Gaussian mixture (3/4 N(0, 1), 1/4 N(3, 0.25)); medians of {repeat} runs. KDEpy runs in the same "
        "process, alternating with localkit; R is timed inside R (`system.time(bw.SJ(x))`, no start-up or "
        f"transfer){'' if version is None else ', ' + version}. 2 shared cores (load average "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        "| rule | n | peer | localkit | peer time | localkit / peer | h (localkit) | relative difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rule, n, peer, t_ours, t_peer, h_ours, h_peer in rows:
        lines.append(f"| {rule} | {n:,} | {peer} | {t_ours * 1e3:.1f} ms | {t_peer * 1e3:.1f} ms | "
                     f"{t_ours / t_peer:.2f} | {h_ours:.6g} | {abs(h_ours / h_peer - 1):.1e} |")
    return "\n".join(lines)
