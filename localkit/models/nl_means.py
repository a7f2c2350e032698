"""Non-local means: a local mean of pixels whose kernel is the similarity of their patches.

.. math::

    \\hat u(x) = \\frac{\\sum_y K(x, y)\\, u(y)}{\\sum_y K(x, y)}, \\qquad
    K(x, y) = \\exp\\Big(-\\frac{\\max(d^2(x, y) - 2\\sigma^2,\\ 0)}{h^2}\\Big)

over the pixels ``y`` of the search window, ``|y_k - x_k| <= patch_distance`` on every axis
(``2 * patch_distance + 1`` pixels per side, clipped at the image border), with the patch distance

.. math::

    d^2(x, y) = \\sum_{p} g(p)\\, \\frac{1}{C} \\sum_{c=1}^{C} \\big(u_c(x + p) - u_c(y + p)\\big)^2,
    \\qquad g(p) \\propto \\exp\\Big(-\\frac{|p|^2}{2 A^2}\\Big),\\ A = \\frac{s - 1}{4},\\ \\sum_p g = 1

over the ``s^k`` patch offsets ``p`` of a ``k``-D image (2-D, 3-D or 4-D), the image reflect-padded
by ``s // 2`` so that patches at the border exist. These are exactly the definitions of
scikit-image's ``denoise_nl_means(..., fast_mode=False)`` (Buades, Coll & Morel 2005), computed
without its approximations (it cuts weights once a partial distance exceeds 5 and uses an
approximate ``exp``), so its output differs from ours by up to a few 1e-2 (on [0, 1] images).

``fast_mode=True`` is Froment's (2014) and scikit-image's fast mode: the uniform patch weight
``g(p) = 1 / s^k``, whose patch sums are running sums of the squared differences (an integral
image's differences), ``O(1)`` per pixel and shift whatever the patch size. Where scikit-image's
fast mode differs, localkit keeps its own definitions: its box is the ``2 (s // 2)`` offsets
``-(s // 2) + 1 .. s // 2`` divided by ``s^k`` (localkit: the ``s`` offsets centred on the pixel),
the centre pixel weighs 2 there and 1 here, its search window reaches into the reflected border
(localkit's stops at the image's edge), and it cuts and approximates ``exp`` as above.

As a localization method: the kernel is non-local (patch similarity, not closeness of ``x``
and ``y``), the values are the pixels, the local model is the constant (a local mean). The sums
stream through the engine (:mod:`localkit.engine.patches`), one shift at a time, so memory never
grows with image size x window size, and the cost is ``image.size * (2 d + 1)^ndim / 2``
independent of the patch size, up to the separable patch filter.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context

from sklearn.utils import check_array as sk_check_array
from sklearn.utils._param_validation import StrOptions, validate_params

from .._params import N_JOBS_CONSTRAINT, Number, non_negative, positive
from ..engine import gaussian_patch_weights, patch_local_mean, uniform_patch_weights
from ..kernels import Kernel


#: the parameters of :func:`denoise_nl_means` and :class:`NonLocalMeans`
NL_MEANS_PARAMS = {
    "patch_size": positive(Integral),
    "patch_distance": non_negative(Integral),
    "h": positive(),
    "sigma": non_negative(),
    "channel_axis": [Number(Integral, None, None, closed="neither"), None],
    "fast_mode": ["boolean"],
    "n_jobs": N_JOBS_CONSTRAINT,
}


@validate_params({"image": ["array-like"], **NL_MEANS_PARAMS}, prefer_skip_nested_validation=True)
def denoise_nl_means(image, patch_size=7, patch_distance=11, h=0.1, sigma=0.0, channel_axis=None, *,
                     fast_mode=False, n_jobs=None):
    """Non-local means denoising of a 2-D image, a 3-D volume or a 4-D array, each grayscale or
    with channels.

    Parameters
    ----------
    image : array, 2-D, 3-D or 4-D (plus a channel axis when ``channel_axis`` is set)
        Float images are used as they are; integer and boolean images are scaled to [0, 1]
        (signed: ``x / max`` clipped at -1) as scikit-image's ``img_as_float`` does, so ``h`` and ``sigma`` mean the
        same as there.
    patch_size : int, default=7
        Side ``s`` of the patches; an even size is increased by one (as scikit-image does).
    patch_distance : int, default=11
        Search radius ``d``: the window has ``2 d + 1`` pixels per side.
    h : float, default=0.1
        Kernel width (cut-off distance in grey levels); ``h = 0.6 * sigma`` is a good start when
        ``sigma`` is given.
    sigma : float, default=0.0
        Standard deviation of the Gaussian noise; ``2 sigma^2`` is subtracted from the patch
        distance (the expected distance of two noisy copies of the same patch).
    channel_axis : int or None, default=None
        The axis of colour channels; the patch distance is averaged over channels.
    fast_mode : bool, default=False
        False: the Gaussian patch weight (scikit-image's ``fast_mode=False``). True: the uniform
        patch weight of Froment's algorithm (scikit-image's ``fast_mode=True``, its default), summed
        by running sums (see the module). ``h = 0.8 sigma`` is scikit-image's suggested start there.
    n_jobs : int or None, default=None
        Threads of the compiled loop (None: all cores).

    Returns
    -------
    denoised : array of the image's shape (float32 kept, otherwise float64)

    Notes
    -----
    Cost: ``image.size (2 d + 1)^k / 2`` pixel-shift pairs (the symmetry of the patch distance
    halves them), each ``O(k)`` with ``fast_mode=True`` and ``O(k s)`` with the Gaussian patch
    (its separable filter), ``k`` the image's spatial axes; memory: a few strips of the image per
    thread and one accumulator per thread.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import denoise_nl_means
    >>> rng = np.random.default_rng(0)
    >>> clean = np.zeros((40, 40)); clean[10:30, 10:30] = 1.0
    >>> noisy = clean + 0.2 * rng.standard_normal(clean.shape)
    >>> out = denoise_nl_means(noisy, patch_size=5, patch_distance=6, h=0.12, sigma=0.2)
    >>> bool(np.abs(out - clean).mean() < 0.5 * np.abs(noisy - clean).mean())
    True
    """
    # as the engine takes them; an even patch size rounds up to odd, as in scikit-image
    patch_size, patch_distance, h, sigma = int(patch_size) + (1 - int(patch_size) % 2), int(patch_distance), h, sigma
    img, axis = _as_float_image(image, channel_axis, spatial=(2, 3, 4))
    out_dtype = img.dtype
    k = img.ndim - 1
    weights = (uniform_patch_weights if fast_mode else gaussian_patch_weights)(patch_size, k)
    mean, _ = patch_local_mean(img, weights, (patch_distance,) * k, h, offset=2.0 * sigma * sigma, n_jobs=n_jobs)
    mean = mean.astype(out_dtype, copy=False)
    return mean[..., 0] if axis is None else np.moveaxis(mean, -1, axis)


#: the parameters of :func:`denoise_bilateral`
BILATERAL_PARAMS = {
    "win_size": [*positive(Integral), None],
    "sigma_color": [*positive(), None],
    "sigma_spatial": positive(),
    "bins": positive(Integral),
    "mode": [StrOptions({"constant", "edge", "symmetric", "reflect", "wrap"})],
    "cval": [Number(Real, None, None, closed="neither")],
    "channel_axis": [Number(Integral, None, None, closed="neither"), None],
    "n_jobs": N_JOBS_CONSTRAINT,
}


@validate_params({"image": ["array-like"], **BILATERAL_PARAMS}, prefer_skip_nested_validation=True)
def denoise_bilateral(image, win_size=None, sigma_color=None, sigma_spatial=1, bins=10000, mode="constant", cval=0,
                      *, channel_axis=None, n_jobs=None):
    r"""The bilateral filter (Tomasi & Manduchi, 1998): a local mean of pixels with a product kernel
    of space and value.

    .. math::

        \hat u(x) = \frac{\sum_y K(x, y)\, u(y)}{\sum_y K(x, y)}, \qquad
        K(x, y) = \exp\Big(-\frac{|y - x|^2}{2 \sigma_s^2}\Big)
                  \exp\Big(-\frac{(|u(y) - u(x)| / C)^2}{2 \sigma_c^2}\Big)

    over the ``y`` of the centred window ``|y_k - x_k| <= r``, ``r = (win_size - 1) // 2``, the
    image padded by ``r`` as ``numpy.pad(mode=mode)`` pads it (``cval`` for "constant"), with
    ``|u(y) - u(x)|`` the euclidean distance of the ``C`` channels' values. As a localization
    method: the kernel ``Kernel("gaussian", bandwidth=sigma_spatial)`` of the position times a
    Gaussian kernel of the value, streamed through the patch engine
    (:func:`localkit.engine.patch_local_mean` with one-pixel patches and a kernel in position).

    Parameters
    ----------
    image : array, 2-D or 3-D (plus a channel axis when ``channel_axis`` is set)
        Float images as they are; integer images scaled to [0, 1] (signed: [-1, 1]) as
        scikit-image's ``img_as_float`` does, so that ``sigma_color`` means the same.
    win_size : int or None, default=None
        The window's side; None: ``max(5, 2 ceil(3 sigma_spatial) + 1)``.
    sigma_color : float or None, default=None
        ``sigma_c``, the width of the value kernel; None: the standard deviation of the image.
    sigma_spatial : float, default=1
        ``sigma_s``, the width of the position kernel, in pixels.
    bins : int, default=10000
        Accepted for scikit-image's signature; the value kernel is evaluated exactly here (the
        limit of many bins), see the notes.
    mode : {"constant", "edge", "symmetric", "reflect", "wrap"}, default="constant"
        How the image is extended beyond its border (``numpy.pad``'s modes).
    cval : float, default=0
        The value beyond the border for ``mode="constant"``.
    channel_axis : int or None, default=None
        The axis of colour channels.
    n_jobs : int or None, default=None
        Threads of the compiled loop (None: all cores).

    Returns
    -------
    denoised : array of the image's shape (float32 kept, otherwise float64)

    Notes
    -----
    These are the definitions of scikit-image's ``denoise_bilateral`` (its signature and
    defaults; the value distance divided by the number of channels as there), with three
    differences: scikit-image looks the value kernel up in a table of ``bins`` values of
    ``|u(y) - u(x)|`` rounded down (to steps of ``max(u) / bins``; the channels' count enters as
    ``bins // C``), where localkit evaluates the exponential; its table of position weights is
    built on ``win_size + 1`` offsets ``-(win_size + 1) // 2 .. (win_size - 1) // 2`` and read
    with a stride of ``win_size``, so that its position kernel is not centred on ``x`` (localkit's
    is: ``exp(-|y - x|^2 / 2 sigma_s^2)``); and for images with negative values and
    ``mode="constant"`` it pads the image shifted to a minimum of 0. 3-D images (volumes) are
    accepted here, with a cubic window. A constant image is returned as it is (as a float image).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import denoise_bilateral
    >>> step = np.zeros((20, 20)); step[:, 10:] = 1.0
    >>> noisy = step + 0.05 * np.random.default_rng(0).standard_normal(step.shape)
    >>> out = denoise_bilateral(noisy, sigma_color=0.1, sigma_spatial=2, mode="edge")
    >>> bool(np.abs(out - step).mean() < 0.5 * np.abs(noisy - step).mean())  # the edge is kept
    True
    """
    img, axis = _as_float_image(image, channel_axis)
    out_dtype, spatial, n_channels = img.dtype, img.shape[:-1], img.shape[-1]
    if img.min() == img.max():
        img = img.copy()  # nothing to smooth (scikit-image returns the image itself)
        return img[..., 0] if axis is None else np.moveaxis(img, -1, axis)
    if win_size is None:
        win_size = max(5, 2 * math.ceil(3 * sigma_spatial) + 1)
    r = (int(win_size) - 1) // 2
    if sigma_color is None:
        sigma_color = float(np.std(img, dtype=np.float64))
    padded = np.pad(img, [(r, r)] * len(spatial) + [(0, 0)], mode=mode,
                    **({"constant_values": cval} if mode == "constant" else {}))
    vol, window = (padded[:, None], (r, 0, r)) if len(spatial) == 2 else (padded, (r, r, r))
    # the engine's value kernel is exp(-(1/C) sum_c du_c^2 / h^2): h^2 = 2 C sigma_c^2 gives (|du| / C)^2 / 2 sigma_c^2
    h = sigma_color * math.sqrt(2.0 * n_channels)
    mean, _ = patch_local_mean(vol, [np.ones(1)] * 3, window, h, n_jobs=n_jobs,
                               position=Kernel("gaussian", bandwidth=float(sigma_spatial)))
    mean = mean.reshape(padded.shape)[tuple(slice(r, r + n) for n in spatial)].astype(out_dtype, copy=False)
    return mean[..., 0] if axis is None else np.moveaxis(mean, -1, axis)


def _as_float_image(image, channel_axis, spatial=(2, 3)):
    """``(float image with channels last, channel axis or None)``, checked: ``spatial`` the
    numbers of spatial axes taken."""
    # scikit-learn's checks (sparse, complex, object, empty, NaN/inf), then the image's own
    arr = sk_check_array(image, dtype="numeric", allow_nd=True, ensure_all_finite=True, input_name="image")
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool:
        arr = _int_to_float(arr)
    elif arr.dtype == np.float16:  # computed and returned in float32, as scikit-image does
        arr = arr.astype(np.float32)
    elif arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    ndim = tuple(n + (channel_axis is not None) for n in spatial)
    if arr.ndim not in ndim:
        what = " or ".join(f"{n}-D" for n in spatial) + (" plus a channel axis" if channel_axis is not None else "")
        raise ValueError(f"image must be {what} (an array with {' or '.join(map(str, ndim))} axes), "
                         f"got an array of shape {arr.shape}")
    if channel_axis is None:
        return arr[..., None], None
    if not -arr.ndim <= channel_axis < arr.ndim:
        raise ValueError(f"channel_axis={channel_axis} is out of range for an image with {arr.ndim} axes")
    axis = channel_axis % arr.ndim
    return np.moveaxis(arr, axis, -1), axis


def _int_to_float(arr):
    """scikit-image's ``img_as_float`` for integer images: unsigned to [0, 1], signed to [-1, 1]."""
    if arr.dtype == bool:
        return arr.astype(np.float64)
    out = arr.astype(np.float64) / np.iinfo(arr.dtype).max
    return np.maximum(out, -1.0, out=out)  # the most negative signed value maps to -1


class NonLocalMeans(TransformerMixin, BaseEstimator):
    """Non-local means as a stateless transformer: ``transform(image)`` is
    :func:`localkit.denoise_nl_means` with these parameters (see there for the formula).

    ``X`` is one image, not a table of samples: a 2-D array is a grayscale image, and with
    ``channel_axis`` a colour image; 3-D arrays are volumes, 4-D arrays volumes in time (or any
    fourth axis). ``fit`` only checks the parameters
    and the image (nothing is learned).

    Parameters
    ----------
    patch_size : int, default=7
        Side ``s`` of the patches; an even size is increased by one (as scikit-image does).
    patch_distance : int, default=11
        Search radius ``d``: the window has ``2 d + 1`` pixels per side.
    h : float, default=0.1
        Kernel width (cut-off distance in grey levels).
    sigma : float, default=0.0
        Standard deviation of the Gaussian noise; ``2 sigma^2`` is subtracted from the patch
        distance.
    channel_axis : int or None, default=None
        The axis of colour channels; the patch distance is averaged over channels.
    fast_mode : bool, default=False
        The uniform patch of Froment's algorithm (see :func:`localkit.denoise_nl_means`).
    n_jobs : int or None, default=None
        Threads of the compiled loop (None: all cores).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import NonLocalMeans
    >>> noisy = np.random.default_rng(0).normal(0.5, 0.1, size=(32, 32))
    >>> NonLocalMeans(patch_size=5, patch_distance=4, h=0.08, sigma=0.1).fit_transform(noisy).shape
    (32, 32)
    """

    def __init__(self, patch_size=7, patch_distance=11, h=0.1, sigma=0.0, channel_axis=None, fast_mode=False,
                 n_jobs=None):
        self.patch_size = patch_size
        self.patch_distance = patch_distance
        self.h = h
        self.sigma = sigma
        self.channel_axis = channel_axis
        self.fast_mode = fast_mode
        self.n_jobs = n_jobs

    _parameter_constraints: dict = NL_MEANS_PARAMS

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Check the parameters and the image. Returns ``self``."""
        _as_float_image(X, self.channel_axis, spatial=(2, 3, 4))
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """The denoised image, of ``X``'s shape."""
        return denoise_nl_means(X, self.patch_size, self.patch_distance, self.h, self.sigma,
                                self.channel_axis, fast_mode=self.fast_mode, n_jobs=self.n_jobs)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
