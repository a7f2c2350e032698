"""Hierarchy and non-locality: the hierarchical autoencoder against the flat lazy autoencoder, PCA
and an MLP autoencoder; stacked local-mean layers against the single-level model; the non-local
block. The experiments are functions so that ``benchmarks/bench_hierarchical.py`` runs the same
ones at full size."""
import warnings

import numpy as np

from .._timing import median_time
from ._core import Row, iteration_budget

ORDER = 55
TITLE = "Hierarchy and non-locality: hierarchical autoencoder, local-mean layers, the non-local block"


def digits_split(n_train=None, n_test=None):
    """Digits scaled to [0, 1], split 75/25 (``random_state=0``), optionally cut to the first rows."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, labels = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X / 16.0, labels, test_size=0.25, random_state=0)
    return Xtr[:n_train], Xte[:n_test], ytr[:n_train], yte[:n_test]


def autoencoders(train, test, components=(16, 2), max_iter=200):
    """Held-out reconstruction error (mean over samples of the squared error summed over pixels)
    and fit time of each model with the same final dimension ``components[-1]``.

    Returns a list of ``(name, error, fit seconds, training codes or None)``.
    """
    from sklearn.decomposition import PCA
    from sklearn.neural_network import MLPRegressor

    from .. import HierarchicalAutoencoder, LazyAutoencoder

    q = components[-1]
    err = lambda rec: float(np.mean(np.sum((rec - test) ** 2, axis=1)))

    def mlp():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings at the iteration budget
            return MLPRegressor(hidden_layer_sizes=(64, q, 64), max_iter=max(200, 2 * max_iter),
                                random_state=0).fit(train, train)

    models = [(f"hierarchical lazy AE {components}", lambda: HierarchicalAutoencoder(components, max_iter=max_iter)),
              (f"flat lazy AE ({q},)", lambda: LazyAutoencoder(q, max_iter=max_iter)),
              (f"PCA({q})", lambda: PCA(q)),
              (f"MLP autoencoder (64, {q}, 64)", None)]
    out = []
    for name, make in models:
        if make is None:
            model, t = median_time(mlp)
            out.append((name, err(model.predict(test)), t, None))
            continue
        with iteration_budget():  # every model gets max_iter steps: the comparison is at equal budget
            model, t = median_time(lambda: make().fit(train))
        codes = model.embedding_ if hasattr(model, "embedding_") else model.transform(train)
        out.append((name, err(model.inverse_transform(model.transform(test))), t, codes))
    return out


def noisy_helix(n=1200, noise=0.25, seed=0):
    """Inputs with small-scale noise around a helix (errors in variables), target on the large scale."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 3 * np.pi, n)
    X = np.c_[np.cos(t), np.sin(t), 0.3 * t] + noise * rng.normal(size=(n, 3))
    return X, np.sin(t) + 0.1 * rng.normal(size=n)


