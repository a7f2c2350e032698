"""The non-local block of Wang, Girshick, Gupta & He (CVPR 2018): a local mean over every position
of a feature map, with the localization kernel as a choice."""
from __future__ import annotations

import numbers

import torch
from torch import nn

from .functional import check_bandwidth, kernel_attention, resolve_kernel

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_POOL = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}
_NORM = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


class NonLocalBlock(nn.Module):
    """A non-local block: every position's output is a local mean over all positions.

    For a feature map ``x`` of shape ``(N, C, *spatial)`` with positions ``i, j``:

    .. math::

        y_i = \\frac{\\sum_j K(\\theta(x_i), \\phi(x_j))\\, g(x_j)}{\\sum_j K(\\theta(x_i), \\phi(x_j))},
        \\qquad z_i = W y_i + x_i

    ``theta``, ``phi`` and ``g`` are 1x1 convolutions to ``inter_channels``; ``W`` is a 1x1
    convolution back to ``in_channels`` (followed by batch norm with ``bn_layer``), initialised
    to zero so that a fresh block is the identity and can be inserted into a trained network.
    The weights come from the similarity of the embedded features, not from closeness in the
    domain: a non-local model. The paper's *embedded Gaussian* is ``kernel="softmax"``
    (``K = exp(<theta, phi> / h)``; ``bandwidth=1.0`` is the paper's unscaled form); any profile
    of ``|theta - phi| / h`` works too (``"gaussian"``: the
    paper's Gaussian on embeddings). The local mean runs through
    :func:`localkit.nn.kernel_attention`, whose fused path (softmax, Gaussian) never
    forms the ``L x L`` weight matrix: measured on a 128 x 128 map (16,384 positions), the
    forward pass adds a few MB where one dense float32 map takes 1 GiB.

    Parameters
    ----------
    in_channels : int
        Channels of the input feature map.
    dim : {1, 2, 3}, default=2
        Spatial dimensions of the input (sequences, images, volumes or videos).
    kernel : {"softmax", "gaussian", "laplacian", "cauchy", "epanechnikov", "tricube", "biweight", \
            "triweight", "triangular", "uniform", "cosine"}, default="softmax"
        ``"softmax"`` or a profile name (see :func:`localkit.nn.kernel_attention`).
    inter_channels : int or None, default=None
        Channels of ``theta``, ``phi`` and ``g``; ``None``: ``in_channels // 2`` (at least 1).
    sub_sample : bool, default=False
        Max-pool ``phi`` and ``g`` by 2 along every spatial axis (``L x L/2^dim`` pairs).
    bn_layer : bool, default=True
        Batch norm after ``W`` (its scale and shift start at zero); without it, ``W`` itself is
        zero at initialisation.
    bandwidth : float or None, default=None
        ``h``; None: the default of ``kernel_attention`` (``sqrt(inter_channels)`` for the softmax).

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import NonLocalBlock
    >>> block = NonLocalBlock(8, dim=2, kernel="gaussian")
    >>> x = torch.randn(2, 8, 5, 6)
    >>> bool(torch.equal(block(x), x))  # W starts at zero: the identity
    True
    """

    def __init__(self, in_channels, dim=2, kernel="softmax", inter_channels=None, sub_sample=False, bn_layer=True,
                 bandwidth=None):
        super().__init__()
        in_channels = _check_channels(in_channels, "in_channels")
        if dim not in _CONV or isinstance(dim, bool):
            raise ValueError(f"dim must be 1, 2 or 3 (spatial dimensions), got {dim!r}")
        inter = max(1, in_channels // 2) if inter_channels is None else _check_channels(inter_channels, "inter_channels")
        for name, flag in (("sub_sample", sub_sample), ("bn_layer", bn_layer)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.kernel = resolve_kernel(kernel)
        self.bandwidth = check_bandwidth(bandwidth)
        self.in_channels, self.inter_channels, self.dim = in_channels, inter, dim
        conv = _CONV[dim]
        self.theta = conv(in_channels, inter, 1)
        self.phi = conv(in_channels, inter, 1)
        self.g = conv(in_channels, inter, 1)
        if sub_sample:
            self.phi = nn.Sequential(self.phi, _POOL[dim](2))
            self.g = nn.Sequential(self.g, _POOL[dim](2))
        self.W = nn.Sequential(conv(inter, in_channels, 1), _NORM[dim](in_channels)) if bn_layer \
            else conv(inter, in_channels, 1)
        last = self.W[-1] if bn_layer else self.W
        nn.init.zeros_(last.weight)  # the paper's zero start: a fresh block is the identity
        nn.init.zeros_(last.bias)

    def forward(self, x):
        """``z = W y + x`` for ``x`` of shape ``(N, in_channels, *spatial)`` with ``dim`` spatial axes."""
        if not isinstance(x, torch.Tensor) or not torch.is_floating_point(x):
            raise TypeError(f"x must be a floating-point torch.Tensor, got {type(x).__name__}")
        if x.dim() != self.dim + 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (N, {self.in_channels}, {self.dim} spatial sizes), "
                             f"got {tuple(x.shape)}")
        n = x.shape[0]
        # (N, 1, L, inter), one head, contiguous: on a transposed view PyTorch's CPU attention leaves
        # its fused kernel for the dense map (2.3 GB at 128 x 128 positions, measured)
        tokens = lambda t: t.reshape(n, 1, self.inter_channels, -1).transpose(-1, -2).contiguous()
        y = kernel_attention(tokens(self.theta(x)), tokens(self.phi(x)), tokens(self.g(x)), self.kernel,
                             bandwidth=self.bandwidth)
        y = y.transpose(-1, -2).reshape(n, self.inter_channels, *x.shape[2:])
        return self.W(y) + x

    def extra_repr(self):
        return (f"in_channels={self.in_channels}, inter_channels={self.inter_channels}, dim={self.dim}, "
                f"kernel={self.kernel!r}, bandwidth={self.bandwidth}")


def _check_channels(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)
