"""
Nadaraya–Watson regression and k-nearest neighbours
===================================================

Kernel regression predicts the *local mean* of the targets,
``m(x*) = sum_i K(x*, x_i) y_i / sum_j K(x*, x_j)``. The bandwidth trades variance (small ``h``)
for bias (large ``h``); the shaded band is one local standard deviation of the targets that count
at each point. k-nearest-neighbour regression is the same local mean with a kNN kernel and the
uniform profile, and equals scikit-learn's ``KNeighborsRegressor``.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.neighbors import KNeighborsRegressor

from localkit import LocalMeanRegressor
from localkit.plot import local_mean_fit

X, y = load_diabetes(return_X_y=True)
bmi = X[:, 2]

fig, ax = plt.subplots(figsize=(8, 4.5))
for i, h in enumerate([0.003, 0.01, 0.03]):
    local_mean_fit(bmi, y, bandwidth=h, band=1.0 if h == 0.01 else 0, scatter=i == 0,
                   label=f"Gaussian, h={h}", ax=ax)
local_mean_fit(bmi, y, kernel="uniform", n_neighbors=40, band=0, scatter=False,
               label="kNN, k=40", ax=ax)
ax.set(xlabel="BMI (scaled)", ylabel="disease progression one year later")
fig.tight_layout()

# %%
# The kNN local mean against scikit-learn, on all ten features:
knn = LocalMeanRegressor(kernel="uniform", n_neighbors=7).fit(X[:300], y[:300])
ref = KNeighborsRegressor(n_neighbors=7).fit(X[:300], y[:300])
diff = np.abs(knn.predict(X[300:]) - ref.predict(X[300:])).max()
print("max |localkit - scikit-learn| =", diff)
