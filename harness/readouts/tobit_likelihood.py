"""The censored log-likelihood of the capacity law (a Tobit model on log scale;
docs/background.md, "The censored capacity law"): one run's readout as an `Observation` of its
kind (exact, left, right or interval censored), the runs as a `Design`, the log-likelihood
and its gradient (`harness.readouts.censored_law`'s docstring has the formula), its maximum
and its observed information."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

EXACT, LEFT, RIGHT, INTERVAL = "exact", "left", "right", "interval"
KINDS = (EXACT, LEFT, RIGHT, INTERVAL)
LEVEL = 0.9
MIN_SIGMA = 1e-3
"""sigma's floor (log scale): a likelihood with every exact run on one line is unbounded."""


@dataclass(frozen=True)
class Observation:
    """One run's readout at its state `floats`: `kind` (`KINDS`), `value` (the reading, or
    the censoring bound), `high` (an interval's upper end), `se_log` (its sampling error on
    log scale) and `cell` (the state size's cell: its seeds' spread judges the lack of fit)."""

    floats: float
    kind: str
    value: float
    high: float | None = None
    se_log: float = 0.0
    cell: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is invalid: must be one of {KINDS}")
        if not (self.floats > 0 and self.value > 0):
            raise ValueError(f"floats={self.floats}, value={self.value}: both must be > 0")


class Design:
    """The observations as arrays: x = log floats, the bounds on log scale, the kind masks."""

    def __init__(self, observations: Sequence[Observation], offset: np.ndarray | None = None):
        self.x = np.log([o.floats for o in observations])
        self.lo = np.log([o.value for o in observations])
        self.hi = np.log([o.high if o.high else o.value for o in observations])
        self.s2 = np.array([o.se_log**2 for o in observations])
        kinds = np.array([o.kind for o in observations])
        self.masks = {kind: kinds == kind for kind in KINDS}
        self.offset = np.zeros(len(observations)) if offset is None else offset


def log_phi(z: np.ndarray) -> np.ndarray:
    """log of the standard normal density."""
    return -0.5 * z**2 - 0.5 * math.log(2 * math.pi)


def mills(z: np.ndarray) -> np.ndarray:
    """phi(z) / Phi(z), computed on log scale (stable far in the tails)."""
    return np.exp(log_phi(z) - special.log_ndtr(z))


