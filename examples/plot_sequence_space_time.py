"""
A sequence as points in time and value: a space-time local mean
===============================================================

A sequence's positions are a feature like any other: a kernel on the time column alone is the
moving (local) average, and a product kernel of time and value,
``Kernel("gaussian", features=["value"]) * Kernel("epanechnikov", bandwidth=5, features=["t"])``,
weighs each observation by how near it is in time *and* how similar its value is to the query's:
the bilateral filter of a series. On the Nile's annual flow at Aswan (1871-1970, shipped with
statsmodels), whose level dropped around 1898, the moving average smears the drop over a decade.
The space-time local mean, queried at each year with its observed flow, keeps the drop, and also
the outlying years (an outlier is alone in value, so it keeps its own flow). Starting instead from
the moving average and replacing the query's value by the estimate until it no longer moves
(``value_kernel=``, a fixed point) keeps the drop and smooths within each level.
"""
import matplotlib.pyplot as plt
import pandas as pd
from statsmodels.datasets import nile

from localkit import Kernel, LocalMeanRegressor

data = nile.load_pandas().data
frame = pd.DataFrame({"t": data["year"], "value": data["volume"]})

in_time = Kernel("epanechnikov", bandwidth=5, features=["t"])  # years
in_value = Kernel("gaussian", bandwidth=150.0, features=["value"])  # 1e8 m^3, about the noise's spread
moving = LocalMeanRegressor(kernel=in_time).fit(frame, frame["value"])
space_time = LocalMeanRegressor(kernel=in_value * in_time).fit(frame, frame["value"])
iterated = LocalMeanRegressor(kernel=Kernel("epanechnikov", bandwidth=5),
                              value_kernel=Kernel("gaussian", bandwidth=150.0),
                              tol=0.01).fit(frame[["t"]], frame["value"])  # tol in the flow's units
print(space_time.kernel_)

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(frame["t"], frame["value"], ".", color="0.6", label="annual flow")
ax.plot(frame["t"], moving.predict(frame), label="moving average (time kernel)")
ax.plot(frame["t"], space_time.predict(frame), label="space-time local mean (time x value)")
ax.plot(frame["t"], iterated.predict(frame[["t"]]), "--",
        label=f"iterated to its fixed point ({iterated.n_iter_} iterations)")
ax.axvline(1898, color="k", lw=0.5, ls=":")
ax.set(xlabel="year", ylabel="flow (1e8 m$^3$)", title="Nile at Aswan")
ax.legend(fontsize=8)
fig.tight_layout()

# %%
# Mean flow on either side of 1898, and each fit's jump between 1896 and 1900:
before, after = frame["t"] < 1898, frame["t"] >= 1898
print(f"mean flow before 1898: {frame['value'][before].mean():.0f}, after: {frame['value'][after].mean():.0f}")
at = frame["t"].isin([1896, 1900])
for name, fit in [("moving average", moving.predict(frame)), ("space-time", space_time.predict(frame)),
                  ("iterated", iterated.predict(frame[["t"]]))]:
    low, high = fit[at.to_numpy()]
    print(f"{name:15s} 1896 -> 1900: {low:.0f} -> {high:.0f}")
