"""The GPU diagnostics' scripts run on the CPU too (``--smoke``), so that a lent GPU's few minutes
are not lost to a broken script; their candidate formulas must agree with the float64 kernels."""
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_candidate_paths_agree_with_the_kernels_formulas():
    out = subprocess.run([sys.executable, "diagnose_gpu_candidates.py", "--smoke"], cwd=BENCHMARKS, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| kernel")]
    assert len(rows) == 8, out  # SDPA, and every candidate the CPU has
    for row in rows:
        assert "refused" not in row, row
        error = float(re.search(r"\| ([0-9.e+-]+) \|$", row).group(1))
        assert error < 1e-5, row
