"""Attention as a local mean against PyTorch's fused ``scaled_dot_product_attention`` (CPU), and
the language-model curves of ``localkit train-lm`` for three kernels (read from the JSON logs in
``benchmarks/lm_runs/``; the runs themselves take ~5 minutes each and are not repeated here)."""
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from localkit.nn import kernel_attention, local_linear_attention

TITLE = "Attention kernels vs torch scaled_dot_product_attention; LM curves of three kernels"
HERE = Path(__file__).resolve().parent
LM_KERNELS = ("softmax", "gaussian", "local-linear")


def _interleaved(funcs, repeat):
    """Median seconds of each function, the functions alternating within each repeat (a shared
    machine's load then falls on all of them alike)."""
    for f in funcs:
        f()  # warm-up
    times = [[] for _ in funcs]
    for _ in range(repeat):
        for i, f in enumerate(funcs):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] for t in times]


def _reference(q, k, v, kernel, h):
    """The local mean in float64 from the kernel's formula (dense weights)."""
    q, k, v = q.double(), k.double(), v.double()
    if kernel == "softmax":
        logits = q @ k.transpose(-2, -1) / h
    else:
        dist = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist")
        logits = -dist ** 2 / (2 * h * h) if kernel == "gaussian" else -dist / h
    return torch.softmax(logits, dim=-1) @ v


def _attention_table(B, H, L, d, repeat):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, d, generator=g) for _ in range(3))
    rows = []
    with torch.no_grad():
        for kernel, path in (("softmax", "fused SDPA"), ("gaussian", "fused SDPA + key bias"),
                             ("laplacian", "dense weights")):
            peer = lambda: F.scaled_dot_product_attention(q, k, v)
            ours = lambda kernel=kernel: kernel_attention(q, k, v, kernel)
            t_peer, t_ours = _interleaved([peer, ours], repeat)
            h = math.sqrt(d) if kernel == "softmax" else d ** 0.25
            diff = (ours().double() - _reference(q, k, v, kernel, h)).abs().max().item()
            rows.append((kernel, path, t_peer, t_ours, diff))
        # local linear attention costs O(L^2 d^2): a smaller head dimension
        ql, kl, vl = (t[..., :16].contiguous() for t in (q, k, v))
        peer = lambda: F.scaled_dot_product_attention(ql, kl, vl)
        ours = lambda: local_linear_attention(ql, kl, vl)
        t_peer, t_ours = _interleaved([peer, ours], max(3, repeat // 2))
        rows.append(("local-linear (d=16)", "weights + moments + solve", t_peer, t_ours, float("nan")))
    lines = [f"Attention forward, float32, B={B}, H={H}, L={L}, d={d}, {torch.get_num_threads()} threads; "
             f"medians of {repeat} interleaved repeats. max |diff|: against the kernel's formula in float64.",
             "", "| kernel | localkit path | SDPA (softmax) | localkit | ratio | max abs diff |",
             "|---|---|---|---|---|---|"]
    for kernel, path, t_peer, t_ours, diff in rows:
        diff_s = "-" if math.isnan(diff) else f"{diff:.1e}"
        lines.append(f"| {kernel} | {path} | {t_peer * 1e3:.1f} ms | {t_ours * 1e3:.1f} ms | "
                     f"{t_ours / t_peer:.2f}x | {diff_s} |")
    return "\n".join(lines)


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
    B, H, L, d = (4, 8, 256, 64) if quick else (4, 8, 1024, 64)
    text = _attention_table(B, H, L, d, repeat=3 if quick else 9)
    if not quick:
        text += "\n\n" + _lm_section(HERE / "lm_curves.png")
    return text + ("\n\nThe machine is shared with other jobs: timings are indicative; the ratios come from "
                   "interleaved runs in one process.")
