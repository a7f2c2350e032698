"""localkit.plot: what each figure draws equals the quantity it claims, computed here by formula."""
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes, make_blobs

from localkit import MeanShift, plot
from localkit.nn import attention_weights


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_import_without_matplotlib_names_the_extra():
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "try:\n    import localkit.plot\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install ".[plot]"' in out


def test_kernel_profiles_draw_the_profile_formulas():
    ax = plot.kernel_profiles(["gaussian", "epanechnikov", "tricube"], u_max=2.0)
    lines = {line.get_label(): line for line in ax.lines}
    u = lines["gaussian"].get_xdata()
    assert u[0] == 0 and u[-1] == 2.0
    np.testing.assert_allclose(lines["gaussian"].get_ydata(), np.exp(-u ** 2 / 2), atol=1e-15)
    np.testing.assert_allclose(lines["epanechnikov"].get_ydata(), np.clip(1 - u ** 2, 0, None), atol=1e-15)
    np.testing.assert_allclose(lines["tricube"].get_ydata(), np.clip(1 - u ** 3, 0, None) ** 3, atol=1e-15)
    assert lines["gaussian"].get_linestyle() == "--" and lines["tricube"].get_linestyle() == "-"


def test_kernel_profiles_reject_bad_input():
    with pytest.raises(ValueError, match="names must be one of"):
        plot.kernel_profiles(["gausian"])
    with pytest.raises(ValueError, match="names must list at least one"):
        plot.kernel_profiles([])
    with pytest.raises(ValueError, match="u_max"):
        plot.kernel_profiles(u_max=-1.0)


def _band(collection, grid):
    """(lower, upper) of a fill_between band at each grid abscissa."""
    v = collection.get_paths()[0].vertices
    lower = np.array([v[v[:, 0] == g, 1].min() for g in grid])
    upper = np.array([v[v[:, 0] == g, 1].max() for g in grid])
    return lower, upper


def test_local_mean_fit_draws_nadaraya_watson_and_the_local_spread():
    X, y = load_diabetes(return_X_y=True)
    bmi, h = X[:, 2], 0.01
    ax = plot.local_mean_fit(bmi, y, bandwidth=h, band=2.0, n_grid=50)
    line = ax.lines[0]
    grid = line.get_xdata()
    np.testing.assert_allclose(grid, np.linspace(bmi.min(), bmi.max(), 50))
    W = np.exp(-(grid[:, None] - bmi[None, :]) ** 2 / (2 * h * h))
    W /= W.sum(1, keepdims=True)
    mean = W @ y
    spread = np.sqrt(np.sum(W * (y[None, :] - mean[:, None]) ** 2, axis=1))
    np.testing.assert_allclose(line.get_ydata(), mean, rtol=1e-10)
    lower, upper = _band(ax.collections[-1], grid)
    np.testing.assert_allclose(lower, mean - 2 * spread, rtol=1e-9)
    np.testing.assert_allclose(upper, mean + 2 * spread, rtol=1e-9)


def test_local_mean_fit_with_knn_kernel_and_no_band():
    x = np.arange(10.0)
    y = x ** 2
    ax = plot.local_mean_fit(x, y, kernel="uniform", n_neighbors=3, band=0, n_grid=10, scatter=False)
    # at each sample the three nearest samples are itself and its neighbours (ends: the two inner)
    expected = [np.mean(y[max(0, min(i - 1, 7)):max(0, min(i - 1, 7)) + 3]) for i in range(10)]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), expected, rtol=1e-12)
    assert not ax.collections  # no band, no scatter


@pytest.mark.parametrize("args, kwargs, match", [
    (([0.0, np.nan, 1.0], [1.0, 2.0, 3.0]), {}, "x contains NaN"),
    (([0.0, 1.0, 2.0], [1.0, 2.0]), {}, "one value per sample"),
    ((np.ones((3, 2)), [1.0, 2.0, 3.0]), {}, "x must be 1-D or of shape"),
    (([0.0, 1.0], [1.0, np.inf]), {}, "y contains NaN"),
    (([0.0, 1.0], [1.0, 2.0]), {"band": -1.0}, "band"),
    (([0.0, 1.0], [1.0, 2.0]), {"n_grid": 0}, "n_grid"),
])
def test_local_mean_fit_rejects_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot.local_mean_fit(*args, **kwargs)


