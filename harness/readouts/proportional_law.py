"""The capacity law's nulls (docs/background.md, "The censored capacity law"): the exponent a
mixer's rank bound predicts, and a proportional law with an overhead.

- The rank-bound exponent: the least-squares slope of log rank bound against log floats over
  a sweep's cells (distinct state sizes). Where both grow in proportion to the swept key
  dimension (linear attention: floats = H (D d_v + D), rank bound H D) it is 1: a capacity that
  tracks the rank bound has b = 1, so b is compared with this slope, not with a fixed number.
- The proportional law n = c (floats - F0): capacity in proportion to the state beyond an
  overhead F0 that holds no binding. On log scale, log n = log c + 1 * log(floats - F0) + e,
  the censored likelihood of `harness.readouts.censored_law` with the slope fixed at 1 and
  the offset log(floats - F0); F0 < the smallest state size with a reading (a left-censored
  run may lie below it: its bound is then read at a tiny state), profiled by a bounded scalar
  search. Both laws have three parameters, so their AIC differ by twice their log-likelihoods.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from harness.readouts.censored_law import (
    EXACT,
    INTERVAL,
    LEVEL,
    MIN_SIGMA,
    Design,
    LackOfFit,
    Observation,
    effective_runs,
    inverse,
    lack_of_fit,
    log_likelihood,
    maximise,
    new_width_interval,
)


def rank_bound_exponent(cells: Sequence[tuple[float, float]]) -> float | None:
    """The slope of log rank bound on log floats over the distinct (floats, rank bound) cells;
    None with fewer than two state sizes."""
    pairs = sorted({(float(f), float(r)) for f, r in cells if f > 0 and r and r > 0})
    if len({f for f, _ in pairs}) < 2:
        return None
    x, y = np.log([f for f, _ in pairs]), np.log([r for _, r in pairs])
    return float(np.polyfit(x, y, 1)[0])


@dataclass(frozen=True)
class ProportionalLaw:
    """n = c (floats - overhead), residual sigma on log scale, its log-likelihood and AIC; the
    covariance of (log c, overhead), the readouts' worth in exact ones (`effective`), the lack
    of fit and the level, for its prediction at a new width (`prediction_interval`)."""

    c: float
    overhead: float
    sigma: float
    log_likelihood: float
    covariance: tuple = ((math.nan, math.nan), (math.nan, math.nan))
    effective: float = math.nan
    lack_of_fit: LackOfFit | None = None
    level: float = LEVEL

    def __call__(self, floats: float) -> float:
        return self.c * max(floats - self.overhead, 0.0)

    @property
    def aic(self) -> float:
        """2 k - 2 log L with k = 3 (c, the overhead, sigma)."""
        return 6 - 2 * self.log_likelihood

    def prediction_interval(self, floats: float, runs: int) -> tuple[float, float]:
        """Where the geometric mean of `runs` new readouts at a new width `floats` falls with
        probability `level` (`harness.readouts.censored_law.new_width_interval`): mu =
        log c + log(floats - overhead), its variance g C g with g = (1, -1 / (floats -
        overhead)) and C the covariance of (log c, overhead); NaN at or below the overhead."""
        if floats <= self.overhead:
            return math.nan, math.nan
        g = np.array([1.0, -1.0 / (floats - self.overhead)])
        var_mu = float(g @ np.array(self.covariance) @ g)
        return new_width_interval(math.log(self(floats)), var_mu, self, runs)


def profile(observations: Sequence[Observation], overhead: float) -> tuple[np.ndarray, float]:
    """The maximum over (log c, log sigma) at a fixed overhead F0 (floats at or below it get
    a state of 1e-6 floats: their readouts must then be left-censored to be likely)."""
    floats = np.array([o.floats for o in observations])
    offset = np.log(np.maximum(floats - overhead, 1e-6)) - np.log(floats)
    found = maximise(Design(observations, offset), slope=1.0)
    return found if found is not None else (np.array([0.0, 0.0]), -math.inf)


def fit_proportional_law(observations: Sequence[Observation]) -> ProportionalLaw | None:
    """The proportional law with overhead (module docstring); None without readings at two
    state sizes."""
    observations = list(observations)
    read = sorted({o.floats for o in observations if o.kind in (EXACT, INTERVAL)})
    if len(read) < 2:
        return None
    smallest = read[0]
    result = optimize.minimize_scalar(
        lambda f0: -profile(observations, f0)[1],
        bounds=(-4 * smallest, smallest * (1 - 1e-3)),
        method="bounded",
    )
    overhead = float(result.x)
    (log_c, log_sigma), log_l = profile(observations, overhead)
    theta = np.array([log_c, overhead, log_sigma])
    information = -numeric_hessian(lambda t: at(observations, t), theta)
    covariance = inverse(information)[:2, :2]
    floats = np.array([o.floats for o in observations])
    sigma = math.sqrt(math.exp(2 * log_sigma) + MIN_SIGMA**2)
    design = Design(observations)
    effective = min(effective_runs(float(information[2, 2]), sigma, design), len(read))
    if len(read) <= 2:  # a line through two widths: the scatter about it unknown
        effective = math.nan
    predicted = log_c + np.log(np.maximum(floats - overhead, 1e-6))
    return ProportionalLaw(
        c=math.exp(log_c),
        overhead=overhead,
        sigma=sigma,
        log_likelihood=log_l,
        covariance=tuple(map(tuple, covariance.tolist())),
        effective=effective,
        lack_of_fit=lack_of_fit(observations, list(predicted)),
    )


def at(observations: Sequence[Observation], theta: np.ndarray) -> float:
    """The log-likelihood at theta = (log c, overhead, log sigma)."""
    floats = np.array([o.floats for o in observations])
    offset = np.log(np.maximum(floats - theta[1], 1e-6)) - np.log(floats)
    return log_likelihood(np.array([theta[0], theta[2]]), Design(observations, offset), 1.0)


def numeric_hessian(f, theta: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """The Hessian of a scalar function `f` at `theta` by central differences."""
    n = theta.size
    h = np.zeros((n, n))
    eye = np.eye(n) * step
    for i in range(n):
        for j in range(i, n):
            value = (
                f(theta + eye[i] + eye[j])
                - f(theta + eye[i] - eye[j])
                - f(theta - eye[i] + eye[j])
                + f(theta - eye[i] - eye[j])
            ) / (4 * step**2)
            h[i, j] = h[j, i] = value
    return h
