"""Sums of kernels with fixed non-negative weights, ``w1 * K1 + w2 * K2``.

.. math::

    K(x^*, x) = \\sum_k w_k K_k(x^*, x), \\qquad
    m(x^*) = \\frac{\\sum_k w_k S_k(v)}{\\sum_k w_k S_k(1)}, \\quad
    S_k(v) = \\sum_j c_j K_k(x^*, x_j) v_j

Each term ``K_k`` is any :class:`~localkit.Kernel` (a plain profile, a kernel on a group of
columns, a product); the engine streams each term's own sums and adds them in log-space
(:meth:`~localkit.engine.BoundKernel.sums`), never an ``(n_queries, n_samples)`` matrix. Every
profile has ``k(0) = 1``, so the weights compare the kernels' unnormalised heights.
"""
from __future__ import annotations

import numbers

import numpy as np

from .kernel import Kernel


def check_weight(weight, name="weight"):
    """A term's weight: a finite real number ``>= 0``."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f"{name} of a kernel in a sum must be a real number >= 0, got {weight!r}")
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"{name} of a kernel in a sum must be finite and >= 0, got {weight!r}")
    return float(weight)


class SumKernel(Kernel):
    """``sum_k w_k K_k``: kernels with fixed non-negative weights (built by ``*`` with a number and ``+``).

    ``terms`` are ``(w_k, K_k)`` pairs, each ``K_k`` a :class:`Kernel` (not a sum); at least one
    ``w_k > 0``. A sum times a kernel distributes, ``(w1 K1 + w2 K2) * K3 = w1 K1 K3 + w2 K2 K3``.

    >>> from localkit import Kernel
    >>> 0.3 * Kernel("gaussian", bandwidth=0.5) + 0.7 * Kernel("laplacian", bandwidth=2.0)
    0.3 * Kernel('gaussian', bandwidth=0.5) + 0.7 * Kernel('laplacian', bandwidth=2.0)
    """

    def __init__(self, terms):
        terms = tuple(terms)
        if not terms:
            raise ValueError("kernel: a sum of kernels needs at least one term, got none")
        checked = []
        for weight, kernel in terms:
            if not isinstance(kernel, Kernel):
                raise TypeError(f"kernel: the terms of a sum are localkit.Kernel instances, got {kernel!r}")
            if isinstance(kernel, SumKernel):
                checked.extend((check_weight(weight) * w, k) for w, k in kernel.terms)
                continue
            if kernel.is_softmax:
                raise ValueError("kernel='softmax' cannot be a term of a sum of distance kernels")
            checked.append((check_weight(weight), kernel))
        if not any(w > 0 for w, _ in checked):
            raise ValueError(f"weight: a sum of kernels needs a weight > 0, got {[w for w, _ in checked]}")
        self.terms = tuple(checked)
        self.name, self.n_neighbors, self.metric, self.p, self.features = "sum", None, "euclidean", 2, None
        self.bandwidth = tuple(k.bandwidth for _, k in self.terms)
        self.is_softmax, self.is_categorical, self.profile = False, False, None

    @property
    def weights(self):
        """``(w_1, ..., w_K)``."""
        return np.array([w for w, _ in self.terms])

    @property
    def kernels(self):
        """``(K_1, ..., K_K)``."""
        return tuple(k for _, k in self.terms)

    @property
    def composite(self):
        return True

    @property
    def factors(self):
        raise ValueError(f"{self!r} is a sum of kernels, not a product: it has terms, not factors")

    @property
    def compact(self):
        """True where every term is compact: the sum vanishes where all of them do."""
        return all(k.compact for w, k in self.terms if w > 0)

    @property
    def name_(self):
        return "sum"

    def __mul__(self, other):
        if isinstance(other, numbers.Real):  # bools refused by check_weight
            return SumKernel([(check_weight(other), self)])
        if not isinstance(other, Kernel):
            return NotImplemented
        if isinstance(other, SumKernel):
            return SumKernel([(w * v, k * l) for w, k in self.terms for v, l in other.terms])
        return SumKernel([(w, k * other) for w, k in self.terms])

    def __rmul__(self, other):
        if isinstance(other, Kernel):
            return SumKernel([(w, other * k) for w, k in self.terms])
        return self.__mul__(other)

    def resolved(self, samples, sample_weight=None):
        return SumKernel([(w, k.resolved(samples, sample_weight)) for w, k in self.terms])

    def with_feature_names(self, names):
        return SumKernel([(w, k.with_feature_names(names)) for w, k in self.terms])

    def columns(self, n_features):
        for _, k in self.terms:
            k.columns(n_features)  # each term checked on its own
        raise ValueError(f"{self!r} is a sum of kernels: its terms have columns, the sum has none")

    def log_density_normalizer(self, samples, sample_weight=None):
        """``log sum_k w_k Z_k`` with ``Z_k = exp(K_k.log_density_normalizer)`` the integral of
        each term: the density of a sum kernel is ``sum_k w_k S_k(1) / (n sum_k w_k Z_k)``, the
        mixture of the terms' densities with weights ``w_k Z_k / sum_l w_l Z_l``."""
        w = self.weights
        logs = np.array([k.log_density_normalizer(samples, sample_weight) for _, k in self.terms])
        with np.errstate(divide="ignore"):
            a = np.log(w) + logs
        top = np.max(a)
        return float(top + np.log(np.sum(np.exp(a - top))))

    def __call__(self, X, Y=None):
        """The dense matrix ``sum_k w_k K_k(X, Y)`` (small inputs)."""
        return sum(w * k(X, Y) for w, k in self.terms)

    def __repr__(self):
        def term(w, k):
            text = repr(k)
            return f"{w:g} * ({text})" if " * " in text else f"{w:g} * {text}"

        return " + ".join(term(w, k) for w, k in self.terms)

    def __reduce__(self):
        return SumKernel, (self.terms,)


__all__ = ["SumKernel", "check_weight"]
