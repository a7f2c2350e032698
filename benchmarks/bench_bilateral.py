"""The bilateral filter: localkit's ``denoise_bilateral`` (the patch engine with one-pixel patches
and a Gaussian kernel in position) against scikit-image's ``denoise_bilateral``, in one process,
interleaved, on scikit-image's 512 x 512 camera image with Gaussian noise."""

import os

import numpy as np
from localkit._timing import interleaved

TITLE = "Bilateral filter, 512x512 camera, against scikit-image"


def _psnr(clean, img):
    from skimage.metrics import peak_signal_noise_ratio

    return peak_signal_noise_ratio(clean, img, data_range=1.0)


def run(quick=False):
    from localkit.engine.blocks import resolve_n_jobs
    from skimage import data, img_as_float
    from skimage.restoration import denoise_bilateral as sk_bilateral

    from localkit import denoise_bilateral

    repeat = 3 if quick else 7
    clean = img_as_float(data.camera())
    rng = np.random.default_rng(0)
    noisy = np.clip(clean + 0.1 * rng.standard_normal(clean.shape), 0, 1)
    rgb = img_as_float(data.astronaut())
    noisy_rgb = np.clip(rgb + 0.1 * rng.standard_normal(rgb.shape), 0, 1)
    denoise_bilateral(noisy[:32, :32])  # compile (or load the cache) outside the timing
    lines = [f"Camera (scikit-image, 512x512) and astronaut (512x512x3), Gaussian noise 0.1 clipped to [0, 1]; "
             f"medians of {repeat} interleaved runs; localkit on {resolve_n_jobs(-1)} threads (scikit-image "
             "is single-threaded) and on 1 thread.", "",
             "| image | settings | skimage | localkit | localkit 1 thread | skimage / localkit | PSNR noisy | "
             "PSNR skimage | PSNR localkit |", "|---|---|---|---|---|---|---|---|---|"]
    cases = [("camera", clean, noisy, {}, "defaults (sigma_color = std, sigma_spatial = 1, win 7)"),
             ("camera", clean, noisy, dict(sigma_color=0.1, sigma_spatial=2), "sigma_color 0.1, sigma_spatial 2 (win 13)"),
             ("camera", clean, noisy, dict(sigma_color=0.1, sigma_spatial=15, win_size=5),
              "sigma_color 0.1, sigma_spatial 15, win 5 (flat in position)"),
             ("astronaut", rgb, noisy_rgb, dict(sigma_color=0.05, sigma_spatial=2, channel_axis=-1),
              "RGB, sigma_color 0.05, sigma_spatial 2")]
    for name, ref, img, options, what in cases:
        (t_sk, t_lk, t_one), (out_sk, out_lk, _) = interleaved(
            [lambda: sk_bilateral(img, **options), lambda: denoise_bilateral(img, n_jobs=-1, **options),
             lambda: denoise_bilateral(img, n_jobs=1, **options)], repeat, warmup=True)
        lines.append(f"| {name} | {what} | {t_sk * 1e3:.0f} ms | {t_lk * 1e3:.0f} ms | {t_one * 1e3:.0f} ms | "
                     f"{t_sk / t_lk:.1f}x | {_psnr(ref, img):.2f} | {_psnr(ref, out_sk):.2f} | "
                     f"{_psnr(ref, out_lk):.2f} |")
    lines += ["", "The PSNRs differ where scikit-image's position table matters: it is built on win_size + 1 "
              "offsets and read with a stride of win_size, so its position kernel is not centred (at "
              "sigma_spatial = 1 its impulse response peaks two pixels off the centre and gives the centre pixel "
              "almost no weight); with a flat position kernel (third row) the two agree (scikit-image's colour "
              "table of bins = 10000 against localkit's exact exponential). tests/test_bilateral.py holds the "
              "chain: a reference with scikit-image's tables reproduces it to 1e-12; ours equals the direct "
              "formula to 1e-9.", "",
              f"Load average (1 min) after the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."]
    return "\n".join(lines)