def batched(
    theta: np.ndarray, d: Design, weights: np.ndarray, slope: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The module docstring's log-likelihood of R weighted copies of the runs at once:
    theta [R, 3] = (log a, b, log sigma) (or [R, 2], b fixed at `slope`), weights [R, n] (how
    often each run is drawn); returns the log-likelihoods [R] and their gradients [R, 3] (or
    [R, 2]). sigma^2 = exp(2 log sigma) + `MIN_SIGMA`^2, so that the likelihood stays
    bounded; log sigma is read within [-20, 20] (an optimiser's trial step can leave it)."""
    log_a = theta[:, :1]
    b = theta[:, 1:2] if slope is None else slope
    var = np.exp(2 * np.clip(theta[:, -1:], -20.0, 20.0))
    mu = log_a + b * d.x + d.offset
    tau = np.sqrt(var + MIN_SIGMA**2 + d.s2)
    z_lo, z_hi = (d.lo - mu) / tau, (d.hi - mu) / tau
    m = d.masks
    value, d_mu, d_tau = np.zeros_like(mu), np.zeros_like(mu), np.zeros_like(mu)
    z = z_lo[:, m[EXACT]]
    value[:, m[EXACT]] = log_phi(z) - np.log(tau[:, m[EXACT]])
    d_mu[:, m[EXACT]], d_tau[:, m[EXACT]] = z, z**2 - 1
    z = z_lo[:, m[LEFT]]
    value[:, m[LEFT]] = special.log_ndtr(z)
    d_mu[:, m[LEFT]], d_tau[:, m[LEFT]] = -mills(z), -mills(z) * z
    z = z_lo[:, m[RIGHT]]
    value[:, m[RIGHT]] = special.log_ndtr(-z)
    d_mu[:, m[RIGHT]], d_tau[:, m[RIGHT]] = mills(-z), mills(-z) * z
    lo, hi = z_lo[:, m[INTERVAL]], z_hi[:, m[INTERVAL]]
    mass = np.maximum(special.ndtr(hi) - special.ndtr(lo), 1e-300)
    value[:, m[INTERVAL]] = np.log(mass)
    d_mu[:, m[INTERVAL]] = -(np.exp(log_phi(hi)) - np.exp(log_phi(lo))) / mass
    d_tau[:, m[INTERVAL]] = -(np.exp(log_phi(hi)) * hi - np.exp(log_phi(lo)) * lo) / mass
    d_mu, d_tau = weights * d_mu / tau, weights * d_tau / tau
    grads = [d_mu.sum(1), (d_mu * d.x).sum(1), (d_tau * var / tau).sum(1)]
    if slope is not None:
        grads.pop(1)
    return (weights * value).sum(1), np.stack(grads, axis=1)


def likelihood_and_gradient(
    theta: np.ndarray, d: Design, slope: float | None = None
) -> tuple[float, np.ndarray]:
    """`batched` for one theta and every run once."""
    value, grad = batched(theta[None, :], d, np.ones((1, d.x.size)), slope)
    return float(value[0]), grad[0]


def log_likelihood(theta: np.ndarray, d: Design, slope: float | None = None) -> float:
    """`likelihood_and_gradient`'s value."""
    return likelihood_and_gradient(theta, d, slope)[0]


def initial_theta(d: Design, slope: float | None) -> np.ndarray:
    """Least squares on the exact runs (all runs' bounds where fewer than two are exact)."""
    use = d.masks[EXACT] if d.masks[EXACT].sum() >= 2 else np.ones_like(d.x, dtype=bool)
    x, y = d.x[use], d.lo[use] - d.offset[use]
    b = slope if slope is not None else (np.polyfit(x, y, 1)[0] if np.ptp(x) > 0 else 0.0)
    log_a = float(np.mean(y - b * x))
    spread = float(np.std(y - log_a - b * x)) if y.size > 2 else 0.3
    log_sigma = math.log(max(spread, 0.05))
    return np.array([log_a, log_sigma] if slope is not None else [log_a, b, log_sigma])


def maximise(
    d: Design, slope: float | None = None, x0: np.ndarray | None = None
) -> tuple[np.ndarray, float] | None:
    """(theta, log L) at the maximum, from `x0` (default `initial_theta`); None when the optimiser
    fails."""

    def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = likelihood_and_gradient(theta, d, slope)
        return -value, -grad

    first = initial_theta(d, slope) if x0 is None else x0
    result = optimize.minimize(negative, first, jac=True, method="BFGS")
    if not np.all(np.isfinite(result.x)) or not math.isfinite(result.fun):
        return None
    return result.x, -float(result.fun)


def identified(observations: Sequence[Observation]) -> bool:
    """b can be estimated: exact or interval runs at two or more state sizes, 3 runs or more."""
    read = {o.floats for o in observations if o.kind in (EXACT, INTERVAL)}
    return len(observations) >= 3 and len(read) >= 2


def hessian(theta: np.ndarray, d: Design, slope: float | None = None) -> np.ndarray:
    """The log-likelihood's Hessian at `theta`: central differences of its gradient."""
    eye = np.eye(theta.size) * 1e-5
    columns = [
        (
            likelihood_and_gradient(theta + e, d, slope)[1]
            - likelihood_and_gradient(theta - e, d, slope)[1]
        )
        / 2e-5
        for e in eye
    ]
    h = np.stack(columns, axis=1)
    return (h + h.T) / 2


def covariance(theta: np.ndarray, d: Design, slope: float | None = None) -> np.ndarray:
    """The parameters' covariance from the observed information (the inverse of minus the
    Hessian); NaN where it is singular."""
    return inverse(-hessian(theta, d, slope))


def inverse(information: np.ndarray) -> np.ndarray:
    """The inverse of an information matrix; NaN where it is singular."""
    try:
        return np.linalg.inv(information)
    except np.linalg.LinAlgError:
        return np.full(information.shape, math.nan)
