"""Attention kernels against PyTorch's fused ``scaled_dot_product_attention``: on the CPU (always)
time ratios, the window's block sparsity and the memory of one streamed call; on a CUDA GPU (when
there is one) every kernel in bfloat16, forward and forward+backward, time and peak memory next to
SDPA. Plus the language-model curves of ``localkit train-lm`` for three kernels (read from the
JSON logs in ``benchmarks/lm_runs/``; the runs take ~5 minutes each and are not repeated here)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from localkit._timing import interleaved
from localkit.kernels.profiles import PROFILES
from localkit.nn import explain_attention, functional, kernel_attention, local_linear_attention

TITLE = "Attention kernels vs torch scaled_dot_product_attention (CPU; GPU when present); LM curves"
HERE = Path(__file__).resolve().parent
LM_KERNELS = ("softmax", "gaussian", "local-linear")
GPU_KERNELS = ("softmax", "gaussian") + tuple(sorted(set(PROFILES) - {"gaussian"}))


def _reference(q, k, v, kernel, h, causal=False):
    """The local mean in float64 from the kernel's formula (dense weights)."""
    q, k, v = q.double(), k.double(), v.double()
    if kernel == "softmax":
        logits = q @ k.transpose(-2, -1) / h
    else:
        d2 = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist") ** 2
        logits = torch.as_tensor(PROFILES[kernel].log_k((d2 / h ** 2).numpy()))
    if causal:
        logits = logits.masked_fill(torch.ones(logits.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(logits, dim=-1) @ v


def _qkv(B, H, L, d, device="cpu", dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, L, d, generator=g).to(device, dtype).requires_grad_(grad) for _ in range(3)]


def _bandwidth(kernel, d):
    """The default ``d^(1/4)``; compact kernels get ``1.2 sqrt(2d)``, about the distance between two
    standard normal vectors, so that their supports are not empty."""
    return 1.2 * math.sqrt(2 * d) if PROFILES[kernel].compact else d ** 0.25


def _cpu_ratio_table(B, H, L, d, repeat):
    """Forward times against SDPA in one process, interleaved; errors against float64 formulas."""
    q, k, v = _qkv(B, H, L, d)
    rows = []
    fold_q = torch.cat([q / math.sqrt(d), torch.ones_like(q[..., :1])], -1)
    fold_k = torch.cat([k, -0.5 * (k * k).sum(-1, keepdim=True) / math.sqrt(d)], -1)
    fold_v = torch.cat([v, torch.zeros_like(v[..., :1])], -1)  # SDPA's CPU flash kernel wants one head dim
    cases = [("softmax", {}, "CPU flash kernel (SDPA's)"), ("gaussian", {}, "CPU flash kernel + (.., 1, S) key bias"),
             ("softmax", {"causal": True}, "CPU flash kernel, is_causal"),
             ("gaussian", {"causal": True}, "CPU flash kernel: is_causal + (.., 1, S) key bias"),
             ("laplacian", {}, "compiled CPU pass"), ("epanechnikov", {}, "compiled CPU pass")]
    with torch.no_grad():
        for kernel, opts, path in cases:
            peer = lambda opts=opts: F.scaled_dot_product_attention(q, k, v, is_causal=opts.get("causal", False))
            h = math.sqrt(d) if kernel == "softmax" else _bandwidth(kernel, d)
            ours = lambda kernel=kernel, opts=opts, h=h: kernel_attention(q, k, v, kernel, bandwidth=h, **opts)
            streamed = kernel not in ("softmax", "gaussian")  # seconds a call: fewer repeats
            (t_peer, t_ours), (_, out) = interleaved([peer, ours], 3 if streamed else repeat, warmup=True)
            diff = f"{(out.double() - _reference(q, k, v, kernel, h, **opts)).abs().max().item():.1e}"
            name = kernel + (", causal" if opts else "")
            rows.append(f"| {name} | {path} | {t_peer * 1e3:.1f} ms | {t_ours * 1e3:.1f} ms | "
                        f"{t_peer / t_ours:.2f}x | {diff} |")
        # the Gaussian's key bias folded into one more head dimension of plain SDPA, for comparison
        bias = lambda: kernel_attention(q, k, v, "gaussian")
        fold = lambda: F.scaled_dot_product_attention(fold_q, fold_k, fold_v, scale=1.0)[..., :d]
        (t_bias, t_fold), (a, b) = interleaved([bias, fold], repeat, warmup=True)
        rows.append(f"| gaussian, bias folded into d+1 | plain SDPA, q' = [q/h^2, 1], k' = [k, -&#124;k&#124;^2/2h^2], v' = [v, 0] | "
                    f"{t_bias * 1e3:.1f} ms (our bias path) | {t_fold * 1e3:.1f} ms | {t_bias / t_fold:.2f}x | "
                    f"{(a - b).abs().max().item():.1e} |")
        ql, kl, vl = (t[..., :16].contiguous() for t in (q, k, v))
        peer = lambda: F.scaled_dot_product_attention(ql, kl, vl)
        ours = lambda: local_linear_attention(ql, kl, vl)
        (t_peer, t_ours), _ = interleaved([peer, ours], max(3, repeat // 2), warmup=True)
        rows.append(f"| local-linear (d=16) | streamed moments + float32 solve | {t_peer * 1e3:.1f} ms | "
                    f"{t_ours * 1e3:.1f} ms | {t_peer / t_ours:.2f}x | - |")
    head = [f"CPU forward, float32, B={B}, H={H}, L={L}, d={d}, {torch.get_num_threads()} thread(s); medians of "
            f"{repeat} interleaved repeats (3 for the streamed rows); speed = SDPA time / localkit time (>= 1: localkit as fast or "
            "faster). max abs diff: against the kernel's formula in float64.", "",
            "| kernel | localkit path | SDPA (softmax) | localkit | speed vs SDPA | max abs diff |",
            "|---|---|---|---|---|---|"]
    return "\n".join(head + rows)


def _support_bandwidth(q, k, share):
    """The bandwidth that keeps ``share`` of the keys per query (a quantile of sampled distances)."""
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(q.shape[-2], (256,), generator=g)
    return float(torch.quantile(torch.cdist(q[..., rows, :], k).flatten()[:1 << 24], share))


def _every_kernel_table(B, H, L, d, repeat):
    """Issue 27: every kernel forward and forward+backward against SDPA (softmax) in one process,
    interleaved; compact profiles with a bandwidth keeping ~5% of the keys per query, on iid
    Gaussian tokens (no tile can be skipped) and on tokens along a random walk (locality)."""
    q, k, v = _qkv(B, H, L, d)
    grads = [t.clone().requires_grad_(True) for t in (q, k, v)]
    kernels = ["softmax", "gaussian"] + sorted(set(PROFILES) - {"gaussian"})
    rows = ["| kernel | path | fwd: SDPA | fwd: localkit | fwd vs SDPA | fwd+bwd: SDPA | fwd+bwd: localkit | "
            "fwd+bwd vs SDPA |", "|---|---|---|---|---|---|---|---|"]

    def row(name, path, ours, ours_grad, inputs=(q, k, v)):
        with torch.no_grad():
            (t_sdpa, t_ours), _ = interleaved([lambda: F.scaled_dot_product_attention(*inputs), ours], repeat,
                                              warmup=True)
        sdpa_grad = lambda: F.scaled_dot_product_attention(*grads).sum().backward()
        (b_sdpa, b_ours), _ = interleaved([sdpa_grad, ours_grad], repeat, warmup=True)
        rows.append(f"| {name} | {path} | {t_sdpa * 1e3:.0f} ms | {t_ours * 1e3:.0f} ms | {t_ours / t_sdpa:.2f}x | "
                    f"{b_sdpa * 1e3:.0f} ms | {b_ours * 1e3:.0f} ms | {b_ours / b_sdpa:.2f}x |")
        print(rows[-1], flush=True)

    for kernel in kernels:
        h = math.sqrt(d) if kernel == "softmax" else _bandwidth(kernel, d)
        path = explain_attention(q, k, v, kernel, bandwidth=h).path
        if kernel == "gaussian" and functional._gaussian_backward_compiled():
            path += " (fwd), compiled CPU pass (bwd)"
        row(kernel, path, lambda: kernel_attention(q, k, v, kernel, bandwidth=h),
            lambda: kernel_attention(*grads, kernel, bandwidth=h).sum().backward())
    for name, walk in (("iid tokens", False), ("random-walk tokens", True)):
        qs, ks, vs = q, k, v
        if walk:  # tokens along a path: neighbours in the sequence are neighbours in space
            ks = torch.cumsum(k, -2) / 8
            qs = ks + 0.5 * q
        h = _support_bandwidth(qs, ks, 0.05)
        g5 = [t.clone().requires_grad_(True) for t in (qs, ks, vs)]
        row(f"epanechnikov, ~5% of keys ({name}, h={h:.1f})", "compiled CPU pass",
            lambda: kernel_attention(qs, ks, vs, "epanechnikov", bandwidth=h),
            lambda: kernel_attention(*g5, "epanechnikov", bandwidth=h).sum().backward(), (qs, ks, vs))
    ql, kl, vl = (t[..., :16].contiguous() for t in (q, k, v))
    gl = [t.clone().requires_grad_(True) for t in (ql, kl, vl)]
    grads[:] = [t.clone().requires_grad_(True) for t in (ql, kl, vl)]
    row("local-linear (d=16; SDPA at d=16)", "compiled CPU pass (fwd), streamed (bwd)",
        lambda: local_linear_attention(ql, kl, vl),
        lambda: local_linear_attention(*gl).sum().backward(), (ql, kl, vl))
    head = [f"Every kernel against SDPA, CPU, float32, B={B}, H={H}, L={L}, d={d}, {torch.get_num_threads()} "
            f"thread(s), medians of {repeat} interleaved repeats (time ratio: localkit / SDPA, bars: forward <= 2x, "
            "forward+backward <= 3x, softmax and Gaussian <= 1.11x, local linear <= 4x). Compact profiles: "
            "bandwidth 1.2 sqrt(2d) (every key in the support) unless stated.", ""]
    return "\n".join(head + rows)

def _window_row(L, d, repeat):
    q, k, v = _qkv(1, 1, L, d)
    with torch.no_grad():
        full = lambda: F.scaled_dot_product_attention(q, k, v)
        window = lambda: kernel_attention(q, k, v, window=64)
        (t_full, t_window), _ = interleaved([full, window], repeat, warmup=True)
    return (f"Window of 64 (softmax kernel, `window=64`) against full softmax attention (SDPA), B=1, H=1, "
            f"L={L}, d={d}, float32, medians of {repeat} interleaved repeats: full {t_full * 1e3:.0f} ms, "
            f"window {t_window * 1e3:.0f} ms, **{t_full / t_window:.1f}x cheaper** (bar: >= 5x).")


_MEMORY_PROBE = """
import sys, torch
from localkit.nn import kernel_attention, local_linear_attention

def status(field):  # kB, from the kernel's own accounting of this process
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))

kernel, L, d, window, backward = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
q, k, v = (torch.randn(1, 1, L, d, requires_grad=backward == "1") for _ in range(3))
opts = {"window": window} if window else {}
attend = local_linear_attention if kernel == "local-linear" else lambda *a, **o: kernel_attention(*a, kernel, **o)
call = lambda n: attend(q[..., :n, :], k[..., :n, :], v[..., :n, :], **opts).sum()
with torch.set_grad_enabled(backward == "1"):
    call(512).backward() if backward == "1" else call(512)  # warm-up
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current size
    base = status("VmRSS:")
    call(L).backward() if backward == "1" else call(L)
print((status("VmHWM:") - base) / 1024)
"""


def _memory_rows(L, d):
    """Peak resident memory growth of one call, each in a fresh process whose peak (VmHWM) is reset
    just before the call (``ru_maxrss`` would include the parent's peak, inherited over exec)."""
    rows = [f"Memory of one call, B=1, H=1, L={L}, d={d}, float32: growth of the peak resident set of a fresh "
            f"process over the call (Linux VmHWM, reset before the call; a dense (L, S) float32 matrix alone would be {L * L * 4 / 2 ** 20:.0f} MiB; "
            "bar: < 200 MiB).", "", "| call | path | peak memory growth |", "|---|---|---|"]
    for kernel, window, backward, path in (
            ("laplacian", 0, 0, "compiled CPU pass"), ("epanechnikov", 0, 0, "compiled CPU pass"),
            ("softmax", 64, 0, "banded key view"), ("laplacian", 0, 1, "compiled CPU pass, flash-style backward"),
            ("softmax", 64, 1, "banded, checkpointed chunks"), ("local-linear", 0, 0, "compiled CPU pass")):
        out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, kernel, str(L), str(d), str(window), str(backward)],
                             capture_output=True, text=True, check=True).stdout
        name = f"{kernel}" + (f", window={window}" if window else "") + (", forward + backward" if backward else "")
        rows.append(f"| {name} | {path} | {float(out.strip().splitlines()[-1]):.0f} MiB |")
    return "\n".join(rows)


def _gpu_table(emit=None, n_passes=3):
    """bfloat16 on CUDA, every kernel, forward and forward+backward, time and peak memory vs SDPA;
    ``emit`` (optional) receives each row as soon as it is measured; ``n_passes`` runs the first
    passes only. The passes run in order of
    interest (each FlexAttention kernel compiles once per shape, ~10-30 s): the core kernels at
    both shapes and the window first, the other compact profiles last."""
    if not torch.cuda.is_available():
        return ("GPU table: skipped, no CUDA device in this run (the table times every kernel in bfloat16, "
                "forward and forward+backward, at B=4 H=8 L=4096 d=64 and B=1 H=8 L=16384, next to SDPA; the last "
                "GPU run's table is in the section gpu_h200).")
    core = ("softmax", "gaussian", "laplacian", "epanechnikov")
    passes = [((4, 8, 4096, 64), core), ((1, 8, 16384, 64), ("window=256",) + core),
              ((4, 8, 4096, 64), tuple(k for k in GPU_KERNELS if k not in core))]
    rows = ["| shape | kernel | fwd | fwd vs SDPA | fwd+bwd | fwd+bwd vs SDPA | peak memory | memory vs SDPA |",
            "|---|---|---|---|---|---|---|---|"]
    for (B, H, L, d), kernels in passes[:n_passes]:
        q, k, v = _qkv(B, H, L, d, "cuda", torch.bfloat16, grad=True)
        cases = [("SDPA", lambda: F.scaled_dot_product_attention(q, k, v))]
        cases += [(name, (lambda: kernel_attention(q, k, v, window=256)) if name == "window=256" else
                   (lambda name=name: kernel_attention(q, k, v, name))) for name in kernels]
        base = None
        for name, f in cases:
            fwd_bwd = lambda f=f: f().sum().backward()
            t_fwd, t_both = _gpu_time(f), _gpu_time(fwd_bwd)
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            fwd_bwd()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            base = base or (t_fwd, t_both, peak)
            rows.append(f"| B={B} H={H} L={L} | {name} | {t_fwd * 1e3:.2f} ms | {t_fwd / base[0]:.2f}x | "
                        f"{t_both * 1e3:.2f} ms | {t_both / base[1]:.2f}x | {peak / 2 ** 20:.0f} MiB | "
                        f"{peak / base[2]:.2f}x |")
            if emit is not None:
                emit(rows[-1])
    return (f"GPU ({torch.cuda.get_device_name()}), torch {torch.__version__}, bfloat16; time per call: calls "
            "launched back to back, CUDA events, median of 5 groups of 10 after 3 warm-ups.\n\n" + "\n".join(rows))


def _gpu_time(f, groups=5, calls=10):
    """Seconds per call of ``f`` on the GPU: calls launched back to back (as in training, where the
    host runs ahead; a host synchronisation inside ``f`` shows as lost overlap), timed by CUDA
    events; the median over ``groups``."""
    for _ in range(3):
        f()
    times = []
    for _ in range(groups):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return float(sorted(times)[groups // 2])


def _lm_section(figure):
    runs = {k: json.loads((HERE / "lm_runs" / f"{k}.json").read_text())
            for k in LM_KERNELS if (HERE / "lm_runs" / f"{k}.json").exists()}
    if not runs:
        return "No language-model logs in benchmarks/lm_runs/ (run `localkit train-lm ... --log`)."
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    any_run = next(iter(runs.values()))
    for ax, key, label in zip(axes, ("seconds", "step"), ("training time (s)", "optimisation step")):
        for kernel, r in runs.items():
            ax.plot([p[key] for p in r["curve"]], [p["val_bpc"] for p in r["curve"]], marker=".", label=kernel)
        ax.axhline(any_run["unigram_entropy"], color="gray", ls="--", label="unigram entropy")
        ax.set(xlabel=label)
    axes[0].set(ylabel="held-out bits per character")
    axes[1].legend()
    fig.suptitle("char-level LM on the stdlib's source: three attention kernels, 5 minutes each")
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    plt.close(fig)
    # the machine's load changes during the runs, so also compare at a step that every run reached
    common = max(set.intersection(*({p["step"] for p in r["curve"]} for r in runs.values())))
    c = any_run["config"]
    lines = [f"Character-level LM (`python -m localkit.nn.train_lm --kernel <kernel> --steps 3000 --max-minutes 5 "
             f"--eval-every 50 --log benchmarks/lm_runs/<kernel>.json`, the code of `localkit train-lm`): {c['layers']} layers, d_model {c['d_model']}, "
             f"{c['heads']} heads, context {c['context']}, batch {c['batch_size']}, {any_run['parameters']:,} "
             f"parameters; 5-minute budget each, one after the other, on the 2-core machine shared with other "
             f"jobs whose load changed during the runs (hence the steps column and the comparison at a common "
             f"step). Curves: `{figure.name}`.", "",
             f"| kernel | steps in budget | seconds | val bits/char | unigram entropy | better by | "
             f"val bits/char at step {common} |", "|---|---|---|---|---|---|---|"]
    for kernel, r in runs.items():
        at_common = next(p["val_bpc"] for p in r["curve"] if p["step"] == common)
        lines.append(f"| {kernel} | {r['steps']} | {r['seconds']:.0f} | {r['val_bpc']:.3f} | "
                     f"{r['unigram_entropy']:.3f} | {r['unigram_entropy'] - r['val_bpc']:.3f} bits | {at_common:.3f} |")
    return "\n".join(lines)


def run(quick=False):
    # one thread: on the shared 2-core machine (load ~10), two threads per op mostly wait on each
    # other, which penalises many small ops (the streamed paths) far more than SDPA's single call
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(quick)
    finally:
        torch.set_num_threads(threads)


def _run(quick):
    parts = [_every_kernel_table(*((1, 2, 512, 64) if quick else (1, 8, 4096, 64)), repeat=3),
             _cpu_ratio_table(*((2, 4, 256, 64) if quick else (1, 8, 4096, 64)), repeat=3 if quick else 15),
             _window_row(2048 if quick else 16384, 32, 3 if quick else 5),
             _memory_rows(2048 if quick else 16384, 32), _gpu_table()]
    if not quick:
        parts.append(_lm_section(HERE / "lm_curves.png"))
    return "\n\n".join(parts) + (f"\n\nThe 2-core machine is shared with other jobs (load average "
                                  f"{os.getloadavg()[0]:.1f} at the end): timings are indicative, repeated ratios "
                                  "moved by a few percent; every ratio comes from runs interleaved in one process.")
