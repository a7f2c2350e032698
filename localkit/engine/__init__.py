"""The engine: the one place where kernel weights meet values (streaming weighted sums with an
online log-sum-exp, a dense and a neighbour path, leave-one-out)."""
from .blocks import block_sizes, map_blocks
from .local_mean import LocalSums, local_mean, local_sums, make_kernel
from .moments import LocalMoments, local_moments
from .stream import OnlineLogSumExp, augment

__all__ = ["LocalMoments", "LocalSums", "OnlineLogSumExp", "augment", "block_sizes", "local_mean", "local_moments", "local_sums",
           "make_kernel", "map_blocks"]
