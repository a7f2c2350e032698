"""localkit: the localization method as software.

Localization kernels and local means, local models and the localization trick, from which
kernel regression, kNN, LOESS, mean shift, relaxation labeling, Hopfield networks, locally
linear embedding, TSK fuzzy inference, denoisers, non-local means and attention follow.

Public names are imported lazily, so that ``import localkit`` stays fast and never imports
torch (``localkit.nn`` does, on demand).
"""
from importlib import import_module

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # kernels and engine
    "Kernel": "localkit.kernels",
    "local_mean": "localkit.engine",
    "local_sums": "localkit.engine",
    "kernel_density": "localkit.models.density",
    "KernelDensity": "localkit.models.density",
    # conditional distributions
    "ConditionalDensity": "localkit.models.conditional",
    "ConditionalModeClassifier": "localkit.models.conditional",
    "significance_test": "localkit.models.significance",
    "KernelQuantileRegressor": "localkit.models.quantile",
    # local means
    "LocalMeanRegressor": "localkit.models.regression",
    "LocalMeanClassifier": "localkit.models.classification",
    # the localization trick
    "LocalPolynomialRegressor": "localkit.models.polynomial",
    "Localized": "localkit.models.localized",
    "MetricLearningKernelRegressor": "localkit.models.metric_learning",
    # learned kernels for tables (PyTorch inside: the nn extra)
    "LearnedKernelRegressor": "localkit.models.learned_kernel",
    "LearnedKernelClassifier": "localkit.models.learned_kernel",
    # fixed points
    "MeanShift": "localkit.models.cluster",
    "RelaxationLabeling": "localkit.models.semi_supervised",
    "HopfieldNetwork": "localkit.models.memory",
    # geometry, rules, denoising
    "LocallyLinearEmbedding": "localkit.models.manifold",
    "LocalPCA": "localkit.models.manifold",
    "TSKFuzzyRegressor": "localkit.models.fuzzy",
    "TSKFuzzyClassifier": "localkit.models.fuzzy",
    "LocalMeanDenoiser": "localkit.models.denoise",
    "LazyAutoencoder": "localkit.models.denoise",
    "HierarchicalAutoencoder": "localkit.models.hierarchical",
    "LocalMeanTransformer": "localkit.models.layers",
    "denoise_nl_means": "localkit.models.nl_means",
    "denoise_bilateral": "localkit.models.nl_means",
    "NonLocalMeans": "localkit.models.nl_means",
    "kneighbors_graph": "localkit.models.graph",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in ("nn", "exceptions"):  # localkit.exceptions: the warning classes (LocalkitWarning, ...)
        return import_module(f"localkit.{name}")
    raise AttributeError(f"module 'localkit' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
