"""``localkit train-lm``: a character-level language model on the standard library's source.

A :class:`~localkit.nn.LocalTransformer` learns to predict the next character of Python source
(:mod:`localkit.nn.data`: a sorted, documented selection of the stdlib's files, held-out files for
validation). The attention's localization kernel is the choice under test: ``softmax``,
``gaussian``, or ``local-linear`` (a local linear model with softmax weights in place of the local
mean). Prints validation bits per character as it goes, and ends with ``val_bpc=<float>``.

    localkit train-lm --kernel softmax --steps 3000 --max-minutes 5
"""
from __future__ import annotations

import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from .data import VOCAB_SIZE, stdlib_corpus
from .transformer import LocalTransformer

#: command-line kernel -> (attention kernel, local model over tokens)
KERNELS = {"softmax": ("softmax", "mean"), "gaussian": ("gaussian", "mean"), "local-linear": ("softmax", "linear")}


def add_arguments(parser):
    parser.add_argument("--kernel", choices=sorted(KERNELS), default="softmax", help="attention kernel (default: softmax)")
    parser.add_argument("--steps", type=int, default=600, help="optimisation steps (default: 600)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="time budget: stop early when spent (the learning-rate schedule follows it)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=64, help="characters of context (default: 64)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--ridge", type=float, default=0.1,
                        help="ridge of the local linear model (--kernel local-linear; default: 0.1)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of AdamW (default: 3e-3)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between validation estimates")
    parser.add_argument("--eval-windows", type=int, default=128, help="held-out windows per estimate (fixed)")
    parser.add_argument("--max-files", type=int, default=None, help="use only the first N files (quick runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--log", default=None, help="write the curve and final figures to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check(args):
    for name in ("steps", "batch_size", "context", "d_model", "heads", "layers", "eval_every", "eval_windows"):
        if getattr(args, name) < 1:
            sys.exit(f"localkit train-lm: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.d_model % args.heads:
        sys.exit(f"localkit train-lm: --d-model {args.d_model} must be divisible by --heads {args.heads}")
    if not args.ridge > 0:
        sys.exit(f"localkit train-lm: --ridge must be > 0, got {args.ridge}")
    if args.max_minutes is not None and args.max_minutes <= 0:
        sys.exit(f"localkit train-lm: --max-minutes must be > 0, got {args.max_minutes}")


def _windows(data, starts, context):
    idx = starts[:, None] + np.arange(context + 1)
    chunk = torch.from_numpy(data[idx].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def evaluate(model, data, starts, context, batch_size=64):
    """Mean bits per character over fixed held-out windows (every position of each window)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        x, y = _windows(data, starts[i:i + batch_size], context)
        total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count / math.log(2)


def _progress(step, steps, loss, elapsed, enabled):
    if not enabled:
        return
    done = int(30 * step / steps)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {step}/{steps} loss {loss:.3f} nats  {elapsed:.0f} s")
    sys.stderr.flush()


def train(args, echo=print):
    """Train; return ``({"curve": [...], "val_bpc": ..., ...}, model)``."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = stdlib_corpus(max_files=args.max_files)
    if min(len(corpus.train), len(corpus.val)) <= args.context + 1:
        sys.exit(f"localkit train-lm: the corpus is shorter than --context {args.context}")
    entropy, unigram_val = corpus.unigram_bits()
    kernel, local_model = KERNELS[args.kernel]
    options = {"ridge": args.ridge} if local_model == "linear" else {}
    model = LocalTransformer(VOCAB_SIZE, args.context, args.d_model, args.heads, args.layers,
                             kernel=kernel, local_model=local_model, **options)
    n_params = sum(p.numel() for p in model.parameters())
    echo(f"corpus: stdlib source, {len(corpus.train_files)} train files ({len(corpus.train):,} chars), "
         f"{len(corpus.val_files)} held-out files ({len(corpus.val):,} chars)")
    echo(f"unigram entropy {entropy:.3f} bits/char (held-out unigram cross-entropy {unigram_val:.3f})")
    echo(f"model: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, kernel {args.kernel}, "
         f"{n_params:,} parameters")
    rng = np.random.default_rng(args.seed)
    eval_starts = np.random.default_rng(12345).integers(0, len(corpus.val) - args.context - 1, args.eval_windows)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.1)
    budget = None if args.max_minutes is None else 60.0 * args.max_minutes
    warmup = max(1, min(100, args.steps // 10))
    curve, t0, step, show = [], time.perf_counter(), 0, not args.no_progress
    while step < args.steps:
        elapsed = time.perf_counter() - t0
        if budget is not None and elapsed >= budget:
            break
        # cosine schedule over the steps, or over the time budget if that runs out first
        progress = max(step / args.steps, elapsed / budget if budget else 0.0)
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = _windows(corpus.train, rng.integers(0, len(corpus.train) - args.context - 1, args.batch_size),
                        args.context)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        _progress(step, args.steps, loss.item(), time.perf_counter() - t0, show)
        if step % args.eval_every == 0 and step < args.steps:
            bpc = evaluate(model, corpus.val, eval_starts, args.context)
            curve.append({"step": step, "seconds": time.perf_counter() - t0, "val_bpc": bpc})
            if show:
                sys.stderr.write("\n")
            echo(f"step {step}: val {bpc:.3f} bits/char")
    seconds = time.perf_counter() - t0
    bpc = evaluate(model, corpus.val, eval_starts, args.context)
    curve.append({"step": step, "seconds": seconds, "val_bpc": bpc})
    if show:
        sys.stderr.write("\n")
    echo(f"step {step}: val {bpc:.3f} bits/char after {seconds:.0f} s "
         f"(unigram entropy {entropy:.3f}, {entropy - bpc:+.3f} bits better)")
    return {"kernel": args.kernel, "steps": step, "seconds": seconds, "val_bpc": bpc, "unigram_entropy": entropy,
            "unigram_val_bpc": unigram_val, "parameters": n_params, "curve": curve,
            "config": {k: v for k, v in vars(args).items() if k not in ("func", "command")}}, model


def _parse(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="localkit train-lm", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def main(args):
    _check(args)
    result, _ = train(args)
    if args.log:
        with open(args.log, "w") as f:
            json.dump(result, f, indent=1)
    print(f"val_bpc={result['val_bpc']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(_parse()))
