"""Attention as a local mean: multi-head attention and the Transformer layer against PyTorch (on
digit images read as sequences of pixel rows), distance kernels against the engine's local mean,
local linear attention against weighted least squares (iris), a tiny language model on the stdlib's
source, and the attention weights seen as localization kernels."""
import numpy as np

from ._core import Row

ORDER = 60
TITLE = "Attention and the Transformer as local models (localkit.nn vs PyTorch)"
TOL32 = 1e-5   # float32 agreement with PyTorch's modules
TOL64 = 1e-8   # float64 agreement with the engine and the least-squares solution


def run(ctx):
    import torch

    torch.manual_seed(0)
    rows = [_attention_row(ctx), _layer_row(ctx), _engine_row(ctx), _local_linear_row(ctx)]
    lm_row, model, snippet = _lm_row(ctx)
    rows.append(lm_row)
    _kernel_figure(ctx, model, snippet)
    return rows


def _digit_sequences():
    """The digits as sequences of 8 tokens (pixel rows), 8 features each, float32."""
    import torch
    from sklearn.datasets import load_digits

    return torch.tensor(load_digits().images / 16.0, dtype=torch.float32)


def _attention_row(ctx):
    import torch

    from ..nn import LocalMeanAttention

    x = _digit_sequences()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = LocalMeanAttention.from_torch(mha)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(8)
    with torch.no_grad():
        ref, t_ref = ctx.timed(lambda: mha(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)[0],
                               repeat=5)
        out, t = ctx.timed(lambda: ours(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)[0], repeat=5)
    return Row("self-attention (softmax kernel, causal), digits 1797x8 tokens", f"mean abs output {out.abs().mean():.4f}",
               f"nn.MultiheadAttention {ref.abs().mean():.4f}", (out - ref).abs().max().item(), t, t_ref, TOL32)


def _layer_row(ctx):
    import torch

    from ..nn import LocalTransformerLayer

    x = _digit_sequences()
    causal = torch.nn.Transformer.generate_square_subsequent_mask(8)
    diff, t, t_ref = 0.0, 0.0, 0.0
    with torch.no_grad():
        for norm_first in (False, True):
            ref_layer = torch.nn.TransformerEncoderLayer(8, 2, 32, dropout=0.0, batch_first=True,
                                                         norm_first=norm_first).eval()
            ours = LocalTransformerLayer.from_torch(ref_layer).eval()
            for is_causal in (False, True):
                mask = causal if is_causal else None
                ref, tr = ctx.timed(lambda: ref_layer(x, src_mask=mask, is_causal=is_causal), repeat=3)
                out, to = ctx.timed(lambda: ours(x, src_mask=mask, is_causal=is_causal), repeat=3)
                diff, t, t_ref = max(diff, (out - ref).abs().max().item()), t + to, t_ref + tr
    return Row("Transformer layer (post- and pre-norm, with/without causal)", "4 settings",
               "nn.TransformerEncoderLayer", diff, t, t_ref, TOL32)


def _engine_row(ctx):
    import torch
    from sklearn.datasets import load_iris

    from ..engine import local_mean
    from ..nn import kernel_attention

    X, y = load_iris(return_X_y=True)
    V = np.c_[y, X[:, 0]]
    diff, t, t_ref = 0.0, 0.0, 0.0
    for kernel, h in (("gaussian", 0.5), ("laplacian", 0.5), ("epanechnikov", 2.0)):
        ref, tr = ctx.timed(lambda: local_mean(X, X, V, kernel=kernel, bandwidth=h))
        out, to = ctx.timed(lambda: kernel_attention(torch.tensor(X), torch.tensor(X), torch.tensor(V), kernel,
                                                     bandwidth=h).numpy())
        diff, t, t_ref = max(diff, np.abs(out - ref).max()), t + to, t_ref + tr
    return Row("attention with Gaussian/Laplacian/Epanechnikov kernels, iris", "kernel_attention (float64)",
               "localkit engine local_mean", diff, t, t_ref, TOL64)


