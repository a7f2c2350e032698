"""kernel_density on PyTorch tensors (array-API dispatch) against the NumPy path: every way a
bandwidth can be given, in 1, 2 and 4 dimensions, and the dtype it returns."""
import numpy as np
import pytest
from sklearn.datasets import load_iris

from localkit import Kernel, KernelDensity, kernel_density

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def iris():
    return load_iris().data


def bandwidths(d):
    """Every form a fixed bandwidth or a rule takes: (id, value for the NumPy call, value for the tensor call)."""
    per_feature = np.linspace(0.4, 0.9, d)
    return [("float", 0.7, 0.7), ("int", 1, 1), ("numpy scalar", np.float64(0.7), np.float64(0.7)),
            ("0-d array", np.array(0.7), np.array(0.7)), ("0-d tensor", 0.7, torch.tensor(0.7, dtype=torch.float64)),
            ("list", per_feature.tolist(), per_feature.tolist()), ("array", per_feature, per_feature),
            ("tensor", per_feature, torch.tensor(per_feature)), ("scott", "scott", "scott"),
            ("silverman", "silverman", "silverman")]


@pytest.mark.parametrize("d", [1, 2, 4])
@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_bandwidth_form_on_tensors_equals_numpy(dispatch, iris, d, kernel, weighted):
    """A scalar h counts d times in the normaliser sum_k log h_k (it counted once on tensors: off by
    h^(d-1), 0.1761 for 0.3523 at h=0.5 in 2-D); per-feature arrays and rules were right."""
    S, Q = iris[:, :d], iris[:40, :d] + 0.05
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(S)) if weighted else None
    wt = None if w is None else torch.tensor(w)
    for name, bw, bw_t in bandwidths(d):
        ref = kernel_density(Q, S, kernel, bw, log=True, sample_weight=w)
        got = kernel_density(torch.tensor(Q), torch.tensor(S), kernel, bw_t, log=True, sample_weight=wt)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64, name
        np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-12, err_msg=name)
        if not isinstance(bw, str):  # the same bandwidth inside a Kernel
            got = kernel_density(torch.tensor(Q), torch.tensor(S), Kernel(kernel, bandwidth=np.asarray(bw)),
                                 log=True, sample_weight=wt)
            np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-12, err_msg=f"Kernel({name})")
        p = kernel_density(torch.tensor(Q), torch.tensor(S), kernel, bw_t, sample_weight=wt)
        np.testing.assert_allclose(p.numpy(), np.exp(ref), rtol=1e-12, atol=0, err_msg=name)


def test_scalar_bandwidth_in_2d_is_the_product_of_normal_densities(dispatch):
    """The sweep's reproducer: two samples, one query, h = 0.5, against scipy's normal pdf."""
    from scipy.stats import norm

    X, Q = np.array([[0.0, 0.0], [1.0, 0.5]]), np.array([[0.2, 0.1]])
    exact = np.mean([norm.pdf(Q[0], x, 0.5).prod() for x in X])  # 0.35228...
    for bw in (0.5, [0.5, 0.5]):
        got = kernel_density(torch.tensor(Q), torch.tensor(X), bandwidth=bw)
        assert float(got[0]) == pytest.approx(exact, rel=1e-14)
    assert float(kernel_density(Q, X, bandwidth=0.5)[0]) == pytest.approx(exact, rel=1e-14)


@pytest.mark.parametrize("bw", [0.7, "scott"])
@pytest.mark.parametrize("log", [False, True])
def test_float32_in_float32_out_on_numpy_and_tensors_alike(dispatch, iris, bw, log):
    """The function keeps the samples' float32 on both paths (NumPy 2 promoted the NumPy path to
    float64 through its float64 normaliser), to float32's accuracy."""
    S, Q = iris[:, :2], iris[:40, :2] + 0.05
    ref = kernel_density(Q, S, bandwidth=bw, log=log)
    got_np = kernel_density(Q.astype(np.float32), S.astype(np.float32), bandwidth=bw, log=log)
    got_t = kernel_density(torch.tensor(Q, dtype=torch.float32), torch.tensor(S, dtype=torch.float32),
                           bandwidth=bw, log=log)
    assert got_np.dtype == np.float32 and got_t.dtype == torch.float32
    np.testing.assert_allclose(got_np, ref, rtol=1e-5)
    np.testing.assert_allclose(got_t.numpy(), got_np, rtol=1e-5)


def test_float32_numpy_function_and_estimator_dtypes(iris):
    """kernel_density: float32 in, float32 out (also with float64 sample weights); the estimator's
    score_samples is float64 whatever the input, as scikit-learn's KernelDensity.score_samples."""
    from sklearn.neighbors import KernelDensity as SkKernelDensity

    S = iris[:, :3].astype(np.float32)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(S))
    assert kernel_density(S[:5], S, bandwidth=0.7, sample_weight=w).dtype == np.float32
    assert kernel_density(S[:5].astype(np.float64), S, bandwidth=0.7).dtype == np.float32  # the samples' dtype
    assert kernel_density(S[:5], S.astype(np.float64), bandwidth=0.7).dtype == np.float64
    sk = SkKernelDensity(bandwidth=0.7).fit(S).score_samples(S[:5])
    ours = KernelDensity(bandwidth=0.7).fit(S).score_samples(S[:5])
    assert sk.dtype == ours.dtype == np.float64
    np.testing.assert_allclose(ours, sk, rtol=1e-6)
