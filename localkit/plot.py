"""Figures of the localization method: kernel profiles, local-mean fits, mean-shift trajectories,
attention weight maps and denoising panels.

The tour and the documentation gallery draw their figures with these functions. Each takes an
optional matplotlib ``ax`` (or ``axes``) to draw into and returns what it drew on, so the figures
compose with the rest of a user's plotting code.

matplotlib is an optional dependency: ``pip install ".[plot]"`` in a clone of localkit.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._extras import install_extra

try:
    import matplotlib  # noqa: F401  (pyplot is imported on first use, leaving the backend to the user)
except ImportError as exc:
    raise ImportError(
        f"localkit.plot needs matplotlib, an optional extra: {install_extra('plot')}"
    ) from exc

from ._validation import check_array, check_choice, check_positive

__all__ = ["attention_maps", "denoising_panels", "kernel_profiles", "local_mean_fit",
           "mean_shift_trajectories"]


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def _axes_row(axes, n, name, *, rows=1, panel_size=(3.4, 3.4)):
    """``axes`` checked to hold ``rows * n`` Axes (shaped ``(rows, n)``), or a new figure's."""
    if axes is None:
        _, axes = _pyplot().subplots(rows, n, figsize=(panel_size[0] * n, panel_size[1] * rows),
                                     squeeze=False)
    axes = np.asarray(axes, dtype=object)
    if axes.size != rows * n:
        raise ValueError(f"{name} must hold {rows * n} matplotlib Axes ({rows} x {n}), got {axes.size}")
    return axes.reshape(rows, n)


def kernel_profiles(names: Sequence[str] | None = None, *, u_max: float = 2.5, ax=None):
    """Plot radial kernel profiles ``k(u)`` against the scaled distance ``u = d(x*, x) / h``.

    Compact profiles (``k(u) = 0`` for ``u >= 1``) are drawn solid, unbounded ones dashed.

    Parameters
    ----------
    names : sequence of str, optional
        Profile names (see :class:`~localkit.Kernel`); all ten radial profiles by default.
    u_max : float, default=2.5
        Right end of the ``u`` axis.
    ax : matplotlib Axes, optional
        Where to draw; a new figure's Axes by default.

    Returns
    -------
    ax : matplotlib Axes
    """
    from .kernels import PROFILES

    names = list(PROFILES) if names is None else list(names)
    if not names:
        raise ValueError("names must list at least one profile, got an empty sequence")
    for name in names:
        check_choice(name, "names", tuple(PROFILES))
    u_max = check_positive(u_max, "u_max")
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(7, 4))
    u = np.linspace(0.0, u_max, 500)
    for name in names:
        profile = PROFILES[name]
        ax.plot(u, profile(u), label=name, ls="-" if profile.compact else "--")
    ax.set(xlabel="u = d(x*, x) / h", ylabel="k(u)", title="Kernel profiles (dashed: unbounded support)")
    ax.legend(ncol=2, fontsize=8)
    return ax


