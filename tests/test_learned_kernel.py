"""LearnedKernelRegressor / LearnedKernelClassifier (issue 38): the leave-one-out gradient, the
engine binding (loo_predict, the identity embedding = LocalMeanRegressor), reproducibility, the
scikit-learn contract, and the table's checks (categories, NaN, columns)."""
import math
import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris
from sklearn.utils.estimator_checks import check_estimator

torch = pytest.importorskip("torch")

from localkit import LearnedKernelClassifier, LearnedKernelRegressor, LocalMeanRegressor  # noqa: E402
from localkit.kernels.profiles import get_profile  # noqa: E402
from localkit.nn import explain_attention  # noqa: E402
from localkit.nn import tabular as net  # noqa: E402

#: a small, fast configuration (the defaults are for real tables)
SMALL = dict(n_components=8, d_embedding=4, n_frequencies=4, d_block=16, batch_size=64, max_epochs=3,
             n_ensembles=1, random_state=0)


def _diabetes(n=150):
    X, y = load_diabetes(return_X_y=True)
    return X[:n], y[:n]


def _frame(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.uniform(size=n),
                      "c": pd.Categorical(rng.choice(["x", "y", "z"], n)), "d": rng.choice(["u", "v"], n)})
    y = X["a"] + (X["c"] == "y") * 2.0 + (X["d"] == "u") + 0.1 * rng.normal(size=n)
    return X, y.to_numpy()


@pytest.mark.parametrize("kernel", ["laplacian", "gaussian", "cauchy"])
@pytest.mark.parametrize("kind", ["squared", "log"])
def test_loo_gradient_matches_finite_differences(kernel, kind):
    """The leave-one-out loss through the embedding, the bandwidth, the local-linear slope
    (squared) and the Li-Racine factors (log): autograd against central differences
    (torch.autograd.gradcheck, float64), for every parameter of a tiny model."""
    torch.manual_seed(0)
    emb = net.Embedding(3, [3], embedding="plr", n_components=4, n_frequencies=2, frequency_scale=0.5,
                        d_embedding=3, n_blocks=1, d_block=5, dropout=0.0)
    model = net.LearnedKernel(emb, 0.7, 2 if kind == "log" else 1, kind == "squared", 4,
                              n_levels=[3] if kind == "log" else None).double()
    x = torch.randn(9, 3, dtype=torch.float64)
    codes = torch.randint(1, 4, (9, 1))  # seen levels (the unseen row 0 is fixed at zero: no gradient)
    rows = torch.arange(9)
    q, cand = rows[:4], rows[2:]
    same = q[:, None] == cand[None]
    if kind == "log":
        targets = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1, 1])
        values = torch.nn.functional.one_hot(targets, 2).double()
    else:
        targets = values = torch.randn(9, 1, dtype=torch.float64)
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in model.named_parameters())

    def loss(*flat):
        state = dict(zip(names, flat))
        z = torch.func.functional_call(model.embedding, {k[len("embedding."):]: v for k, v in state.items()
                                                         if k.startswith("embedding.")}, (x, codes))
        factors = None
        if "mismatch" in state:
            factors = (codes[q], codes[cand], -torch.nn.functional.softplus(state["mismatch"]))
        return net.local_mean_loss(z[q], z[cand], values[cand], targets[q], kind, state["log_h"], kernel, same,
                                   factors, state.get("slope"))

    assert torch.autograd.gradcheck(loss, params, eps=1e-6, atol=1e-6, rtol=1e-4)


def _formed_local_mean(zq, zc, values, log_h, kernel, same=None, factors=None):
    """The local mean with its weights formed and normalised by a softmax (differentiable): the
    formula :func:`net.local_mean` computes."""
    log_w = get_profile(kernel).log_k_for(torch)(torch.cdist(zq, zc) ** 2 * torch.exp(-2 * log_h))
    if factors is not None:
        cq, cc, log_r = factors
        log_w = log_w + ((cq[:, None, :] != cc[None, :, :]).to(log_w.dtype) * log_r).sum(-1)
    if same is not None:
        log_w = log_w.masked_fill(same, -math.inf)
    return torch.softmax(log_w, dim=1) @ values


