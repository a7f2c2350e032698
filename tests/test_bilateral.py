"""The bilateral filter against scikit-image's ``denoise_bilateral`` on its bundled images.

The chain of checks, as for non-local means: (1) a NumPy reference written from scikit-image's
source (its Cython loop: the colour table of ``bins`` Gaussian values indexed by
``|u(y) - u(x)| * (bins // C) / max(u)``, the position table built on ``win_size + 1`` offsets
and read with a stride of ``win_size``), with those two tables switched on, reproduces
scikit-image exactly, so the reference encodes its definitions; (2) ours equals that reference
with the tables off (the direct formula: exact Gaussians, a centred position kernel) to 1e-9,
grey and colour, every padding mode; (3) on real images our PSNR is within 0.2 dB of
scikit-image's where its position table does not matter (a flat position kernel) and of the
reference with its colour table and a centred position kernel at the default ``sigma_spatial``.
scikit-image's position table is not centred (its impulse response peaks two pixels off the
centre at ``sigma_spatial=1``), so at small ``sigma_spatial`` its output is not the bilateral
filter's; the figures are in benchmarks/RESULTS.md.
"""
import math

import numpy as np
import pytest
from skimage import data, img_as_float
from skimage.metrics import peak_signal_noise_ratio
from skimage.restoration import denoise_bilateral as sk_bilateral

from localkit import Kernel, denoise_bilateral
from localkit.engine import patch_local_mean


