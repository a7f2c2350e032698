"""
Non-local means denoising
=========================

Non-local means replaces each pixel by a local mean over a search window whose weights come
from the similarity of the *patches* around the pixels, not from their distance:
``K(p, q) = exp(-max(|P_p - P_q|^2 - 2 sigma^2, 0) / h^2)``. localkit's implementation shares
scikit-image's slow-mode definitions; below it is compared with scikit-image's fast mode on the
camera image with Gaussian noise.
"""
import numpy as np
from skimage import data, img_as_float, transform
from skimage.restoration import denoise_nl_means as skimage_nl_means

from localkit import denoise_nl_means
from localkit.plot import denoising_panels

clean = transform.resize(img_as_float(data.camera()), (256, 256), anti_aliasing=True)
rng = np.random.default_rng(0)
sigma = 0.08
noisy = clean + sigma * rng.standard_normal(clean.shape)

axes = denoising_panels({
    f"noisy (sigma={sigma})": noisy,
    "scikit-image (fast mode)": skimage_nl_means(noisy, h=0.8 * sigma, sigma=sigma),
    "localkit": denoise_nl_means(noisy, h=0.6 * sigma, sigma=sigma),
}, clean=clean)
axes[0].figure.set_size_inches(13, 3.8)
axes[0].figure.tight_layout()
