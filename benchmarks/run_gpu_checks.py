"""Every check that needs a CUDA device, in one run: the bisection of our Triton kernel's
half-precision fault, the GPU local-mean benchmark, the CUDA tests and the GPU attention table
(written row by row, so that a run cut short keeps what it measured).

    python benchmarks/run_gpu_checks.py OUT_DIR [--budget SECONDS] [--workers N] [--table-seconds SECONDS]
                                                [--candidates SECONDS]

Packages the GPU machine lacks (array-api-strict, for the array-API tests) can be installed to a
folder on ``PYTHONPATH``: the steps keep it.

Each step runs in its own process with its share of the budget; outputs go to ``OUT_DIR``
(``env.txt``, ``triton_half.txt``, ``gpu_local_mean.md``, ``pytest_cuda.log``, ``gpu_attention.md``, and
with ``--candidates`` ``gpu_candidates.md``: other CUDA paths for the kernels that missed their bars,
``benchmarks/diagnose_gpu_candidates.py``, run before the table).
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CUDA_TESTS = ["tests/test_array_api.py", "tests/test_nn_cuda.py", "tests/test_nn_triton.py", "tests/test_nn_flex.py",
              "tests/test_nn_dropin.py",
              "tests/test_nonlocal_block.py"]

ENV = """
import platform, torch, triton, sklearn, numpy, numba
print(platform.python_version(), 'torch', torch.__version__, 'triton', triton.__version__, 'sklearn',
      sklearn.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
import localkit; print('localkit imports from', localkit.__file__)
"""
LOCAL_MEAN = "import bench_gpu_local_mean as b; print(b.run(), flush=True)"
ATTENTION = ("import sys, bench_attention as b; b.torch.set_num_threads(8); "
             "print(b._gpu_table(emit=lambda row: print(row, flush=True), n_passes=int(sys.argv[1])).split(chr(10))[0])")


def step(name, argv, out, seconds, cwd=ROOT):
    """Run ``argv`` for at most ``seconds``, its output streamed to ``out``; returns its status."""
    print(f"== {name} (at most {seconds:.0f} s)", flush=True)
    start = time.perf_counter()
    # the caller's PYTHONPATH kept behind ours: packages carried to the machine as wheels
    path = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", SCIPY_ARRAY_API="1")
    with open(out, "w") as log:
        try:
            status = subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    timeout=max(1.0, seconds)).returncode
        except subprocess.TimeoutExpired:
            status = "timed out"
    print(f"   {status} after {time.perf_counter() - start:.0f} s -> {out.name}", flush=True)
    print("   " + "\n   ".join(Path(out).read_text().splitlines()[-25:]), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all steps together")
    parser.add_argument("--attention-passes", type=int, default=3, help="passes of the attention table (1-3)")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers for the CUDA tests "
                        "(FlexAttention's compiles are CPU-bound)")
    parser.add_argument("--table-seconds", type=float, default=170.0, help="seconds kept for the attention table")
    parser.add_argument("--candidates", type=float, default=0.0, help="seconds for the candidate paths (0: skip)")
    parser.add_argument("--extra", type=Path, help="a script to run after the tests (diagnostics)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + args.budget
    left = lambda: deadline - time.perf_counter()  # noqa: E731
    py = sys.executable
    step("environment", [py, "-c", ENV], args.out / "env.txt", 60)
    step("Triton half-precision bisect", [py, str(ROOT / "benchmarks" / "diagnose_triton_half.py"), "--dtypes",
                                           "bfloat16"], args.out / "triton_half.txt", min(90, left()))
    step("GPU local mean", [py, "-c", LOCAL_MEAN], args.out / "gpu_local_mean.md", min(150, left()))
    workers = ["-n", str(args.workers)] if args.workers > 1 else []
    step("CUDA tests", [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *workers, "-k", "cuda or triton",
                        *CUDA_TESTS], args.out / "pytest_cuda.log", min(150, left() - args.table_seconds))
    if args.candidates > 0:
        step("GPU candidate paths", [py, str(ROOT / "benchmarks" / "diagnose_gpu_candidates.py"), "--seconds",
                                     str(args.candidates - 30)], args.out / "gpu_candidates.md",
             min(args.candidates, left() - args.table_seconds))
    step("GPU attention table", [py, "-c", ATTENTION, str(args.attention_passes)], args.out / "gpu_attention.md",
         left() - (40 if args.extra else 0))
    if args.extra is not None:
        step("extra", [py, str(args.extra.resolve())], args.out / "extra.txt", left())


if __name__ == "__main__":
    main()