def local_mean_fit(x, y, *, kernel: str = "gaussian", bandwidth: float = 1.0, n_neighbors: int | None = None,
                   band: float = 1.0, n_grid: int = 300, scatter: bool = True, label: str | None = None,
                   color=None, ax=None):
    """Plot the local mean of ``y`` over a 1-D ``x``, with a band of local standard deviations.

    On a grid of ``n_grid`` points the curve is the local mean ``m(x*) = sum_i w_i(x*) y_i`` with
    ``w_i(x*) = K(x*, x_i) / sum_j K(x*, x_j)`` (Nadaraya–Watson), and the band is
    ``m(x*) +/- band * s(x*)`` with the local variance ``s^2(x*) = sum_i w_i(x*) (y_i - m(x*))^2``:
    how far the samples that count at ``x*`` spread around their mean. Both come from one engine
    pass over the values ``(y, y^2)``.

    Parameters
    ----------
    x : array of shape (n_samples,) or (n_samples, 1)
    y : array of shape (n_samples,)
    kernel, bandwidth, n_neighbors
        The localization kernel, as in :func:`~localkit.local_mean`.
    band : float, default=1.0
        Half-width of the band in local standard deviations; 0 draws no band.
    n_grid : int, default=300
        Number of evaluation points between ``min(x)`` and ``max(x)``.
    scatter : bool, default=True
        Also draw the samples.
    label : str, optional
        Legend label of the curve (default: the kernel and its bandwidth).
    color : matplotlib colour, optional
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    from .engine import local_mean

    x = check_array(x, "x", ndim=(1, 2))
    if x.ndim == 2 and x.shape[1] != 1:
        raise ValueError(f"x must be 1-D or of shape (n_samples, 1), got shape {x.shape}")
    x = x.ravel()
    y = check_array(y, "y", ndim=(1,))
    if len(y) != len(x):
        raise ValueError(f"y must have one value per sample of x ({len(x)}), got {len(y)}")
    band = check_positive(band, "band", allow_zero=True)
    n_grid = check_positive(n_grid, "n_grid", integer=True)
    grid = np.linspace(x.min(), x.max(), n_grid)
    # centred values keep E[y^2] - E[y]^2 free of cancellation when y sits far from 0
    yc = y - y.mean()
    moments = local_mean(grid[:, None], x[:, None], np.c_[yc, yc * yc], kernel=kernel, bandwidth=bandwidth,
                         n_neighbors=n_neighbors)
    mean = moments[:, 0] + y.mean()
    spread = np.sqrt(np.maximum(moments[:, 1] - moments[:, 0] ** 2, 0.0))
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(7, 4))
    if scatter:
        ax.scatter(x, y, s=8, c="0.6", label="samples")
    if label is None:
        label = f"{kernel}, k={n_neighbors}" if n_neighbors is not None else f"{kernel}, h={bandwidth}"
    (line,) = ax.plot(grid, mean, color=color, label=label)
    if band > 0:
        ax.fill_between(grid, mean - band * spread, mean + band * spread, color=line.get_color(), alpha=0.2,
                        label=f"+/- {band:g} local std")
    ax.legend(fontsize=8)
    return ax


def mean_shift_trajectories(model, X, seeds=None, *, max_iter: int = 300, ax=None):
    """Plot the paths of seeds climbing to the modes of a fitted :class:`~localkit.MeanShift`.

    Each seed follows ``x <- sum_i K(x, x_i) x_i / sum_j K(x, x_j)`` (the local mean of the points,
    with the model's fitted kernel) until it stops moving; the samples are coloured by the model's
    labels and the modes drawn as stars.

    Parameters
    ----------
    model : fitted localkit.MeanShift
    X : array of shape (n_samples, 2)
        The data the model was fitted on (two features, to be drawn).
    seeds : array of shape (n_seeds, 2), optional
        Starting points; every 40th sample by default.
    max_iter : int, default=300
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    from .models.cluster import MeanShift, shift_seeds

    if not isinstance(model, MeanShift) or not hasattr(model, "kernel_"):
        raise TypeError(f"model must be a fitted localkit.MeanShift, got {type(model).__name__}")
    X = check_array(X, "X", ndim=(2,))
    if X.shape[1] != 2 or model.cluster_centers_.shape[1] != 2:
        raise ValueError(f"X must have 2 features (to be drawn) like the model, got shape {X.shape}")
    if len(X) != len(model.labels_):
        raise ValueError(f"X must be the {len(model.labels_)} samples the model was fitted on, got {len(X)}")
    seeds = X[::40] if seeds is None else check_array(seeds, "seeds", ndim=(2,))
    if seeds.shape[1] != 2:
        raise ValueError(f"seeds must have 2 features, got shape {seeds.shape}")
    max_iter = check_positive(max_iter, "max_iter", integer=True)
    fixed_point, _ = shift_seeds(X, seeds, model.kernel_, max_iter, history=True)
    path = np.stack(fixed_point.history)  # (steps, seeds, 2)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(5, 4.6))
    # one fixed colour per label (tab10 indexed, not stretched over the labels present)
    ax.scatter(X[:, 0], X[:, 1], s=3, c=model.labels_ % 10, cmap="tab10", vmin=0, vmax=9, alpha=0.35)
    for k in range(len(seeds)):
        ax.plot(path[:, k, 0], path[:, k, 1], "-", lw=0.8, color="0.25")
    ax.plot(seeds[:, 0], seeds[:, 1], "o", ms=3, color="k", label="seeds")
    ax.plot(*model.cluster_centers_.T, "r*", ms=14, label="modes")
    ax.set_title(f"{model.kernel_.profile.name} mean shift (h={model.bandwidth_:.2f}): "
                 f"{len(model.cluster_centers_)} modes")
    ax.set_aspect("equal")
    ax.legend(loc="lower left")
    return ax


def attention_maps(weights: Mapping[str, np.ndarray], *, tokens: Sequence[str] | None = None, axes=None):
    """Plot attention weight matrices side by side, and the weights of the last query under each.

    Row ``i`` of a weight matrix holds the normalised kernel ``w_ij = K(q_i, k_j) / sum_l K(q_i, k_l)``
    of query ``i`` over the keys ``j``: the weights of a local mean over tokens. The maps use a square-root
    colour scale, so that rows spread over many keys stay visible next to rows with a single key.

    Parameters
    ----------
    weights : mapping of str to array of shape (n_queries, n_keys)
        Panel title -> weight matrix (NumPy arrays, or anything ``np.asarray`` converts, such as
        CPU torch tensors).
    tokens : sequence of str, optional
        Labels of the keys for the last query's bar chart (one per key).
    axes : array of matplotlib Axes of shape (2, n_panels), optional

    Returns
    -------
    axes : array of matplotlib Axes of shape (2, n_panels)
    """
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError("weights must be a non-empty mapping of panel title -> weight matrix")
    from matplotlib.colors import PowerNorm

    mats = {title: check_array(w, f"weights[{title!r}]", ndim=(2,)) for title, w in weights.items()}
    for title, w in mats.items():
        if np.any(w < 0):
            raise ValueError(f"weights[{title!r}] has negative entries; attention weights are >= 0")
        if tokens is not None and len(tokens) != w.shape[1]:
            raise ValueError(f"tokens must label the {w.shape[1]} keys of weights[{title!r}], got {len(tokens)}")
    axes = _axes_row(axes, len(mats), "axes", rows=2)
    for col, (title, w) in enumerate(mats.items()):
        top, bottom = axes[0, col], axes[1, col]
        # a square-root colour scale: the first causal rows (one or two keys, weights near 1)
        # would otherwise wash out every later row
        top.imshow(w, cmap="viridis", norm=PowerNorm(0.5, vmin=0.0, vmax=max(float(w.max()), 1e-300)))
        top.set_title(title)
        top.set_xlabel("key position j")
        positions = np.arange(w.shape[1])
        bottom.bar(positions, w[-1])
        if tokens is not None:
            bottom.set_xticks(positions, list(tokens), fontsize=6)
        bottom.set_title(f"weights of the last query (sum = {w[-1].sum():.2f})", fontsize=9)
    axes[0, 0].set_ylabel("query position i")
    return axes


def denoising_panels(images: Mapping[str, np.ndarray], *, clean=None, data_range: float = 1.0, axes=None):
    """Show images side by side in grey levels, each titled with its PSNR when ``clean`` is given.

    ``PSNR = 10 log10(data_range^2 / mean((clean - image)^2))`` in decibels, by scikit-image's
    :func:`skimage.metrics.peak_signal_noise_ratio` (scikit-image is needed only with ``clean``).

    Parameters
    ----------
    images : mapping of str to array of shape (height, width) or (height, width, 3)
        Panel title -> image, drawn clipped to ``[0, data_range]``.
    clean : array of the images' shape, optional
        The clean image: drawn first, and the reference of every PSNR.
    data_range : float, default=1.0
        The range of the pixel values.
    axes : array of matplotlib Axes, optional
        One per panel (``len(images)``, plus one with ``clean``).

    Returns
    -------
    axes : array of matplotlib Axes of shape (n_panels,)
    """
    if not isinstance(images, Mapping) or not images:
        raise ValueError("images must be a non-empty mapping of panel title -> image")
    data_range = check_positive(data_range, "data_range")
    panels = {title: check_array(img, f"images[{title!r}]", ndim=(2, 3)) for title, img in images.items()}
    titles = {title: title for title in panels}
    if clean is not None:
        from skimage.metrics import peak_signal_noise_ratio

        clean = check_array(clean, "clean", ndim=(2, 3))
        for title, img in panels.items():
            if img.shape != clean.shape:
                raise ValueError(f"images[{title!r}] must have the shape of clean {clean.shape}, got {img.shape}")
            psnr = peak_signal_noise_ratio(clean, img, data_range=data_range)
            titles[title] = f"{title}\nPSNR {psnr:.2f} dB"
        panels = {"clean": clean, **panels}
        titles = {"clean": "clean", **titles}
    axes = _axes_row(axes, len(panels), "axes")[0]
    for ax, (key, img) in zip(axes, panels.items()):
        ax.imshow(np.clip(img, 0, data_range), cmap="gray", vmin=0, vmax=data_range)
        ax.set_title(titles[key], fontsize=9)
        ax.axis("off")
    return axes
