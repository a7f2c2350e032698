"""``localkit train-lm``: a character-level language model on the standard library's source.

A :class:`~localkit.nn.LocalTransformer` learns to predict the next character of Python source
(:mod:`localkit.nn.data`: a sorted, documented selection of the stdlib's files, held-out files for
validation) or of the user's own text (``--data FILE_OR_FOLDER``). The attention's localization
kernel is the choice under test: ``softmax``, ``gaussian``, ``laplacian``, ``epanechnikov``, or
``local-linear`` (a local linear model with softmax weights in place of the local mean). Prints
validation bits per character as it goes, and ends with ``val_bpc=<float>``.

Runs on ``--device`` (CUDA when available), in ``--dtype`` (bfloat16 autocast by default on a
GPU), optionally ``--compile``-d. ``--checkpoint PATH`` saves the model, optimiser, step, curve
and random states at every evaluation, at the end and on Ctrl-C; ``--resume`` continues from it
(same step count, same batches as an uninterrupted run). Options and output paths are checked
before training starts.

    localkit train-lm --kernel softmax --steps 3000 --max-minutes 5
    localkit train-lm --data my_texts/ --device cuda --checkpoint run.pt --resume
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .._files import write_atomically
from .._progress import progress as progress_bar
from .._validation import option_number
from .data import VOCAB_SIZE, stdlib_corpus, text_corpus
from .transformer import LocalTransformer

#: command-line kernel -> (attention kernel, local model over tokens)
KERNELS = {"softmax": ("softmax", "mean"), "gaussian": ("gaussian", "mean"), "laplacian": ("laplacian", "mean"),
           "epanechnikov": ("epanechnikov", "mean"), "local-linear": ("softmax", "linear")}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: settings that fix the model and the data: a checkpoint resumes only with the same ones
#: the fewest files --max-files may keep: every 10th file is held out (nn.data.stdlib_corpus's val_every)
MIN_FILES = 10
MODEL_SETTINGS = ("kernel", "context", "d_model", "heads", "layers", "ridge", "data", "max_files", "batch_size")
#: the devices a run trains on ("meta" holds no data; others have no autocast or optimiser here)
DEVICES = ("cpu", "cuda", "mps")
#: the largest --lr: AdamW's step moves each weight by about lr, so a larger one diverges at once
MAX_LR = 1.0


def add_arguments(parser):
    parser.add_argument("--kernel", choices=sorted(KERNELS), default="softmax", help="attention kernel (default: softmax)")
    positive, count = option_number(float), option_number(int)
    parser.add_argument("--steps", type=count, default=600, help="optimisation steps (default: 600)")
    parser.add_argument("--max-minutes", type=positive, default=None,
                        help="time budget: stop early when spent (the learning-rate schedule follows it)")
    parser.add_argument("--batch-size", type=count, default=32, help="windows of text per optimisation step")
    parser.add_argument("--context", type=count, default=64, help="characters of context (default: 64)")
    parser.add_argument("--d-model", type=count, default=64, help="width of the token vectors (a multiple of --heads)")
    parser.add_argument("--heads", type=count, default=4, help="attention heads per layer")
    parser.add_argument("--layers", type=count, default=3, help="Transformer layers")
    parser.add_argument("--ridge", type=positive, default=0.1,
                        help="ridge of the local linear model (--kernel local-linear; default: 0.1)")
    parser.add_argument("--lr", type=positive, default=3e-3, help="peak learning rate of AdamW (default: 3e-3)")
    parser.add_argument("--eval-every", type=count, default=100, help="steps between validation estimates")
    parser.add_argument("--eval-windows", type=count, default=128, help="held-out windows per estimate (fixed)")
    parser.add_argument("--max-files", type=count, default=None,
                        help=f"use only the first N files of the stdlib's source, at least {MIN_FILES} (quick runs; "
                             "default: all)")
    parser.add_argument("--seed", type=option_number(int, allow_zero=True), default=0,
                        help="seed of the model's initialisation and of the batches")
    parser.add_argument("--threads", type=count, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--log", default=None, help="write the curve and final figures to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--data", default=None,
                        help="train on this UTF-8 text file or folder instead of the stdlib's source")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="autocast precision (default: bfloat16 on a GPU, float32 on the CPU)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--checkpoint", default=None,
                        help="save training state here (at every evaluation, at the end, on Ctrl-C)")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.set_defaults(error=parser.error)  # usage errors from main(), argparse-style


def _error(args, message):
    """An argparse-style usage error (exit status 2), before any training."""
    error = getattr(args, "error", None)
    if error is None:
        sys.exit(f"localkit train-lm: error: {message}")
    error(message)


def _writable(path):
    """Why ``path`` cannot be written (None if it can): a folder, a missing or read-only parent."""
    path = Path(path)
    if path.is_dir():
        return "is a folder"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"its folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "is not writable"
    return None


def _log_refused(path):
    """Why the ``--log`` file refuses to be written (None if it takes a line), found by writing
    one (the final write truncates it): ``/dev/full`` and files under ``/proc`` open, and pass
    ``os.access`` for root, but refuse writes (ENOSPC, EINVAL). A file made for the test is removed."""
    made = not os.path.lexists(path)
    try:
        with open(path, "a") as f:
            f.write("\n")
            f.flush()
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        if made and os.path.exists(path):
            os.unlink(path)
    return None


def _check(args):
    """Every option and path, before the corpus is read or a model built."""
    # numbers are checked by their argparse types (option_number)
    if args.max_files is not None and args.data is None and args.max_files < MIN_FILES:
        _error(args, f"--max-files {args.max_files}: at least {MIN_FILES} files are needed (every {MIN_FILES}th "
                     "file is held out for validation)")
    if args.max_files is not None and args.data is not None:
        _error(args, "--max-files selects files of the stdlib's source; it does not apply with --data")
    if args.d_model % args.heads:
        _error(args, f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    for option in ("log", "checkpoint"):
        path = getattr(args, option)
        why = None if path is None else _writable(path)
        if why:
            _error(args, f"--{option} {path}: {why}")
    if args.checkpoint and os.path.exists(args.checkpoint) and not os.path.isfile(args.checkpoint):
        _error(args, f"--checkpoint {args.checkpoint}: is not a regular file (it is replaced at every save)")
    why = None if args.log is None else _log_refused(args.log)
    if why:
        _error(args, f"--log {args.log}: cannot be written ({why})")
    if args.resume and not (args.checkpoint and Path(args.checkpoint).is_file()):
        _error(args, f"--resume needs an existing --checkpoint file, got {args.checkpoint!r}")
    if args.data is not None and not Path(args.data).exists():
        _error(args, f"--data {args.data}: no such file or folder")
    if args.lr > MAX_LR:
        _error(args, f"--lr {args.lr:g}: AdamW moves every weight by about --lr a step, so training diverges "
                     f"above {MAX_LR:g} (the default is 3e-3)")
    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        _error(args, f"--device {args.device}: {exc}")
    if device.type not in DEVICES:
        _error(args, f"--device {args.device}: train-lm trains on {', '.join(DEVICES[:-1])} or {DEVICES[-1]} ({device.type!r} devices "
                     "hold no data to compute with, or cannot train here)")
    if device.type == "cuda" and not torch.cuda.is_available():
        _error(args, f"--device {args.device}: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        _error(args, f"--device {args.device}: MPS is not available on this machine")
    (model, batch), have = _memory_needed(args), _memory_of(device)
    if have is not None and model + batch > have:
        lead, rest = ((f"--d-model {args.d_model} with --layers {args.layers}", "the weights, their gradients and "
                       "AdamW's moments") if model >= batch else
                      (f"--batch-size {args.batch_size} with --context {args.context}", "one activation per layer "
                       f"and the logits of {args.batch_size * args.context:,} positions"))
        _error(args, f"{lead} need at least {(model + batch) / 2**30:,.1f} GiB ({rest}), more than the "
                     f"{have / 2**30:,.1f} GiB of {device.type}: make them smaller")
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    return device, DTYPES[dtype]


def _memory_needed(args):
    """Lower bounds on the bytes a training step holds, in float32, ``(model, batch)``: the weights
    (``12 d^2`` a layer and the embeddings), their gradients and AdamW's two moments; a batch's
    token windows (int64), one activation per layer and the logits of every position."""
    d, tokens = args.d_model, args.batch_size * args.context
    weights = args.layers * 12 * d * d + 2 * VOCAB_SIZE * d + args.context * d
    return 16 * weights, 16 * args.batch_size * (args.context + 1) + 4 * tokens * (args.layers * d + VOCAB_SIZE)


def _memory_of(device):
    """The memory of ``device`` in bytes (the machine's RAM for the CPU), or None where unknown."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        if device.type == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, RuntimeError, AttributeError):
        pass
    return None


def _windows(data, starts, context, device="cpu"):
    idx = starts[:, None] + np.arange(context + 1)
    chunk = torch.from_numpy(data[idx].astype(np.int64)).to(device)
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def evaluate(model, data, starts, context, batch_size=64, device="cpu", dtype=torch.float32):
    """Mean bits per character over fixed held-out windows (every position of each window)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        x, y = _windows(data, starts[i:i + batch_size], context, device)
        with _autocast(device, dtype):
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count / math.log(2)


def _autocast(device, dtype):
    return torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype != torch.float32)


def _progress(step, steps, loss, tokens_per_s, elapsed, bar):
    """Advance the run's bar (the library's one progress facility) to ``step`` of ``steps``."""
    bar.set_postfix_str(f"loss {loss:.3f} nats, {tokens_per_s:,.0f} tokens/s, {elapsed:.0f} s", refresh=False)
    bar.update(step - bar.n)


def _settings(args):
    return {name: getattr(args, name) for name in MODEL_SETTINGS}


def _save(path, state):
    """Write ``state`` to ``path`` atomically (a crash mid-write leaves the last checkpoint intact,
    and runs sharing ``--checkpoint`` do not race on one temporary file)."""
    write_atomically(path, lambda f: torch.save(state, f), binary=True)


def _load_checkpoint(args):
    try:
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated or foreign file
        _error(args, f"--checkpoint {args.checkpoint}: not a train-lm checkpoint ({exc})")
    if not isinstance(state, dict) or state.get("settings") != _settings(args):
        found = state.get("settings") if isinstance(state, dict) else None
        found = found if isinstance(found, dict) else {}
        other = [f"--{name.replace('_', '-')} {found.get(name)} (not {value})"
                 for name, value in _settings(args).items() if found.get(name) != value]
        _error(args, f"--resume: the checkpoint was made with other options: {', '.join(other)}")
    return state


class Diverged(ArithmeticError):
    """The training loss is not finite (a learning rate too large for the model)."""


def _out_of_memory(exc):
    """True for the errors of an allocation that failed (NumPy's, torch's on the CPU and on a GPU)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training, after the checkpoint was saved: ``result`` is what :func:`train`
    returns, for the steps done (``val_bpc``: the last estimate, or None)."""

    def __init__(self, result):
        super().__init__()
        self.result = result


def train(args, echo=print, device=torch.device("cpu"), dtype=torch.float32):
    """Train; return ``({"curve": [...], "val_bpc": ..., ...}, model)``."""
    state = _load_checkpoint(args) if args.resume else None
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        corpus = text_corpus(args.data) if args.data else stdlib_corpus(max_files=args.max_files)
    except (ValueError, OSError) as exc:  # not text, an empty folder, too few files
        _error(args, f"{'--data ' + args.data if args.data else 'corpus'}: {exc}")
    if min(len(corpus.train), len(corpus.val)) <= args.context + 1:
        _error(args, f"the corpus is shorter than --context {args.context}")
    entropy, unigram_val = corpus.unigram_bits()
    kernel, local_model = KERNELS[args.kernel]
    options = {"ridge": args.ridge} if local_model == "linear" else {}
    model = LocalTransformer(corpus.vocab_size, args.context, args.d_model, args.heads, args.layers,
                             kernel=kernel, local_model=local_model, device=device, **options)
    n_params = sum(p.numel() for p in model.parameters())
    echo(f"corpus: {corpus.source}, {len(corpus.train_files)} train files ({len(corpus.train):,} chars), "
         f"{len(corpus.val_files)} held-out files ({len(corpus.val):,} chars)")
    echo(f"unigram entropy {entropy:.3f} bits/char (held-out unigram cross-entropy {unigram_val:.3f})")
    echo(f"model: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, kernel {args.kernel}, "
         f"{n_params:,} parameters; device {device}, {str(dtype).replace('torch.', '')}")
    rng = np.random.default_rng(args.seed)
    eval_starts = np.random.default_rng(12345).integers(0, len(corpus.val) - args.context - 1, args.eval_windows)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.1)
    curve, step, spent = [], 0, 0.0
    if state is not None:  # everything that decides the next batch and update
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
        curve, step, spent = state["curve"], state["step"], state["seconds"]
        echo(f"resumed from {args.checkpoint} at step {step}")
    net = torch.compile(model) if args.compile else model
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16 and device.type == "cuda")

    def checkpoint():
        if args.checkpoint:
            _save(args.checkpoint, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                                    "curve": curve, "seconds": spent + time.perf_counter() - t0,
                                    "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                                    "settings": _settings(args)})

    def result(seconds, bpc):
        return {"kernel": args.kernel, "steps": step, "seconds": seconds, "val_bpc": bpc, "unigram_entropy": entropy,
                "unigram_val_bpc": unigram_val, "parameters": n_params, "curve": curve,
                "config": {k: v for k, v in vars(args).items() if k not in ("func", "command", "error")}}

    budget = None if args.max_minutes is None else 60.0 * args.max_minutes
    warmup = max(1, min(100, args.steps // 10))
    t0, first_step, show = time.perf_counter(), step, not args.no_progress
    bar = progress_bar(args.steps, "train-lm", verbose=show, unit="step")
    bar.update(step)  # a resumed run starts where it stopped
    try:
        while step < args.steps:
            elapsed = spent + time.perf_counter() - t0
            if budget is not None and elapsed >= budget:
                break
            # cosine schedule over the steps, or over the time budget if that runs out first
            progress = max(step / args.steps, elapsed / budget if budget else 0.0)
            cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
            lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * cosine)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = _windows(corpus.train, rng.integers(0, len(corpus.train) - args.context - 1, args.batch_size),
                            args.context, device)
            with _autocast(device, dtype):
                loss = F.cross_entropy(net(x).float().flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            step += 1
            run_time = time.perf_counter() - t0
            if not math.isfinite(loss.item()):
                raise Diverged(f"the training loss is {loss.item()} at step {step}: training diverged; lower --lr "
                               f"(now {args.lr:g})")
            _progress(step, args.steps, loss.item(), (step - first_step) * x.numel() / run_time, spent + run_time,
                      bar)
            if step % args.eval_every == 0 and step < args.steps:
                bpc = evaluate(net, corpus.val, eval_starts, args.context, device=device, dtype=dtype)
                curve.append({"step": step, "seconds": spent + time.perf_counter() - t0, "val_bpc": bpc})
                bar.clear()
                echo(f"step {step}: val {bpc:.3f} bits/char")
                bar.refresh()
                checkpoint()
    except KeyboardInterrupt:
        bar.close()
        checkpoint()
        echo(f"interrupted at step {step}" + (f"; resume with --checkpoint {args.checkpoint} --resume"
                                              if args.checkpoint else ""))
        raise Interrupted(result(spent + time.perf_counter() - t0, curve[-1]["val_bpc"] if curve else None)) from None
    seconds = spent + time.perf_counter() - t0
    bpc = evaluate(net, corpus.val, eval_starts, args.context, device=device, dtype=dtype)
    curve.append({"step": step, "seconds": seconds, "val_bpc": bpc})
    checkpoint()
    bar.close()
    echo(f"step {step}: val {bpc:.3f} bits/char after {seconds:.0f} s (unigram entropy {entropy:.3f}: "
         f"{against_unigram(bpc, entropy)})")
    return result(seconds, bpc), model


def against_unigram(bpc, entropy):
    """How the model's bits per character compare with the unigram entropy, in words: ``"0.412
    bits better"``, ``"2.410 bits worse"`` or ``"no better"`` (a model worse than the unigram
    frequencies is said to be, never "-2.410 bits better")."""
    gain = entropy - bpc
    if abs(gain) < 5e-4:  # below the printed precision
        return "no better than the unigram frequencies"
    return f"{abs(gain):.3f} bits {'better' if gain > 0 else 'worse'} than the unigram frequencies"


def _parse(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="localkit train-lm", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def _write_log(args, result):
    """Write ``--log`` (if given); False, with a one-line error, if the write failed (a full disk:
    the run's figures are printed all the same)."""
    if not args.log:
        return True
    try:
        with open(args.log, "w") as f:
            json.dump(result, f, indent=1)
    except OSError as exc:
        print(f"localkit train-lm: error: --log {args.log}: not written ({exc.strerror or exc})", file=sys.stderr)
        return False
    return True


def main(args):
    """Exit status: 0; 1 if the log could not be written, the training diverged (a loss that is not
    finite: lower ``--lr``) or memory could not be had (one line naming the options that size the
    run); 130 on Ctrl-C (checkpoint and the log of the steps done written, no traceback)."""
    device, dtype = _check(args)
    try:
        result, _ = train(args, device=device, dtype=dtype)
    except Interrupted as exc:
        _write_log(args, exc.result)
        return 130
    except KeyboardInterrupt:  # before the first step or during the final estimate
        print("localkit train-lm: interrupted", file=sys.stderr)
        return 130
    except Diverged as exc:
        print(f"localkit train-lm: error: {exc}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as exc:
        if not _out_of_memory(exc):
            raise
        print(f"localkit train-lm: error: out of memory on {device}: lower --batch-size ({args.batch_size}), "
              f"--d-model ({args.d_model}), --context ({args.context}) or --layers ({args.layers})", file=sys.stderr)
        return 1
    print(f"val_bpc={result['val_bpc']:.4f}")
    return 0 if _write_log(args, result) else 1


if __name__ == "__main__":
    sys.exit(main(_parse()))