@pytest.mark.parametrize("kernel", ["laplacian", "gaussian", "cauchy"])
def test_local_mean_leaves_the_query_out_and_weighs_mismatches(kernel):
    """``same`` drops a query's own row; ``factors`` multiply a weight by ``r_l`` per mismatched
    column (float64, the streamed path of kernel_attention)."""
    torch.manual_seed(1)
    z, values = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 2, dtype=torch.float64)
    codes = torch.randint(1, 4, (7, 2))
    log_r = torch.tensor([-0.3, -1.7], dtype=torch.float64)
    same = torch.eye(7, dtype=torch.bool)
    log_h = torch.tensor(math.log(0.8), dtype=torch.float64)
    ours = net.local_mean(z, z, values, log_h, kernel, same, (codes, codes, log_r))
    ref = _formed_local_mean(z, z, values, log_h, kernel, same, (codes, codes, log_r))
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    row0 = _formed_local_mean(z[:1], z[1:], values[1:], log_h, kernel, None, (codes[:1], codes[1:], log_r))
    torch.testing.assert_close(ours[:1], row0, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("factors", [False, True], ids=["", "factors"])
@pytest.mark.parametrize("kernel", ["laplacian", "gaussian"])
def test_training_loss_on_disjoint_candidates_is_the_formed_loss(kernel, factors):
    """Candidates outside the batch (no mask): the float32 fused pass of the training loss, value
    and gradients (embeddings, bandwidth and the log Li-Racine factors, which the Laplacian's pass
    takes as a pair bias), against the float64 formula with weights formed."""
    torch.manual_seed(2)
    zq = torch.randn(40, 6, requires_grad=True)
    zc = torch.randn(90, 6, requires_grad=True)
    values, targets = torch.randn(90, 1), torch.randn(40, 1)
    log_h = torch.tensor(0.4, requires_grad=True)
    cq, cc = torch.randint(1, 4, (40, 2)), torch.randint(1, 5, (90, 2))
    log_r = torch.tensor([-0.4, -1.3], requires_grad=True)
    learned = (zq, zc, log_h, log_r) if factors else (zq, zc, log_h)
    args = (zq[None], zc[None], values[None], kernel)
    mask_or_bias = dict(pair_bias=net.mismatch_bias(cq, cc, log_r)) if factors else {}
    path = "compiled CPU pass" if kernel == "laplacian" else "dense SDPA" if factors else "SDPA"
    assert explain_attention(*args, bandwidth=torch.exp(log_h), **mask_or_bias).path == path
    loss = net.local_mean_loss(zq, zc, values, targets, "squared", log_h, kernel, None,
                               (cq, cc, log_r) if factors else None)
    loss.backward()
    ref_args = [t.detach().double().requires_grad_(True) for t in learned]
    zq64, zc64, log_h64 = ref_args[:3]
    ref_factors = (cq, cc, ref_args[3]) if factors else None
    ref = ((_formed_local_mean(zq64, zc64, values.double(), log_h64, kernel, None, ref_factors)
            - targets.double()) ** 2).mean()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    for ours, theirs in zip((t.grad for t in learned), ref_args):
        np.testing.assert_allclose(ours.double().numpy(), theirs.grad.numpy(), rtol=1e-3,
                                   atol=1e-4 * float(theirs.grad.abs().max()))


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_identity_untrained_equals_local_mean_regressor(kernel):
    X, y = _diabetes(300)
    ours = LearnedKernelRegressor(kernel=kernel, embedding="identity", scaling=None, bandwidth=0.08,
                                  max_epochs=0).fit(X, y)
    ref = LocalMeanRegressor(kernel=kernel, bandwidth=0.08).fit(X, y)
    Q = load_diabetes().data[300:]
    np.testing.assert_allclose(ours.predict(Q), ref.predict(Q), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(ours.loo_predict(), ref.loo_predict(), rtol=1e-12, atol=1e-9)


def test_identity_with_categories_is_the_one_hot_local_mean():
    X, y = _frame()
    ours = LearnedKernelRegressor(embedding="identity", scaling=None, bandwidth=0.5, max_epochs=0).fit(X, y)
    onehot = np.c_[X[["a", "b"]].to_numpy(), (X["c"].to_numpy()[:, None] == np.array(["x", "y", "z"])),
                   (X["d"].to_numpy()[:, None] == np.array(["u", "v"]))].astype(float)
    ref = LocalMeanRegressor(kernel="laplacian", bandwidth=0.5).fit(onehot, y)
    np.testing.assert_allclose(ours.predict(X), ref.predict(onehot), rtol=1e-12)


@pytest.mark.parametrize("local_linear", [False, True])
@pytest.mark.filterwarnings("ignore::localkit.exceptions.BandwidthWarning")  # briefly trained: h wide
def test_loo_predict_equals_refits_without_the_row(local_linear):
    """At the learned (fixed) embedding, leaving row i out of the bound local mean is the local
    mean of the other rows, refitted, at f(x_i)."""
    X, y = _diabetes(120)
    est = LearnedKernelRegressor(**SMALL, local_linear=local_linear).fit(X, y)
    Z, h = est.embedding_[0].astype(np.float64), float(est.bandwidth_[0])
    slope = est.members_[0].slope
    values = y if slope is None else y - Z @ slope[:, 0]
    loo = est.loo_predict()
    for i in (0, 17, 119):
        keep = np.arange(len(y)) != i
        ref = LocalMeanRegressor(kernel="laplacian", bandwidth=h).fit(Z[keep], values[keep]).predict(Z[i:i + 1])[0]
        if slope is not None:
            ref += Z[i] @ slope[:, 0]
        np.testing.assert_allclose(loo[i], ref, rtol=1e-4)


@pytest.mark.filterwarnings("ignore::localkit.exceptions.BandwidthWarning")  # briefly trained: h wide
def test_classifier_loo_predict_proba_equals_refits():
    X, y = load_iris(return_X_y=True)
    est = LearnedKernelClassifier(**SMALL).fit(X, y)
    Z, h = est.embedding_[0].astype(np.float64), float(est.bandwidth_[0])
    loo = est.loo_predict_proba()
    onehot = np.eye(3)[y]
    for i in (3, 80):
        keep = np.arange(len(y)) != i
        ref = LocalMeanRegressor(kernel="laplacian", bandwidth=h).fit(Z[keep], onehot[keep]).predict(Z[i:i + 1])[0]
        np.testing.assert_allclose(loo[i], ref, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(loo.sum(1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("local_linear", [False, True])
@pytest.mark.filterwarnings("ignore::localkit.exceptions.BandwidthWarning")  # briefly trained: h wide
def test_predict_is_the_bound_local_mean_of_the_embedded_rows(local_linear):
    """``sum_i w_i (y_i + (f(x*) - f(x_i)) t)``: the local mean of ``y_i - f(x_i) t`` plus ``f(x*) t``."""
    X, y = _diabetes(150)
    est = LearnedKernelRegressor(**SMALL, local_linear=local_linear).fit(X[:100], y[:100])
    Z, Zq, t = est.embedding_[0].astype(np.float64), est.embed(X[100:]).astype(np.float64), est.members_[0].slope
    assert (t is not None) == local_linear
    values, offset = (y[:100], 0.0) if t is None else (y[:100] - Z @ t[:, 0], Zq @ t[:, 0])
    ref = LocalMeanRegressor(kernel="laplacian", bandwidth=float(est.bandwidth_[0])).fit(Z, values).predict(Zq)
    np.testing.assert_allclose(est.predict(X[100:]), ref + offset, rtol=1e-4)


def test_local_linear_auto_learns_a_slope_where_the_embedding_is_learned():
    X, y = _diabetes(100)
    assert LearnedKernelRegressor(**SMALL).fit(X, y).members_[0].slope is not None
    identity = LearnedKernelRegressor(embedding="identity", max_epochs=0).fit(X, y)  # no slope, no error
    Z = identity.embedding_[0]
    np.testing.assert_allclose(identity.predict(X[:5]), LocalMeanRegressor(kernel="laplacian", bandwidth=1.0).fit(
        Z, y).predict(Z[:5]), rtol=1e-12)
    with pytest.raises(ValueError, match="local_linear"):
        LearnedKernelRegressor(local_linear="yes").fit(X, y)


def test_training_lowers_the_held_out_loss_and_learns_the_bandwidth():
    X, y = _diabetes(300)
    est = LearnedKernelRegressor(**{**SMALL, "max_epochs": 15}).fit(X, y)
    curve = est.loss_curves_[0]
    assert curve[est.best_epoch_[0] - 1] == curve.min() < curve[0]
    assert est.bandwidth_[0] > 0 and est.bandwidth_[0] != 1.0


@pytest.mark.parametrize("ema_epochs", [0.0, 2.0])
def test_the_kept_model_is_the_moving_average_of_the_trained_weights(monkeypatch, ema_epochs):
    """``ema_epochs``: the weights kept are ``a_k = d a_(k-1) + (1 - d) w_k`` over the optimiser's
    steps (``a_1 = w_1``, ``d = 1 - 1 / (ema_epochs x steps per epoch)``) at the end of the best
    epoch; ``ema_epochs=0`` keeps that epoch's weights as trained."""
    steps, names = [], []

    class Recording(torch.optim.AdamW):  # the weights after every step
        def step(self, closure=None):
            out = super().step(closure)
            steps.append([p.detach().clone() for group in self.param_groups for p in group["params"]])
            return out

    train = net.train

    def spy(model, *args, **kwargs):
        names.extend(name for name, _ in model.named_parameters())
        return train(model, *args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    monkeypatch.setattr(net, "train", spy)
    X, y = _diabetes(150)
    est = LearnedKernelRegressor(**{**SMALL, "max_epochs": 6}, ema_epochs=ema_epochs, refit_bandwidth=False,
                                 patience=6).fit(X, y)
    per_epoch = math.ceil((150 - round(0.15 * 150)) / SMALL["batch_size"])
    assert len(steps) == per_epoch * est.n_epochs_[0]
    kept = steps[:per_epoch * est.best_epoch_[0]]
    d = 1 - 1 / (ema_epochs * per_epoch) if ema_epochs else 0.0
    average = kept[0]
    for w in kept[1:]:
        average = [d * a + (1 - d) * p for a, p in zip(average, w)]
    state = est.members_[0].state
    for name, a in zip(names, average):
        torch.testing.assert_close(state[name].float(), a, rtol=1e-5, atol=1e-6)
    if ema_epochs:  # the average is not the last weights
        assert any(not torch.allclose(state[name].float(), last) for name, last in zip(names, kept[-1]))


def test_auto_moving_average_beyond_ten_thousand_rows(monkeypatch):
    """``ema_epochs="auto"``: 3 epochs where more than 10,000 rows train, none up to
    10,000; a number is taken as given."""
    seen = []
    train = net.train

    def spy(model, table, schedule, **kwargs):
        seen.append(schedule.ema_epochs)
        return train(model, table, schedule, **kwargs)

    monkeypatch.setattr(net, "train", spy)
    rng = np.random.default_rng(0)
    for n in (10_000, 10_001):
        X = rng.normal(size=(n, 2))
        LearnedKernelRegressor(**{**SMALL, "max_epochs": 0}).fit(X, X[:, 0])
    LearnedKernelRegressor(**{**SMALL, "max_epochs": 0}, ema_epochs=1.5).fit(X, X[:, 0])
    assert seen == [0.0, 3.0, 1.5]


def test_same_random_state_same_model():
    X, y = _diabetes(150)
    a = LearnedKernelRegressor(**SMALL).fit(X, y)
    b = LearnedKernelRegressor(**SMALL).fit(X, y)
    np.testing.assert_array_equal(a.predict(X[:20]), b.predict(X[:20]))
    np.testing.assert_array_equal(a.embedding_[0], b.embedding_[0])
    c = LearnedKernelRegressor(**{**SMALL, "random_state": 1}).fit(X, y)
    assert not np.array_equal(a.embedding_[0], c.embedding_[0])


def test_torch_threads_and_random_state_are_restored():
    X, y = _diabetes(100)
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    LearnedKernelRegressor(**SMALL, n_jobs=1).fit(X, y)
    assert torch.get_num_threads() == threads
    torch.testing.assert_close(torch.rand(3), expected)  # the global generator untouched


def test_pickle_and_clone():
    X, y = _frame()
    est = LearnedKernelRegressor(**{**SMALL, "n_ensembles": 2}).fit(X, y)
    before = est.predict(X)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X), before)
    fresh = clone(est)
    assert fresh.get_params() == est.get_params() and not hasattr(fresh, "members_")


@pytest.mark.filterwarnings("ignore::localkit.exceptions.BandwidthWarning")  # briefly trained: h wide
def test_ensemble_is_the_mean_of_its_members():
    X, y = _diabetes(120)
    est = LearnedKernelRegressor(**{**SMALL, "n_ensembles": 2}).fit(X, y)
    members = [LocalMeanRegressor(kernel="laplacian", bandwidth=float(h)).fit(Z.astype(np.float64), y)
               for Z, h in zip(est.embedding_, est.bandwidth_)]
    Q = load_diabetes().data[200:210]
    # each member embeds the queries with its own network
    assert len(est.members_) == 2 and not np.array_equal(est.embedding_[0], est.embedding_[1])
    single = LearnedKernelRegressor(**SMALL).fit(X, y)
    assert est.predict(Q).shape == single.predict(Q).shape == (10,)
    assert all(m.n_features_in_ == 8 for m in members)


def test_members_trained_side_by_side_are_the_members_trained_in_turn(monkeypatch):
    """n_jobs=2: three members in two worker processes, a thread each, are the members that
    n_jobs=1 trains one after another, to the bit; the caller's threads and generator untouched."""
    from localkit.models import learned_kernel

    X, y = _frame(150)
    y = y > np.median(y)
    calls, joblib_parallel = [], learned_kernel.Parallel

    def parallel(**kwargs):
        calls.append(kwargs)
        return joblib_parallel(**kwargs)

    monkeypatch.setattr(learned_kernel, "Parallel", parallel)
    threads = torch.get_num_threads()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    side = LearnedKernelClassifier(**{**SMALL, "n_ensembles": 3, "n_jobs": 2}).fit(X, y)
    assert calls == [dict(n_jobs=2, backend="loky", max_nbytes=None)]
    assert torch.get_num_threads() == threads
    torch.testing.assert_close(torch.rand(3), expected)
    turn = LearnedKernelClassifier(**{**SMALL, "n_ensembles": 3, "n_jobs": 1}).fit(X, y)
    assert len(calls) == 1  # one thread: no processes
    for a, b in zip(side.embedding_, turn.embedding_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(side.bandwidth_, turn.bandwidth_)
    np.testing.assert_array_equal(side.predict_proba(X), turn.predict_proba(X))
    assert side.best_epoch_ == turn.best_epoch_ and side.n_epochs_ == turn.n_epochs_


def test_auto_ensemble_size():
    X, y = _diabetes(100)
    assert LearnedKernelRegressor(embedding="identity", max_epochs=0).fit(X, y).n_ensembles_ == 3
    # beyond 10,000 training rows: two members (the size alone decides; nothing is trained here)
    rng = np.random.RandomState(0)
    X_big, y_big = rng.normal(size=(10_001, 2)), rng.normal(size=10_001)
    assert LearnedKernelRegressor(embedding="identity", max_epochs=0).fit(X_big, y_big).n_ensembles_ == 2
    at_most = LearnedKernelRegressor(embedding="identity", max_epochs=0).fit(X_big[:10_000], y_big[:10_000])
    assert at_most.n_ensembles_ == 3
    assert LearnedKernelRegressor(embedding="identity", max_epochs=0, n_ensembles=2).fit(X, y).n_ensembles_ == 2


def test_explain_returns_the_rows_that_carry_the_prediction():
    X, y = _diabetes(150)
    est = LearnedKernelRegressor(**SMALL).fit(X, y)
    w, idx = est.explain(X[:4], n_rows=150)
    assert w.shape == idx.shape == (4, 150)
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)
    assert np.all(np.diff(w, axis=1) <= 0)
    # the prediction is sum_i w_i (y_i + (f(x*) - f(x_i)) t), the local-linear head's
    Z, t = est.embedding_[0], est.members_[0].slope[:, 0]
    corrected = y[idx] + (est.embed(X[:4]) @ t)[:, None] - (Z @ t)[idx]
    np.testing.assert_allclose((w * corrected).sum(1), est.predict(X[:4]), rtol=1e-4)
    w3, idx3 = est.explain(X[:4], n_rows=3)
    np.testing.assert_array_equal(idx3, idx[:, :3])
    with pytest.raises(ValueError, match="n_rows"):
        est.explain(X[:4], n_rows=0)


def test_classifier_on_a_dataframe_with_categories():
    X, y = _frame(200)
    labels = np.where(y > np.median(y), "high", "low")
    clf = LearnedKernelClassifier(**{**SMALL, "max_epochs": 10}).fit(X, labels)
    assert list(clf.categorical_columns_) == [2, 3]
    proba = clf.predict_proba(X)
    assert proba.shape == (200, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    assert clf.score(X, labels) > 0.7


def test_dataframe_columns_found_categorical_by_dtype():
    """``category``, ``object``, ``string``, ``bool`` and nullable ``boolean`` columns are
    categorical (a missing value a level of its own); nullable integers and floats are numeric."""
    rng = np.random.RandomState(0)
    n = 60
    X = pd.DataFrame({"x": rng.normal(size=n), "count": pd.array(rng.randint(0, 9, n), dtype="Int64"),
                      "share": pd.array(rng.rand(n), dtype="Float64"), "flag": rng.rand(n) > 0.5,
                      "maybe": pd.array(np.where(np.arange(n) % 7 == 0, None, rng.rand(n) > 0.5), dtype="boolean"),
                      "name": pd.array(rng.choice(["a", "b"], n), dtype="string"),
                      "kind": pd.Categorical(rng.choice(["p", "q", "r"], n)), "word": rng.choice(["u", "v"], n)})
    est = LearnedKernelRegressor(**{**SMALL, "max_epochs": 0}).fit(X, rng.normal(size=n))
    assert list(est.categorical_columns_) == [3, 4, 5, 6, 7]
    assert est.predict(X.iloc[:3]).shape == (3,)


def test_numpy_categorical_features():
    X, y = _frame()
    A = X.to_numpy(dtype=object)
    est = LearnedKernelRegressor(**SMALL, categorical_features=[2, 3]).fit(A, y)
    assert est.predict(A[:5]).shape == (5,)
    by_mask = LearnedKernelRegressor(**SMALL, categorical_features=[False, False, True, True]).fit(A, y)
    np.testing.assert_array_equal(by_mask.predict(A[:5]), est.predict(A[:5]))
    with pytest.raises(ValueError, match="categorical_features"):
        LearnedKernelRegressor(**SMALL).fit(A, y)  # strings in columns not named categorical
    with pytest.raises(ValueError, match="categorical_features"):
        LearnedKernelRegressor(**SMALL, categorical_features=[7]).fit(A, y)


def test_unseen_category_policy():
    """handle_unknown="ignore" (default): an unseen level is the zero row of its column, the
    same embedding as any other unseen level; "error" raises naming the column."""
    X, y = _frame()
    est = LearnedKernelRegressor(**SMALL).fit(X, y)
    Q = X.iloc[:3].copy()
    Q["d"] = ["new", "other", "w"]
    Z = est.embed(Q)
    assert np.all(np.isfinite(est.predict(Q)))
    np.testing.assert_array_equal(Z[0], est.embed(Q.assign(d=["w", "w", "w"]))[0])
    Q2 = X.iloc[:3].copy()
    assert not np.array_equal(Z, est.embed(Q2))
    with pytest.raises(ValueError, match="not seen at fit"):
        LearnedKernelRegressor(**SMALL, handle_unknown="error").fit(X, y).predict(Q)
    ident = LearnedKernelRegressor(embedding="identity", scaling=None, max_epochs=0).fit(X, y)
    onehot = ident.embed(Q)
    np.testing.assert_array_equal(onehot[:, -2:], 0.0)  # no level of "d"


def test_nan_and_wrong_columns_are_refused():
    X, y = _frame()
    est = LearnedKernelRegressor(**SMALL).fit(X, y)
    bad = X.copy()
    bad.loc[3, "a"] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        LearnedKernelRegressor(**SMALL).fit(bad, y)
    with pytest.raises(ValueError, match="NaN"):
        est.predict(bad)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(X.rename(columns={"a": "A"}))
    with pytest.raises(ValueError, match="missing:\n- b"):
        est.predict(X.drop(columns=["b"]))
    Xn, yn = _diabetes(60)
    num = LearnedKernelRegressor(**SMALL).fit(Xn, yn)
    with pytest.raises(ValueError, match="features"):
        num.predict(Xn[:, :5])
    with pytest.raises(ValueError, match="NaN"):
        num.predict(np.where(np.arange(10)[None] == 2, np.nan, Xn))
    with pytest.raises(ValueError, match="kernel"):
        LearnedKernelRegressor(kernel="epanechnikov").fit(Xn, yn)
    with pytest.raises(ValueError, match="local_linear"):
        LearnedKernelRegressor(embedding="identity", local_linear=True).fit(Xn, yn)
    with pytest.raises(ValueError, match="ema_epochs"):
        LearnedKernelRegressor(ema_epochs=-1.0).fit(Xn, yn)
    with pytest.raises(ValueError, match="ema_epochs"):
        LearnedKernelRegressor(ema_epochs="always").fit(Xn, yn)
    with pytest.raises(ValueError, match="at least 3 samples"):
        LearnedKernelRegressor(**SMALL).fit(Xn[:2], yn[:2])


def test_without_torch_the_error_names_the_extra():
    import subprocess
    import sys

    code = ("import sys\nclass NoTorch:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(name)\nsys.meta_path.insert(0, NoTorch())\n"
            "import numpy as np\nfrom localkit import LearnedKernelRegressor\n"
            "X = np.random.default_rng(0).normal(size=(30, 2))\n"
            "LearnedKernelRegressor(embedding='identity', max_epochs=0).fit(X, X[:, 0])\n"
            "try:\n    LearnedKernelRegressor().fit(X, X[:, 0])\nexcept ImportError as e:\n    print(e)\n"
            "assert 'torch' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "nn" in out.stdout and "pip install" in out.stdout


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_device_trains_and_predicts_there(device):
    """With ``device`` the rows are bound there as tensors and predictions pass over them there:
    equal to the host's passes over the same model (the same training on the CPU)."""
    X, y = _frame()
    est = LearnedKernelRegressor(**SMALL, categorical_factors=True, local_linear=True, device=device).fit(X, y)
    Q = X.iloc[:15]
    assert np.all(np.isfinite(est.predict(Q))) and est.bandwidth_[0] > 0
    if device == "cpu":  # the same training as device=None: the passes alone differ
        host = LearnedKernelRegressor(**SMALL, categorical_factors=True, local_linear=True).fit(X, y)
        np.testing.assert_allclose(est.predict(Q), host.predict(Q), rtol=1e-12)
        np.testing.assert_allclose(est.loo_predict(), host.loo_predict(), rtol=1e-12)
        for a, b in zip(est.explain(Q, n_rows=4), host.explain(Q, n_rows=4)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    clf = LearnedKernelClassifier(**SMALL, device=device).fit(X, y > np.median(y))
    np.testing.assert_allclose(clf.predict_proba(Q).sum(1), 1.0, rtol=1e-12)


def test_check_estimator_regressor():
    check_estimator(LearnedKernelRegressor(n_components=4, d_embedding=2, n_frequencies=2, d_block=4, batch_size=32, n_ensembles=1,
                                           lr=1e-2, max_epochs=10, random_state=0))


def test_check_estimator_classifier():
    check_estimator(LearnedKernelClassifier(n_components=4, d_embedding=2, n_frequencies=2, d_block=4, batch_size=32, n_ensembles=1,
                                            lr=1e-2, max_epochs=10, random_state=0))


def test_refit_bandwidth_minimises_the_held_out_loss():
    """With nothing held out the refit minimises the leave-one-out error of the local mean over all
    training rows at the trained embedding, and never raises it above the trained ``h``'s."""
    from localkit.engine import bind
    from localkit.kernels import Kernel

    X, y = _diabetes(200)
    kw = {**SMALL, "max_epochs": 8, "validation_fraction": 0.0, "local_linear": False}  # the plain local mean
    trained = LearnedKernelRegressor(**kw, refit_bandwidth=False).fit(X, y)
    refit = LearnedKernelRegressor(**kw).fit(X, y)
    np.testing.assert_array_equal(trained.embedding_[0], refit.embedding_[0])  # the same training
    Z = refit.embedding_[0].astype(np.float64)

    def loo_mse(h):
        mean = bind(Kernel("laplacian", bandwidth=h), Z).sums(None, y[:, None], exclude_self=True).mean
        return np.mean((mean.ravel() - y) ** 2)

    h0, h1 = trained.bandwidth_[0], refit.bandwidth_[0]
    assert h1 < h0 / 4  # briefly trained: h far too wide, the search moved past its first bracket
    assert loo_mse(h1) < loo_mse(h0)
    assert loo_mse(h1) < min(loo_mse(h1 * 1.1), loo_mse(h1 / 1.1))
    np.testing.assert_allclose(np.mean((refit.loo_predict() - y) ** 2), loo_mse(h1), rtol=1e-6)


def test_categorical_factors_weigh_a_mismatch_by_the_learned_factor():
    """With Li-Racine factors the bound kernel is ``exp(-|f(x*) - f(x)| / h) prod_l r_l^[x*_l !=
    x_l]``: predict and loo_predict against that local mean (with the default local-linear head)
    written out, a level unseen at fit (code 0) mismatching every row."""
    from scipy.spatial.distance import cdist
    from scipy.special import softmax

    X, y = _frame()
    est = LearnedKernelRegressor(**{**SMALL, "max_epochs": 5}, categorical_factors=True).fit(X, y)
    log_r = est.members_[0].factors
    assert log_r.shape == (2,) and np.all(log_r < 0)
    Q = X.iloc[:12].copy()
    Q.loc[Q.index[:4], "d"] = "w"  # unseen at fit

    def codes(frame):  # level l of a column: code l + 1; unseen: 0
        return np.stack([(frame[c].astype(str).to_numpy()[:, None] == levels[None]) @ np.arange(1, len(levels) + 1)
                         for c, levels in zip(["c", "d"], est.categories_)], axis=1)

    Z, h, cx, t = est.embedding_[0], est.bandwidth_[0], codes(X), est.members_[0].slope[:, 0]

    def local_mean(Zq, cq, exclude_self=False):  # sum_j w_ij (y_j + (f(x*_i) - f(x_j)) t)
        L = -cdist(Zq, Z) / h + ((cq[:, None, :] != cx[None, :, :]) * log_r).sum(-1)
        if exclude_self:
            np.fill_diagonal(L, -np.inf)
        return softmax(L, axis=1) @ (y - Z @ t) + Zq @ t

    assert np.all(codes(Q)[:4, 1] == 0)
    np.testing.assert_allclose(est.predict(Q), local_mean(est.embed(Q), codes(Q)), rtol=1e-10)
    np.testing.assert_allclose(est.loo_predict(), local_mean(Z, cx, exclude_self=True), rtol=1e-10)
    with pytest.raises(ValueError, match="categorical_factors=True learns"):
        LearnedKernelRegressor(embedding="identity", categorical_factors=True).fit(X, y)
