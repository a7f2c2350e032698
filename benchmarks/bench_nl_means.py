"""Non-local means: localkit's shift-streamed compiled loop against scikit-image's
``denoise_nl_means`` (fast mode for speed; slow mode, which shares our definitions, for agreement),
in one process, on scikit-image's camera image with Gaussian noise of known sigma."""

import numpy as np
from localkit._timing import median_time

TITLE = "Non-local means, 2-D grayscale, patch_size=7, patch_distance=11"


def _psnr(clean, img):
    from skimage.metrics import peak_signal_noise_ratio

    return peak_signal_noise_ratio(clean, img, data_range=1.0)


def run(quick=False):
    from localkit.engine.blocks import resolve_n_jobs
    from skimage import data, img_as_float, transform
    from skimage.restoration import denoise_nl_means as sk_nlm

    from localkit import denoise_nl_means

    sigma, repeat = 0.08, (3 if quick else 5)
    camera = img_as_float(data.camera())
    rng = np.random.default_rng(0)
    denoise_nl_means(camera[:32, :32], h=0.05)  # compile (or load the cache) outside the timing
    lines = [f"Camera (scikit-image), Gaussian noise sigma = {sigma} (known), our h = 0.6 sigma, medians of "
             f"{repeat} runs, localkit on {resolve_n_jobs(-1)} threads (scikit-image is single-threaded). "
             "The machine has 2 cores and was shared with other work while this ran.", "",
             "| image | peer | peer time | localkit time | peer / localkit | PSNR peer | PSNR localkit | "
             "max abs diff |", "|---|---|---|---|---|---|---|---|"]
    sizes = [256, 512] if quick else [256, 512, 1024]
    for n in sizes:
        clean = camera if n == 512 else transform.resize(camera, (n, n), anti_aliasing=True)
        noisy = clean + sigma * rng.standard_normal(clean.shape)
        ref, t_ref = median_time(lambda: sk_nlm(noisy, h=0.8 * sigma, sigma=sigma), repeat)
        ours, t = median_time(lambda: denoise_nl_means(noisy, h=0.6 * sigma, sigma=sigma, n_jobs=-1), repeat)
        lines.append(f"| {n}x{n} | skimage fast_mode=True | {t_ref:.3f} s | {t:.3f} s | {t_ref / t:.2f}x | "
                     f"{_psnr(clean, ref):.2f} | {_psnr(clean, ours):.2f} | {np.abs(ours - ref).max():.1e} (other definitions) |")
    n = 96 if quick else 128
    clean = transform.resize(camera, (n, n), anti_aliasing=True)
    noisy = clean + sigma * rng.standard_normal(clean.shape)
    ref, t_ref = median_time(lambda: sk_nlm(noisy, h=0.6 * sigma, sigma=sigma, fast_mode=False), 1)
    ours, t = median_time(lambda: denoise_nl_means(noisy, h=0.6 * sigma, sigma=sigma, n_jobs=-1), repeat)
    lines.append(f"| {n}x{n} | skimage fast_mode=False (one run) | {t_ref:.3f} s | {t:.3f} s | {t_ref / t:.1f}x | "
                 f"{_psnr(clean, ref):.2f} | {_psnr(clean, ours):.2f} | {np.abs(ours - ref).max():.1e} |")
    lines += ["", "Fast mode uses box patches and other border rules, so its output is not ours; slow mode "
              "shares our definitions (Gaussian patch weights, reflect padding, the window clipped at the "
              "border) and differs only by its approximate exp and its cut of weights below exp(-5). "
              "Memory: one accumulator per thread and a few strips, never image size x window size."]
    return "\n".join(lines)
