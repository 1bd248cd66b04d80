"""The sampling error of a load curve's readout n(t) (`harness.readouts.capacity.load_at`):
how far n(t) would move on another test set of the same size (docs/background.md, "The
censored capacity law").

A parametric bootstrap over the test examples: at each tested load n_i with accuracy a_i over
m_i examples, a resampled accuracy is a*_i = Binomial(m_i, a_i) / m_i (the example as the
unit: its answers are correlated, so this is an upper bound on the spread of the token
accuracy); n*(t) is read off the resampled curve by the same interpolation in log load. The
standard errors are the standard deviations of n*(t) and of log n*(t) over the `DRAWS`
resamples in which some load reaches t. The draws are seeded (`SEED`): a readout's error is
a function of its curve."""

import math
from collections.abc import Mapping

import numpy as np

DRAWS = 400
SEED = 0


def read_levels(loads: np.ndarray, accs: np.ndarray, level: float) -> np.ndarray:
    """n(t) of each row of `accs` ([draws, K], loads ascending [K]): the largest load with
    accuracy >= `level`, interpolated in log load to the next one; NaN where none reaches it."""
    passing = accs >= level
    k = loads.size
    last = k - 1 - np.argmax(passing[:, ::-1], axis=1)
    has = passing.any(axis=1)
    out = np.full(accs.shape[0], np.nan)
    top = has & (last == k - 1)
    out[top] = loads[-1]
    mid = has & (last < k - 1)
    i = last[mid]
    a_lo, a_hi = accs[mid, i], accs[mid, i + 1]
    fraction = (a_lo - level) / (a_lo - a_hi)
    log_lo, log_hi = np.log(loads[i]), np.log(loads[i + 1])
    out[mid] = np.exp(log_lo + fraction * (log_hi - log_lo))
    return out


def readout_errors(
    curve: Mapping[int, float], examples: Mapping[int, float] | None, level: float
) -> tuple[float, float] | None:
    """(se of n(t), se of log n(t)) by the bootstrap of the module docstring; None without the
    examples at every load, or when fewer than half the draws reach `level`."""
    loads = sorted(n for n, a in curve.items() if a is not None and not math.isnan(a))
    if not examples or any(not examples.get(n) for n in loads) or len(loads) < 2:
        return None
    rng = np.random.default_rng(SEED)
    counts = np.array([max(int(round(examples[n])), 1) for n in loads])
    accs = np.array([curve[n] for n in loads])
    draws = rng.binomial(counts, np.clip(accs, 0, 1), size=(DRAWS, len(loads))) / counts
    values = read_levels(np.array(loads, dtype=float), draws, level)
    values = values[~np.isnan(values)]
    if values.size < DRAWS / 2:
        return None
    return float(values.std(ddof=1)), float(np.log(values).std(ddof=1))