def reference_bilateral(image, win_size=None, sigma_color=None, sigma_spatial=1, bins=10000, mode="constant", cval=0,
                        skimage_tables=False, centred=True):
    """The bilateral filter by definition, one window offset at a time (``image``: 2-D, or 2-D with
    channels last). ``skimage_tables``: scikit-image's colour table (and, unless ``centred``, its
    position table)."""
    img = np.atleast_3d(np.asarray(image, dtype=np.float64))
    win_size = max(5, 2 * math.ceil(3 * sigma_spatial) + 1) if win_size is None else win_size
    top, bottom = img.max(), img.min()
    sigma_color = sigma_color or img.std()
    if skimage_tables and bottom < 0:
        img, top = img - bottom, top - bottom
    C, r = img.shape[2], (win_size - 1) // 2
    grid = np.arange(-win_size // 2, win_size // 2 + 1)  # scikit-image's (win_size + 1) offsets
    table = np.exp(-0.5 * (grid[:, None] ** 2 + grid[None, :] ** 2) / sigma_spatial ** 2).ravel()
    colour = np.exp(-0.5 * np.linspace(0, top, bins, endpoint=False) ** 2 / sigma_color ** 2)
    padded = np.pad(img, ((r, r), (r, r), (0, 0)), mode=mode, **({"constant_values": cval} if mode == "constant"
                                                                  else {}))
    H, W = img.shape[:2]
    num, den = np.zeros_like(img), np.zeros((H, W))
    for a in range(2 * r + 1):
        for b in range(2 * r + 1):
            v = padded[a:a + H, b:b + W]
            dist = np.sqrt(((v - img) ** 2).sum(-1))
            if skimage_tables:
                wc = colour[np.minimum((dist * ((bins // C) / top)).astype(np.int64), bins - 1)]
            else:
                wc = np.exp(-0.5 * (dist / C) ** 2 / sigma_color ** 2)
            ws = (np.exp(-0.5 * ((a - r) ** 2 + (b - r) ** 2) / sigma_spatial ** 2) if centred
                  else table[a * win_size + b])
            num += v * (ws * wc)[..., None]
            den += ws * wc
    out = num / den[..., None]
    if skimage_tables and bottom < 0:
        out += bottom
    return out[..., 0] if np.ndim(image) == 2 else out


CASES = [{}, dict(sigma_spatial=2, sigma_color=0.1), dict(mode="reflect"), dict(mode="edge", win_size=5),
         dict(mode="wrap", sigma_color=0.3), dict(mode="symmetric", bins=50, win_size=9)]


@pytest.mark.parametrize("options", CASES)
def test_reference_reproduces_skimage(options):
    image = img_as_float(data.camera())[200:240, 250:300]
    np.testing.assert_allclose(reference_bilateral(image, skimage_tables=True, centred=False, **options),
                               sk_bilateral(image, **options), rtol=0, atol=1e-12)
    rgb = img_as_float(data.astronaut())[200:230, 220:260]
    np.testing.assert_allclose(reference_bilateral(rgb, skimage_tables=True, centred=False, **options),
                               sk_bilateral(rgb, channel_axis=-1, **options), rtol=0, atol=1e-12)


@pytest.mark.parametrize("options", CASES)
def test_equals_the_direct_formula(options):
    rng = np.random.default_rng(1)
    image = img_as_float(data.camera())[100:160, 300:345] + 0.05 * rng.standard_normal((60, 45))
    np.testing.assert_allclose(denoise_bilateral(image, **options), reference_bilateral(image, **options),
                               rtol=0, atol=1e-9)
    rgb = img_as_float(data.astronaut())[200:240, 220:250]
    out = denoise_bilateral(np.moveaxis(rgb, -1, 0), channel_axis=0, **options)
    np.testing.assert_allclose(np.moveaxis(out, 0, -1), reference_bilateral(rgb, **options), rtol=0, atol=1e-9)


def test_psnr_against_skimage():
    rng = np.random.default_rng(0)
    clean = img_as_float(data.camera())
    noisy = np.clip(clean + 0.1 * rng.standard_normal(clean.shape), 0, 1)

    def psnr(img):
        return peak_signal_noise_ratio(clean, img, data_range=1.0)

    # a flat position kernel (scikit-image's docstring example): its position table plays no part
    for options in [dict(sigma_color=0.1, sigma_spatial=15, win_size=5), dict(sigma_spatial=15, win_size=5)]:
        assert abs(psnr(denoise_bilateral(noisy, **options)) - psnr(sk_bilateral(noisy, **options))) < 0.2
    # the defaults (sigma_spatial=1): against scikit-image's colour table with a centred position kernel
    crop = noisy[128:384, 128:384]
    clean = clean[128:384, 128:384]
    assert abs(psnr(denoise_bilateral(crop)) - psnr(reference_bilateral(crop, skimage_tables=True))) < 0.2
    rgb = img_as_float(data.astronaut())[:256, :256]
    noisy = np.clip(rgb + 0.1 * rng.standard_normal(rgb.shape), 0, 1)
    options = dict(sigma_color=0.05, sigma_spatial=15, win_size=5)
    assert abs(peak_signal_noise_ratio(rgb, denoise_bilateral(noisy, channel_axis=-1, **options), data_range=1.0)
               - peak_signal_noise_ratio(rgb, sk_bilateral(noisy, channel_axis=-1, **options), data_range=1.0)) < 0.2


def test_is_the_patch_engine_with_a_position_kernel():
    """One-pixel patches and a Gaussian kernel in position: the engine's pass is the filter (no padding
    at the border: the window clipped to the image, as non-local means clips it)."""
    rng = np.random.default_rng(2)
    image = rng.random((12, 1, 15, 2))
    sigma_s, sigma_c, r = 1.5, 0.2, 3
    mean, log_w = patch_local_mean(image, [np.ones(1)] * 3, (r, 0, r), sigma_c * math.sqrt(2 * 2),
                                   position=Kernel("gaussian", bandwidth=sigma_s))
    img = image[:, 0]
    for x in [(0, 0), (5, 7), (11, 14)]:
        ys = [(a, b) for a in range(12) for b in range(15) if abs(a - x[0]) <= r and abs(b - x[1]) <= r]
        w = np.array([np.exp(-((a - x[0]) ** 2 + (b - x[1]) ** 2) / (2 * sigma_s ** 2)
                             - np.sum((img[a, b] - img[x]) ** 2) / 4 / (2 * sigma_c ** 2)) for a, b in ys])
        v = np.array([img[a, b] for a, b in ys])
        np.testing.assert_allclose(mean[x[0], 0, x[1]], w @ v / w.sum(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(log_w[x[0], 0, x[1]], np.log(w.sum()), rtol=1e-12)
    # a compact kernel in position skips the shifts where it vanishes: the uniform one of radius 1
    # is the cross of the 4 nearest pixels (a value kernel of width 1e6 weighs every value alike)
    cross, _ = patch_local_mean(image, [np.ones(1)] * 3, (r, 0, r), 1e6, position=Kernel("uniform", bandwidth=1.0))
    expected = (img[1:-1, 1:-1] + img[:-2, 1:-1] + img[2:, 1:-1] + img[1:-1, :-2] + img[1:-1, 2:]) / 5
    np.testing.assert_allclose(cross[1:-1, 0, 1:-1], expected, rtol=0, atol=1e-9)


def test_volumes_float32_constant_and_validation():
    rng = np.random.default_rng(3)
    vol = rng.random((6, 7, 8))
    out = denoise_bilateral(vol, sigma_color=0.2, win_size=3, mode="edge")
    assert out.shape == vol.shape and np.all(np.isfinite(out))
    f32 = denoise_bilateral(vol[0].astype(np.float32), sigma_color=0.2)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, denoise_bilateral(vol[0], sigma_color=0.2), atol=1e-6)
    np.testing.assert_array_equal(denoise_bilateral(np.full((5, 5), 0.3)), np.full((5, 5), 0.3))
    u8 = (vol[0] * 255).astype(np.uint8)
    np.testing.assert_allclose(denoise_bilateral(u8), denoise_bilateral(u8 / 255.0), rtol=0, atol=1e-15)
    for bad, match in [(dict(mode="nearest"), "mode"), (dict(sigma_spatial=0), "sigma_spatial"),
                       (dict(sigma_color=-1.0), "sigma_color"), (dict(win_size=0), "win_size"),
                       (dict(bins=0), "bins")]:
        with pytest.raises(ValueError, match=match):
            denoise_bilateral(vol[0], **bad)
    with pytest.raises(ValueError, match="image must be"):
        denoise_bilateral(rng.random((3, 4, 5, 6)))
    with pytest.raises(ValueError, match="position"):
        patch_local_mean(vol[..., None], [np.ones(1)] * 3, (1, 1, 1), 1.0, position=Kernel("softmax"))
