"""Non-local means against scikit-image's ``denoise_nl_means`` on its bundled images.

The chain of checks: (1) a numpy reference written from scikit-image's slow-mode source, with its
two approximations switched on (the cut of a partial distance above 5 and Schraudolph's fast
``exp``), reproduces scikit-image exactly, so the reference encodes scikit-image's definitions;
(2) our compiled, shift-streamed version equals that reference with the approximations off to
round-off; (3) on real images our PSNR is at least scikit-image's (fast_mode=False) minus 0.1 dB.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage
from skimage import data, img_as_float, transform
from skimage.metrics import peak_signal_noise_ratio
from skimage.restoration import denoise_nl_means as sk_nl_means
from sklearn.utils.estimator_checks import check_estimator

from localkit import NonLocalMeans, denoise_nl_means
from localkit.engine import patch_local_mean


def fast_exp(y):
    """Schraudolph's approximate exp as in scikit-image's ``_shared/fast_exp.h``."""
    hi = np.trunc(1512775.3951951856938 * y).astype(np.int64) + 1072632447
    return (hi << 32).view(np.float64)


def reference_nl_means(image, s, d, h, sigma, skimage_approximations=False, uniform=False):
    """Non-local means by definition: every shift of the window, dense patch weights (Gaussian,
    or ``uniform``: the box of Froment's fast mode, ``1 / s^nd``).

    ``image`` has channels last and 2, 3 or 4 spatial axes.
    """
    s += 1 - s % 2
    o = s // 2
    spatial = image.shape[:-1]
    nd = len(spatial)
    big = np.pad(image, [(o + d, o + d)] * nd + [(0, 0)], mode="reflect")
    a = (s - 1) / 4
    grid = np.meshgrid(*[np.arange(-o, o + 1)] * nd, indexing="ij")
    g = np.ones_like(grid[0], dtype=float) if uniform else np.exp(-sum(x * x for x in grid) / (2 * a * a))
    g /= g.sum()
    num = np.zeros(image.shape)
    den = np.zeros(spatial)
    inner = tuple(slice(d, d + n + 2 * o) for n in spatial)  # the image padded by o
    for t in np.ndindex(*(2 * d + 1,) * nd):
        t = np.array(t) - d
        moved = tuple(slice(d + tk, d + tk + n + 2 * o) for tk, n in zip(t, spatial))
        terms = ((big[inner] - big[moved]) ** 2 - 2 * sigma**2).mean(axis=-1)  # over channels
        if skimage_approximations:  # partial sums over the first patch axis, cut above 5
            rows = np.stack([ndimage.correlate(terms, g * (grid[0] == i), mode="constant")
                             for i in range(-o, o + 1)])
            crop = (slice(None),) + tuple(slice(o, o + n) for n in spatial)
            partial = np.cumsum(rows[crop], axis=0)
            dist = partial[-1] / h**2
            cut = np.any(partial[:-1] / h**2 > 5.0, axis=0)
            w = np.where(cut, 0.0, fast_exp(-np.maximum(dist, 0.0)))
        else:
            dist = ndimage.correlate(terms, g, mode="constant")[tuple(slice(o, o + n) for n in spatial)]
            w = np.exp(-np.maximum(dist, 0.0) / h**2)
        idx = np.indices(spatial)
        valid = np.all([(idx[k] + t[k] >= 0) & (idx[k] + t[k] < spatial[k]) for k in range(nd)], axis=0)
        w = w * valid
        centre = tuple(slice(o + d + tk, o + d + tk + n) for tk, n in zip(t, spatial))
        num += w[..., None] * big[centre]
        den += w
    return num / den[..., None]


@pytest.fixture(scope="module")
def camera_crop():
    img = img_as_float(data.camera())[200:226, 240:262]
    return img + 0.08 * np.random.default_rng(1).standard_normal(img.shape)


@pytest.mark.parametrize("s, d, h, sigma", [(5, 3, 0.08, 0.0), (5, 4, 0.05, 0.08), (4, 3, 0.1, 0.05)])
def test_reference_encodes_skimage_and_we_match_it(camera_crop, s, d, h, sigma):
    noisy = camera_crop
    sk = sk_nl_means(noisy, s, d, h, fast_mode=False, sigma=sigma)
    emulated = reference_nl_means(noisy[..., None], s, d, h, sigma, skimage_approximations=True)[..., 0]
    np.testing.assert_allclose(emulated, sk, rtol=0, atol=1e-12)
    exact = reference_nl_means(noisy[..., None], s, d, h, sigma)[..., 0]
    ours = denoise_nl_means(noisy, s, d, h, sigma)
    np.testing.assert_allclose(ours, exact, rtol=0, atol=1e-12)
    assert np.abs(ours - sk).max() < 0.02  # only skimage's approximations separate us


def test_colour_matches_reference_and_skimage():
    img = img_as_float(data.astronaut())[100:120, 200:218]
    noisy = img + 0.08 * np.random.default_rng(2).standard_normal(img.shape)
    sk = sk_nl_means(noisy, 5, 3, 0.08, fast_mode=False, sigma=0.05, channel_axis=-1)
    emulated = reference_nl_means(noisy, 5, 3, 0.08, 0.05, skimage_approximations=True)
    np.testing.assert_allclose(emulated, sk, rtol=0, atol=1e-12)
    ours = denoise_nl_means(noisy, 5, 3, 0.08, 0.05, channel_axis=-1)
    np.testing.assert_allclose(ours, reference_nl_means(noisy, 5, 3, 0.08, 0.05), rtol=0, atol=1e-12)
    # the channel axis may be anywhere
    first = denoise_nl_means(np.moveaxis(noisy, -1, 0), 5, 3, 0.08, 0.05, channel_axis=0)
    np.testing.assert_allclose(np.moveaxis(first, 0, -1), ours, rtol=0, atol=1e-14)


def synthetic_volume(n=20, seed=3):
    """A 3-D volume of a few overlapping balls and a gradient (skimage's cells3d is not bundled)."""
    z, y, x = np.indices((n, n, n)) / n
    vol = 0.2 + 0.3 * x
    for cz, cy, cx, r, v in [(0.3, 0.3, 0.4, 0.2, 0.5), (0.7, 0.6, 0.6, 0.25, 0.3), (0.5, 0.8, 0.2, 0.15, -0.1)]:
        vol = vol + v * ((z - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2 < r * r)
    rng = np.random.default_rng(seed)
    return vol, vol + 0.1 * rng.standard_normal(vol.shape)


def test_volume_matches_reference_and_skimage():
    _, noisy = synthetic_volume(12)
    sk = sk_nl_means(noisy, 3, 2, 0.1, fast_mode=False, sigma=0.05)
    emulated = reference_nl_means(noisy[..., None], 3, 2, 0.1, 0.05, skimage_approximations=True)[..., 0]
    np.testing.assert_allclose(emulated, sk, rtol=0, atol=1e-12)
    ours = denoise_nl_means(noisy, 3, 2, 0.1, 0.05)
    np.testing.assert_allclose(ours, reference_nl_means(noisy[..., None], 3, 2, 0.1, 0.05)[..., 0],
                               rtol=0, atol=1e-12)


def test_multichannel_volume_matches_reference():
    # scikit-image's slow mode has no multichannel 3-D; the definition carries over unchanged
    _, noisy = synthetic_volume(8)
    vol = np.stack([noisy, noisy[::-1] * 0.5], axis=-1)
    ours = denoise_nl_means(vol, 3, 2, 0.1, 0.05, channel_axis=-1)
    np.testing.assert_allclose(ours, reference_nl_means(vol, 3, 2, 0.1, 0.05), rtol=0, atol=1e-12)


def _psnr_pair(clean, noisy, sigma, **kw):
    h = 0.6 * sigma  # scikit-image's advice for fast_mode=False with sigma given
    sk = sk_nl_means(noisy, h=h, sigma=sigma, fast_mode=False, **kw)
    ours = denoise_nl_means(noisy, h=h, sigma=sigma, **kw)
    return (peak_signal_noise_ratio(clean, ours, data_range=1.0),
            peak_signal_noise_ratio(clean, sk, data_range=1.0))


def test_psnr_camera():
    clean = transform.resize(img_as_float(data.camera()), (96, 96), anti_aliasing=True)
    noisy = clean + 0.1 * np.random.default_rng(4).standard_normal(clean.shape)
    ours, sk = _psnr_pair(clean, noisy, 0.1, patch_size=5, patch_distance=6)
    assert ours >= sk - 0.1
    assert ours > peak_signal_noise_ratio(clean, noisy, data_range=1.0) + 3  # it does denoise


def test_psnr_astronaut_colour():
    clean = transform.resize(img_as_float(data.astronaut()), (64, 64), anti_aliasing=True)
    noisy = clean + 0.08 * np.random.default_rng(5).standard_normal(clean.shape)
    ours, sk = _psnr_pair(clean, noisy, 0.08, patch_size=5, patch_distance=5, channel_axis=-1)
    assert ours >= sk - 0.1


def test_psnr_volume():
    clean, noisy = synthetic_volume(20)
    ours, sk = _psnr_pair(clean, noisy, 0.1, patch_size=3, patch_distance=3)
    assert ours >= sk - 0.1


def test_huge_h_is_the_window_mean_and_tiny_h_the_image(camera_crop):
    img = camera_crop
    d = 3
    box = ndimage.uniform_filter(img, 2 * d + 1, mode="constant")  # mean over the clipped window
    count = ndimage.uniform_filter(np.ones_like(img), 2 * d + 1, mode="constant")
    np.testing.assert_allclose(denoise_nl_means(img, 5, d, h=1e8), box / count, rtol=0, atol=1e-12)
    for h in (1e-12, 1e-200):  # every other weight underflows (h^2 too): no 0/0
        np.testing.assert_array_equal(denoise_nl_means(img, 5, d, h=h), img)


def test_integer_images_are_scaled_as_skimage_does():
    img8 = data.camera()[:32, :32]
    np.testing.assert_allclose(denoise_nl_means(img8, 5, 3, 0.1),
                               denoise_nl_means(img_as_float(img8), 5, 3, 0.1), rtol=0, atol=1e-15)
    img16 = (data.camera()[:32, :32].astype(np.int16) - 128) * 200
    np.testing.assert_allclose(denoise_nl_means(img16, 5, 3, 0.1),
                               denoise_nl_means(img_as_float(img16), 5, 3, 0.1), rtol=0, atol=1e-15)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(-5, 5))
def test_equivariant_to_flips_transposes_and_intensity_shifts(seed, c):
    img = np.random.default_rng(seed).random((13, 17))
    den = lambda x: denoise_nl_means(x, 5, 3, 0.15, 0.05)
    out = den(img)
    np.testing.assert_allclose(den(img[::-1, ::-1]), out[::-1, ::-1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(den(img.T), out.T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(den(img + c), out + c, rtol=0, atol=1e-11)


def test_compiled_exp_is_exact_to_round_off():
    from localkit.engine.patches import _exp_neg

    x = -np.concatenate([np.linspace(0, 40, 4001), np.geomspace(1e-12, 708, 2000)])
    ours = np.array([_exp_neg(v) for v in x])
    np.testing.assert_allclose(ours, np.exp(x), rtol=2e-15, atol=0)


def test_float32_kept_threads_agree(camera_crop):
    out32 = denoise_nl_means(camera_crop.astype(np.float32), 5, 3, 0.1)
    assert out32.dtype == np.float32
    out16 = denoise_nl_means(camera_crop.astype(np.float16), 5, 3, 0.1)  # float32, as scikit-image
    assert out16.dtype == np.float32
    np.testing.assert_array_equal(out16, denoise_nl_means(camera_crop.astype(np.float16).astype(np.float32), 5, 3,
                                                          0.1))
    one = denoise_nl_means(camera_crop, 5, 4, 0.07, n_jobs=1)
    two = denoise_nl_means(camera_crop, 5, 4, 0.07, n_jobs=2)
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-13)


@pytest.mark.parametrize("image, kwargs, match", [
    (np.zeros(5), {}, "2D array"),
    (np.zeros((3, 3, 3, 3, 3)), {}, "2-D or 3-D or 4-D"),
    (np.zeros((3, 3)), {"channel_axis": -1}, "2-D or 3-D or 4-D plus a channel axis"),
    (np.zeros((3, 3, 3)), {"channel_axis": 5}, "channel_axis"),
    (np.full((4, 4), np.nan), {}, "NaN"),
    (np.full((4, 4), np.inf), {}, "infinity"),
    (np.zeros((0, 4)), {}, "0 sample"),
    (np.zeros((4, 4)), {"patch_size": 0}, "patch_size"),
    (np.zeros((4, 4)), {"patch_distance": -1}, "patch_distance"),
    (np.zeros((4, 4)), {"h": 0.0}, "'h' parameter of denoise_nl_means must be a float in the range \\(0.0, inf\\)"),
    (np.zeros((4, 4)), {"h": np.nan}, "'h' parameter of denoise_nl_means must be"),
    (np.zeros((4, 4)), {"sigma": -0.1}, "sigma"),
])
def test_bad_input(image, kwargs, match):
    with pytest.raises(ValueError, match=match):
        denoise_nl_means(image, **kwargs)


def test_bad_types():
    with pytest.raises(TypeError, match="patch_size"):
        denoise_nl_means(np.zeros((4, 4)), patch_size=2.5)
    with pytest.raises(TypeError, match="channel_axis"):
        denoise_nl_means(np.zeros((4, 4, 3)), channel_axis="last")
    with pytest.raises(TypeError, match="channel_axis"):  # not the axis 1
        denoise_nl_means(np.zeros((4, 4, 3)), channel_axis=True)
    with pytest.raises(ValueError, match="Complex"):
        denoise_nl_means(np.zeros((4, 4), dtype=complex))


def test_estimator_is_the_function(camera_crop):
    est = NonLocalMeans(patch_size=5, patch_distance=3, h=0.07, sigma=0.05)
    np.testing.assert_array_equal(est.fit_transform(camera_crop),
                                  denoise_nl_means(camera_crop, 5, 3, 0.07, 0.05))
    with pytest.raises(ValueError, match="'h' parameter of NonLocalMeans must be"):
        NonLocalMeans(h=-1).fit(camera_crop)


def test_check_estimator():
    # X is one image: its rows are not samples and its columns are not features
    not_samples = "X is an image; a row's result depends on neighbouring rows (patches)"
    not_features = "X is an image of any size; nothing is learned, so there is no n_features_in_"
    check_estimator(NonLocalMeans(patch_size=3, patch_distance=2), expected_failed_checks={
        "check_methods_sample_order_invariance": not_samples,
        "check_methods_subset_invariance": not_samples,
        "check_n_features_in": not_features,
        "check_n_features_in_after_fitting": not_features,
    })


@pytest.mark.parametrize("h", [-0.1, 0.0, np.nan])
def test_the_engine_function_declares_its_width(h):
    """``patch_local_mean`` squared ``h``: a negative width was taken as its absolute value."""
    g = [np.ones(3) / 3, np.ones(3) / 3, np.ones(1)]
    with pytest.raises(ValueError, match="'h' parameter of patch_local_mean"):
        patch_local_mean(np.zeros((6, 6, 1, 1)), g, (2, 2, 0), h)


# -- fast_mode (Froment's uniform patch, running sums) and 4-D images -------------------------------

@pytest.mark.parametrize("shape, channels, s, d", [((17, 13), None, 5, 3), ((17, 13), 3, 3, 2), ((9, 8, 7), None, 3, 2),
                                                   ((7, 6, 5, 4), None, 3, 1), ((6, 5, 5, 4), 2, 3, 1),
                                                   ((12, 10), None, 7, 2)])
def test_fast_mode_equals_the_uniform_patch_definition(shape, channels, s, d):
    rng = np.random.default_rng(7)
    img = rng.random(shape + ((channels,) if channels else ()))
    ours = denoise_nl_means(img, s, d, 0.2, 0.05, channel_axis=-1 if channels else None, fast_mode=True)
    want = reference_nl_means(img if channels else img[..., None], s, d, 0.2, 0.05, uniform=True)
    np.testing.assert_allclose(ours, want if channels else want[..., 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("channels", [None, 2])
def test_four_d_gaussian_patch_equals_the_definition(channels):
    rng = np.random.default_rng(8)
    img = rng.random((6, 5, 6, 4) + ((channels,) if channels else ()))
    ours = denoise_nl_means(img, 3, 1, 0.3, 0.05, channel_axis=-1 if channels else None)
    want = reference_nl_means(img if channels else img[..., None], 3, 1, 0.3, 0.05)
    np.testing.assert_allclose(ours, want if channels else want[..., 0], rtol=0, atol=1e-12)


def test_scikit_images_4d_case():
    """scikit-image's own ``test_denoise_nl_means_4d``: denoising as 4-D beats looping over 3-D
    slices, and 3-D + channels beats it too (fast_mode, as scikit-image requires in 4-D)."""
    rng = np.random.default_rng(5)
    img = np.zeros((10, 10, 8, 5))
    img[2:-2, 2:-2, 2:-2, :2] = 0.5
    img[2:-2, 2:-2, 2:-2, 2:] = 1.0
    sigma = 0.3
    imgn = img + sigma * rng.standard_normal(img.shape)
    kw = dict(patch_size=3, patch_distance=2, h=0.3 * sigma, sigma=sigma, fast_mode=True)
    psnr_noisy = peak_signal_noise_ratio(img, imgn, data_range=1.0)
    denoised_3d = np.stack([denoise_nl_means(imgn[..., c], **kw) for c in range(img.shape[-1])], axis=-1)
    psnr_3d = peak_signal_noise_ratio(img, denoised_3d, data_range=1.0)
    assert psnr_3d > psnr_noisy
    psnr_4d = peak_signal_noise_ratio(img, denoise_nl_means(imgn, **kw), data_range=1.0)
    assert psnr_4d > psnr_3d
    psnr_3dmc = peak_signal_noise_ratio(img, denoise_nl_means(imgn, channel_axis=-1, **kw), data_range=1.0)
    assert psnr_3dmc > psnr_3d


def test_scikit_images_4d_multichannel_case():
    img = np.zeros((8, 8, 8, 4, 4))
    img[2:-2, 2:-2, 2:-2, 1:-1, :] = 1.0
    sigma = 0.3
    imgn = img + sigma * np.random.default_rng(9).standard_normal(img.shape)
    psnr_noisy = peak_signal_noise_ratio(img, imgn, data_range=1.0)
    out = denoise_nl_means(imgn, 3, 3, h=0.35 * sigma, fast_mode=True, channel_axis=-1, sigma=sigma)
    assert peak_signal_noise_ratio(img, out, data_range=1.0) > psnr_noisy


@pytest.mark.parametrize("fast_mode", [False, True])
def test_scikit_images_small_h_and_dtype_cases(fast_mode):
    img = np.zeros((40, 40))
    img[10:-10, 10:-10] = 1.0
    img += 0.3 * np.random.default_rng(10).standard_normal(img.shape)
    assert np.allclose(denoise_nl_means(img, 7, 5, 0.01, fast_mode=fast_mode), img)
    assert denoise_nl_means(np.zeros((40, 40), dtype=int), fast_mode=fast_mode).dtype == np.float64
    assert denoise_nl_means(np.zeros((12, 12, 8), np.float32), patch_distance=2, fast_mode=fast_mode).dtype == np.float32


def test_fast_mode_psnr_against_scikit_images_fast_mode():
    clean = transform.resize(img_as_float(data.camera()), (96, 96), anti_aliasing=True)
    noisy = clean + 0.1 * np.random.default_rng(4).standard_normal(clean.shape)
    kw = dict(patch_size=5, patch_distance=6, h=0.8 * 0.1, sigma=0.1)  # scikit-image's advice for fast_mode
    ours = peak_signal_noise_ratio(clean, denoise_nl_means(noisy, fast_mode=True, **kw), data_range=1.0)
    sk = peak_signal_noise_ratio(clean, sk_nl_means(noisy, fast_mode=True, **kw), data_range=1.0)
    assert ours >= sk - 0.1
    assert NonLocalMeans(fast_mode=True, **kw).fit_transform(noisy).shape == noisy.shape