def test_mean_shift_trajectories_end_at_fixed_points_of_the_local_mean():
    X, _ = make_blobs(n_samples=600, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.6, random_state=0)
    h = 0.9
    model = MeanShift(bandwidth=h).fit(X)
    seeds = X[::60]
    ax = plot.mean_shift_trajectories(model, X, seeds)
    paths = [line for line in ax.lines if line.get_label().startswith("_")]  # the unlabelled paths
    assert len(paths) == len(seeds)
    for seed, line in zip(seeds, paths):
        xy = np.c_[line.get_xdata(), line.get_ydata()]
        np.testing.assert_array_equal(xy[0], seed)
        end = xy[-1]
        inside = np.linalg.norm(X - end, axis=1) <= h  # uniform kernel: the mean of the points within h
        assert np.linalg.norm(X[inside].mean(0) - end) <= 1e-3 * h  # scikit-learn's stopping rule
        assert np.linalg.norm(model.cluster_centers_ - end, axis=1).min() < h


def test_mean_shift_trajectories_reject_bad_input():
    X, _ = make_blobs(n_samples=100, n_features=3, random_state=0)
    with pytest.raises(TypeError, match="fitted localkit.MeanShift"):
        plot.mean_shift_trajectories(MeanShift(), X)
    with pytest.raises(ValueError, match="2 features"):
        plot.mean_shift_trajectories(MeanShift(bandwidth=2.0).fit(X), X)
    model = MeanShift(bandwidth=2.0).fit(X[:, :2])
    with pytest.raises(ValueError, match="samples the model was fitted on"):
        plot.mean_shift_trajectories(model, X[:50, :2])


def test_attention_maps_draw_the_weights_and_the_last_query():
    torch.manual_seed(0)
    q, k = torch.randn(6, 4), torch.randn(6, 4)
    maps = {name: attention_weights(q, k, name, causal=True) for name in ("softmax", "gaussian")}
    axes = plot.attention_maps(maps, tokens=list("abcdef"))
    assert axes.shape == (2, 2)
    for col, w in enumerate(maps.values()):
        w = w.numpy()
        np.testing.assert_array_equal(axes[0, col].images[0].get_array(), w)
        np.testing.assert_array_equal([p.get_height() for p in axes[1, col].patches], w[-1])
        assert "sum = 1.00" in axes[1, col].get_title()


def test_attention_maps_reject_bad_input():
    with pytest.raises(ValueError, match="non-empty mapping"):
        plot.attention_maps({})
    with pytest.raises(ValueError, match="negative"):
        plot.attention_maps({"w": -np.eye(3)})
    with pytest.raises(ValueError, match="tokens must label the 3 keys"):
        plot.attention_maps({"w": np.eye(3)}, tokens=["a", "b"])
    with pytest.raises(ValueError, match="must be 2-D"):
        plot.attention_maps({"w": np.ones(3)})


def test_denoising_panels_put_the_psnr_in_the_titles():
    clean = np.zeros((8, 8))
    axes = plot.denoising_panels({"noisy": clean + 0.1, "denoised": clean + 0.01}, clean=clean)
    assert [ax.get_title() for ax in axes] == ["clean", "noisy\nPSNR 20.00 dB", "denoised\nPSNR 40.00 dB"]
    axes = plot.denoising_panels({"image": np.full((4, 4), 2.0)})  # clipped to [0, data_range]
    assert axes[0].images[0].get_array().max() == 1.0


def test_denoising_panels_reject_bad_input():
    with pytest.raises(ValueError, match="non-empty mapping"):
        plot.denoising_panels([])
    with pytest.raises(ValueError, match="shape of clean"):
        plot.denoising_panels({"noisy": np.zeros((4, 4))}, clean=np.zeros((5, 5)))
    with pytest.raises(ValueError, match="data_range"):
        plot.denoising_panels({"noisy": np.zeros((4, 4))}, data_range=0.0)
    with pytest.raises(ValueError, match="axes must hold 2"):
        _, axes = plt.subplots(1, 3)
        plot.denoising_panels({"a": np.zeros((4, 4)), "b": np.zeros((4, 4))}, axes=axes)