def stacking(X, y, bandwidths, n_train):
    """Held-out MSE of the local linear model (``bandwidth="cv"``) alone and behind one and two
    ``LocalMeanTransformer`` layers of each bandwidth: ``[(name, mse), ...]``."""
    from sklearn.pipeline import make_pipeline

    from .. import LocalMeanTransformer, LocalPolynomialRegressor

    top = lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth="cv")
    mse = lambda model: float(np.mean((model.fit(X[:n_train], y[:n_train]).predict(X[n_train:]) - y[n_train:]) ** 2))
    rows = [("local linear, no layer", mse(top()))]
    for h in bandwidths:
        for depth in (1, 2):
            layers = [LocalMeanTransformer(bandwidth=h) for _ in range(depth)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # collapsed designs fall back, counted in the MSE
                rows.append((f"{depth} layer{'s' * (depth > 1)} h={h} + local linear",
                             mse(make_pipeline(*layers, top()))))
    return rows


def nonlocal_denoising(steps=300, size=32, sigma=0.1, seed=0, threads=1):
    """PSNR (dB) on held-out noisy crops of scikit-image's camera: a small residual CNN against
    the same CNN with a :class:`~localkit.nn.NonLocalBlock` between its convolutions, trained
    alike (Adam, ``steps`` batches of 8 crops). Returns ``[(name, psnr, train seconds), ...]``.

    ``threads``: torch threads during the run (restored after); one thread was 10x faster per
    step than two on the shared, oversubscribed 2-core machine these figures come from.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _nonlocal_denoising(steps, size, sigma, seed)
    finally:
        torch.set_num_threads(previous)


def _nonlocal_denoising(steps, size, sigma, seed):
    import torch
    from skimage import data, img_as_float, transform
    from torch import nn

    from ..nn import NonLocalBlock

    image = transform.resize(img_as_float(data.camera()), (256, 256), anti_aliasing=True).astype(np.float32)
    gen = np.random.default_rng(seed)

    def crops(rows, count):
        r = gen.integers(rows[0], rows[1] - size, count)
        c = gen.integers(0, 256 - size, count)
        return torch.from_numpy(np.stack([image[i:i + size, j:j + size] for i, j in zip(r, c)])[:, None])

    train_pool, test = crops((0, 160), 512), crops((160, 256), 64)
    noisy_test = test + sigma * torch.from_numpy(gen.standard_normal(test.shape).astype(np.float32))

    def model(non_local):
        torch.manual_seed(seed)
        mid = [NonLocalBlock(16, dim=2, bn_layer=False)] if non_local else []
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                             *mid, nn.Conv2d(16, 1, 3, padding=1))

    def train(net):
        opt = torch.optim.Adam(net.parameters(), lr=2e-3)
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            clean = train_pool[torch.randint(0, len(train_pool), (8,), generator=g)]
            noisy = clean + sigma * torch.randn(clean.shape, generator=g)
            loss = ((noisy - net(noisy) - clean) ** 2).mean()  # the network predicts the noise
            opt.zero_grad()
            loss.backward()
            opt.step()
        return net

    out = []
    for name, non_local in (("CNN (3 conv)", False), ("CNN + NonLocalBlock (softmax)", True)):
        net, t = median_time(lambda: train(model(non_local)))
        with torch.no_grad():
            mse = float(((noisy_test - net(noisy_test) - test) ** 2).mean())
        out.append((name, 10 * np.log10(1.0 / mse), t))
    noisy_mse = float(((noisy_test - test) ** 2).mean())
    out.append(("noisy input", 10 * np.log10(1.0 / noisy_mse), float("nan")))
    return out


def run(ctx):
    from sklearn.datasets import load_diabetes
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.preprocessing import StandardScaler

    from .. import HierarchicalAutoencoder, LazyAutoencoder, LocalMeanTransformer

    train, test, labels, _ = digits_split(500, 150)
    results = autoencoders(train, test, components=(16, 2), max_iter=40)
    (_, hier_err, t_hier, _), (_, _, t_flat, _) = results[:2]
    others = ", ".join(f"{name} {e:.2f}" for name, e, _, _ in results[1:])
    rows = [Row("hierarchical autoencoder (digits 500/150, (16, 2))", f"held-out error={hier_err:.2f}",
                others, float("nan"), t_hier, t_flat)]

    with iteration_budget():  # 20 steps each: the same iterates, compared
        one = HierarchicalAutoencoder((2,), max_iter=20).fit(train[:200])
        lae, t_ref = ctx.timed(lambda: LazyAutoencoder(2, max_iter=20).fit(train[:200]))
    rows.append(Row("hierarchical autoencoder, one level", "codes of (2,)", "LazyAutoencoder(2) codes",
                    float(np.abs(one.transform(test) - lae.transform(test)).max()), float("nan"), t_ref, 1e-12))

    # continuous features: digits' integer pixels tie in distance, and ties are broken differently
    Xd = StandardScaler().fit_transform(load_diabetes().data)
    layer, t = ctx.timed(lambda: LocalMeanTransformer(kernel="uniform", n_neighbors=7).fit(Xd[:300]).transform(Xd[300:]))
    ref, t_ref = ctx.timed(lambda: KNeighborsRegressor(7).fit(Xd[:300], Xd[:300]).predict(Xd[300:]))
    rows.append(Row("local-mean layer (kNN, diabetes)", "LocalMeanTransformer", "sklearn KNeighborsRegressor(X -> X)",
                    float(np.abs(layer - ref).max()), t, t_ref, 1e-9))

    X, y = noisy_helix(800)
    stack = dict(stacking(X, y, [0.3], 400))
    flat_mse, two = stack["local linear, no layer"], stack["2 layers h=0.3 + local linear"]
    rows.append(Row("stacked local-mean layers, noisy helix", f"2 layers + local linear MSE={two:.4f}",
                    f"local linear alone MSE={flat_mse:.4f}", float("nan"), float("nan"), float("nan")))
    rows.append(_nonlocal_row())
    (_, cnn, t_cnn), (_, nl, t_nl), _ = nonlocal_denoising(steps=100)
    rows.append(Row("CNN + non-local block, camera crops (sigma=0.1, 100 steps)", f"PSNR={nl:.2f} dB",
                    f"the same CNN without it PSNR={cnn:.2f} dB", float("nan"), t_nl, t_cnn))
    _plot_codes(ctx, results, labels)
    return rows


def _nonlocal_row():
    import torch

    from ..nn import NonLocalBlock

    torch.manual_seed(0)
    block = NonLocalBlock(8, dim=2)
    x = torch.randn(2, 8, 24, 24)
    with torch.no_grad():  # a forward pass only (a float of a tensor that requires grad warns)
        (out, t) = median_time(lambda: block(x), 3)
    return Row("non-local block, fresh (Wang et al. 2018)", "NonLocalBlock(8, dim=2)", "the identity",
               float((out - x).abs().max()), t, float("nan"), 0.0)


def _plot_codes(ctx, results, labels):
    import matplotlib.pyplot as plt

    panels = [(name, err, codes) for name, err, _, codes in results if codes is not None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2))
    for ax, (name, err, codes) in zip(axes, panels):
        sc = ax.scatter(codes[:, 0], codes[:, 1], c=labels, s=6, cmap="tab10")
        ax.set_title(f"{name}\nheld-out error {err:.2f}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=axes, label="digit")
    fig.savefig(ctx.figure_path("hierarchical_codes"), dpi=110)
    plt.close(fig)