def _local_linear_row(ctx):
    import torch
    from sklearn.datasets import load_iris

    from ..nn import attention_weights, local_linear_attention

    X, y = load_iris(return_X_y=True)
    V, ridge, h = np.c_[y, X[:, 3]], 1e-2, 1.0
    Xt = torch.tensor(X)

    def wls():  # per query: least squares on [1, x_j - x_i] with sqrt(w) rows, ridge rows on B
        w = attention_weights(Xt, Xt, "gaussian", bandwidth=h).numpy()
        out = np.empty_like(V)
        for i in range(len(X)):
            A = np.r_[np.c_[np.ones(len(X)), X - X[i]] * np.sqrt(w[i])[:, None],
                      np.c_[np.zeros((4, 1)), np.sqrt(ridge) * np.eye(4)]]
            b = np.r_[V * np.sqrt(w[i])[:, None], np.zeros((4, 2))]
            out[i] = np.linalg.lstsq(A, b, rcond=None)[0][0]
        return out

    ref, t_ref = ctx.timed(wls)
    out, t = ctx.timed(lambda: local_linear_attention(Xt, Xt, torch.tensor(V), "gaussian", ridge=ridge,
                                                      bandwidth=h).numpy())
    return Row("local linear attention (Gaussian weights), iris", "closed form, batched",
               "per-query weighted least squares (lstsq)", np.abs(out - ref).max(), t, t_ref, TOL64)


def _lm_row(ctx):
    """A tiny run of `localkit train-lm` (seconds, not minutes): held-out bits/char vs the unigram entropy."""
    from ..nn import train_lm

    args = train_lm._parse(["--steps", "100", "--max-files", "40", "--context", "32", "--d-model", "32",
                            "--heads", "2", "--layers", "1", "--batch-size", "32", "--eval-every", "25",
                            "--eval-windows", "32", "--lr", "1e-2"])
    # the longest row (a minute or two on 2 cores): it says what it does, its progress bar runs on stderr
    ctx.echo("   training a tiny character-level language model (100 steps)")
    (result, model), t = ctx.timed(lambda: train_lm.train(args, echo=lambda line: ctx.echo(f"     {line}")))
    row = Row("char-level LM, stdlib source (tiny: 100 steps)", f"val_bpc={result['val_bpc']:.3f}",
              f"unigram entropy {result['unigram_entropy']:.3f} bits/char",
              result["unigram_entropy"] - result["val_bpc"], t, float("nan"))
    return row, model, _snippet(args.max_files, 32)


def _snippet(max_files, length):
    """The first held-out line that starts with ``def`` (a window of ``length`` characters)."""
    import torch

    from ..nn.data import stdlib_corpus

    val = stdlib_corpus(max_files=max_files).val
    start = bytes(val).index(b"\ndef ") + 1
    return torch.tensor(val[start:start + length].astype(np.int64))


def _kernel_figure(ctx, model, snippet):
    """Layer-1 attention weights of the tiny LM on a line of Python, under four kernels."""
    import matplotlib.pyplot as plt
    import torch

    from ..nn import attention_weights

    attn = model.layers[0].self_attn
    with torch.no_grad():
        x = model.layers[0].norm1(model.token(snippet[None]) + model.position(torch.arange(len(snippet))))
        q, k = attn._heads(x, 0)[0, 0], attn._heads(x, 1)[0, 0]
    # the compact kernel's bandwidth: the median distance between this head's queries and keys
    h_compact = round(float(torch.cdist(q, k).median()), 2)
    kernels = [("softmax", None), ("gaussian", None), ("laplacian", None), ("epanechnikov", h_compact)]
    fig, axes = plt.subplots(2, 4, figsize=(13, 6))
    text = bytes(snippet.tolist()).decode()
    for col, (kernel, h) in enumerate(kernels):
        w = attention_weights(q, k, kernel, bandwidth=h, causal=True).numpy()
        axes[0, col].imshow(w, cmap="viridis")
        axes[0, col].set_title(f"{kernel} kernel" + (f", h={h}" if h else ""))
        axes[0, col].set_xlabel("key position j")
        axes[1, col].bar(np.arange(len(text)), w[-1])
        axes[1, col].set_xticks(np.arange(len(text)), list(text), fontsize=6)
        axes[1, col].set_title(f"weights of the last query (sum = {w[-1].sum():.2f})", fontsize=9)
    axes[0, 0].set_ylabel("query position i")
    fig.suptitle("attention weights as localization kernels: one head's q, k under four kernels (causal)")
    fig.tight_layout()
    fig.savefig(ctx.figure_path("attention_kernels"), dpi=100)
    plt.close(fig)
