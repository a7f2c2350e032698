"""Bisects the open fault of our Triton attention kernel in half precision (a GPU diagnosis).

On an H200 (Triton 3.6) the kernel's bfloat16 and float16 forward pass gave wrong rows for head size
20, 12 value columns and lengths 70/90, and one illegal memory access (``BLOCK_M = 64``, causal),
while head sizes 16 and 64 at ``L = S = 128`` matched float64 and float32 was right everywhere
(``benchmarks/RESULTS.md``). Each case here varies one factor: the head size (a feature tile wider
than the data: 20 in 32), the value width (12 in 16), ragged lengths, causal or not, the centring
(the profiles centre their inputs in the kernel, the softmax does not), and ``pad``: the same
inputs zero-padded on the host to the tile widths, which leaves every distance and output unchanged
and so tells whether the masked feature / value columns are what goes wrong.

    python benchmarks/diagnose_triton_half.py [--dtypes bfloat16 float16] [--no-causal]

Every case prints one line: its error against the float64 streamed reference (relative to the
largest output), or the error it raised. Cases run in a child process that is restarted after a
crash (an illegal memory access poisons the CUDA context). Without CUDA the kernels run in
Triton's interpreter (slow; float16 only: its bfloat16 products are wrong).
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, torch
from localkit.nn import kernel_attention
from localkit.fused.triton_attention import triton_kernel_attention

device = "cuda" if torch.cuda.is_available() else "cpu"
for line in sys.stdin:
    case = json.loads(line)
    g = torch.Generator().manual_seed(0)
    L, S, d, dv = case["L"], case["S"], case["d"], case["dv"]
    q, k, v = (torch.randn(1, 2, n, w, generator=g, dtype=torch.float64) for n, w in ((L, d), (S, d), (S, dv)))
    dtype = getattr(torch, case["dtype"])
    q, k, v = (t.to(dtype).double() for t in (q, k, v))  # values the half precision holds exactly
    h = 4.0 if case["kernel"] == "softmax" else 7.0
    ref = kernel_attention(q, k, v, case["kernel"], bandwidth=h, causal=case["causal"])
    if case["pad"]:  # zero columns: distances, dot products and outputs do not move
        width = lambda n: max(16, 1 << (n - 1).bit_length())
        q, k = (torch.nn.functional.pad(t, (0, width(d) - d)) for t in (q, k))
        v = torch.nn.functional.pad(v, (0, width(dv) - dv))
    c = torch.tensor(1 / h if case["kernel"] == "softmax" else 1 / h ** 2)
    try:
        out = triton_kernel_attention(case["kernel"], *(t.to(device, dtype) for t in (q, k, v)), c.to(device),
                                      case["causal"])
        err = ((out[..., :dv].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        bad = (out[..., :dv].double().cpu() - ref).abs().amax(-1) > 0.05 * ref.abs().max()
        rows = bad.nonzero()[:, -1].unique().tolist()
        print(json.dumps({"error": err, "bad_rows": rows[:12], "n_bad": len(rows)}), flush=True)
    except Exception as exc:
        print(json.dumps({"raised": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}), flush=True)
"""


def cases(dtypes, causal_values):
    shapes = [(128, 128), (70, 90)]
    widths = [(16, 16), (20, 16), (16, 12), (20, 12), (64, 64)]
    for dtype, kernel, (L, S), (d, dv), causal, pad in itertools.product(
            dtypes, ["softmax", "laplacian"], shapes, widths, causal_values, [False, True]):
        if pad and (d, dv) in ((16, 16), (64, 64)):
            continue  # nothing to pad
        yield dict(dtype=dtype, kernel=kernel, L=L, S=S, d=d, dv=dv, causal=causal, pad=pad)


def run(todo):
    """Feeds the cases to a child, restarted after each crash; yields ``(case, result)``."""
    env = dict(os.environ)
    if not _cuda():
        env["TRITON_INTERPRET"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    todo = list(todo)
    while todo:
        with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: compile warnings cannot block the child
            child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=errors, text=True, env=env)
            child.stdin.write("".join(json.dumps(c) + "\n" for c in todo))
            child.stdin.close()
            for line in child.stdout:
                yield todo.pop(0), json.loads(line)
            child.wait()
            if todo:  # the child died on todo[0]
                errors.seek(0)
                tail = errors.read().strip().splitlines()
                yield todo.pop(0), {"crashed": (tail[-1] if tail else f"exit {child.returncode}")[:200]}


def _cuda():
    import torch

    return torch.cuda.is_available()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16"])
    parser.add_argument("--no-causal", action="store_true", help="non-causal cases only")
    args = parser.parse_args()
    for case, result in run(cases(args.dtypes, [False] if args.no_causal else [False, True])):
        name = (f"{case['dtype']:8} {case['kernel']:9} L={case['L']:3} S={case['S']:3} d={case['d']:2} "
                f"dv={case['dv']:2} causal={case['causal']!s:5} pad={case['pad']!s:5}")
        if "error" in result:
            verdict = "ok   " if result["error"] < 2e-2 else "WRONG"
            detail = f"{result['error']:.1e}" + (f" bad rows {result['bad_rows']} ({result['n_bad']})"
                                                 if result["n_bad"] else "")
        else:
            verdict, detail = "FAIL ", result.get("raised") or result.get("crashed")
        print(f"{verdict} {name} {detail}", flush=True)


if __name__ == "__main__":
    main()
