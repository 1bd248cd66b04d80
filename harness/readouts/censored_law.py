"""The capacity law n = a * floats^b fitted by maximum likelihood to every run, censored
readouts included (a Tobit model on log scale; docs/background.md, "The censored capacity
law").

With x_i = log floats_i, the model is y_i = log n_i = log a + b x_i + e_i, e_i ~ N(0, tau_i^2),
tau_i^2 = sigma^2 + s_i^2 (s_i: the readout's own sampling error on log scale, 0 if unknown).
With z(v) = (v - log a - b x_i) / tau_i, Phi the standard normal distribution function and
phi its density, each run contributes to the log-likelihood

    exact       n_i = v:           log phi(z(log v)) - log tau_i
    left        n_i < v:           log Phi(z(log v))
    right       n_i >= v:          log (1 - Phi(z(log v)))
    interval    lo <= n_i < hi:    log (Phi(z(log hi)) - Phi(z(log lo)))

maximised over (log a, b, log sigma) (BFGS from the least-squares fit of the exact runs).
Every run counts: a state that ran out of room below the judging load (left), one that held
every tested load (right), a run still rising (right: a lower bound). The interval of b is a
percentile bootstrap over seeds: each resample draws, within every cell (state size), as many
runs as it has, with replacement, redraws each read run within its own sampling error, and
refits; so it reflects the spread between seeds (and between test sets), not a t quantile on
few degrees of freedom. Its percentiles are widened about b by sqrt(m / (m - 1)) (m runs per
cell: `small_sample_factor`). `offset` and a fixed slope give the proportional model
(`harness.readouts.proportional_law`)."""

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special

EXACT, LEFT, RIGHT, INTERVAL = "exact", "left", "right", "interval"
KINDS = (EXACT, LEFT, RIGHT, INTERVAL)
LEVEL = 0.9
RESAMPLES = 500
SEED = 0
MIN_SIGMA = 1e-3
"""sigma's floor (log scale): a likelihood with every exact run on one line is unbounded."""


@dataclass(frozen=True)
class Observation:
    """One run's readout at its state `floats`: `kind` (`KINDS`), `value` (the reading, or
    the censoring bound), `high` (an interval's upper end), `se_log` (its sampling error on
    log scale) and `cell` (the state size's cell, for the bootstrap over seeds)."""

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


@dataclass(frozen=True)
class CensoredLaw:
    """n = a * floats^b with residual sigma (log scale), its log-likelihood, b's bootstrap
    interval at `level`, and what was fitted: `counts` of each kind, `cells`, `floats_range`
    (the exact runs' state sizes), and the resampled b's."""

    a: float
    b: float
    sigma: float
    log_likelihood: float
    b_low: float
    b_high: float
    n: int
    counts: dict[str, int]
    cells: int
    floats_range: tuple[float, float]
    level: float = LEVEL
    resampled_b: tuple[float, ...] = field(default=(), repr=False)

    def __call__(self, floats: float) -> float:
        return self.a * floats**self.b

    @property
    def aic(self) -> float:
        """2 k - 2 log L with k = 3 (log a, b, sigma)."""
        return 6 - 2 * self.log_likelihood

    def shown(self) -> str:
        """`0.52 [0.41, 0.63]`."""
        return f"{self.b:.2f} [{self.b_low:.2f}, {self.b_high:.2f}]"


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


def newton(
    theta: np.ndarray, d: Design, weights: np.ndarray, steps: int = 12
) -> tuple[np.ndarray, np.ndarray]:
    """Maximise R weighted likelihoods at once from theta [R, 3]: Newton steps with the
    Hessian from central differences of the gradient, each step halved (down to 1/64) until
    the likelihood rises, a gradient step where the Hessian is not negative definite; stops
    after `steps` or once no likelihood rises. Returns (theta, converged [R]: gradient within
    1e-3)."""
    theta = theta.copy()
    value, grad = batched(theta, d, weights)
    eye = np.eye(theta.shape[1]) * 1e-5
    for _ in range(steps):
        hessian = np.stack(
            [(batched(theta + e, d, weights)[1] - batched(theta - e, d, weights)[1]) / 2e-5
             for e in eye],
            axis=2,
        )  # fmt: skip
        hessian = (hessian + hessian.transpose(0, 2, 1)) / 2
        concave = np.all(np.linalg.eigvalsh(hessian) < 0, axis=1)
        safe = np.where(concave[:, None, None], hessian, -np.eye(theta.shape[1]) * 10)
        step = -np.linalg.solve(safe, grad[:, :, None])[:, :, 0]
        best, rose = theta.copy(), np.zeros(theta.shape[0], dtype=bool)
        for t in 2.0 ** -np.arange(7):
            trial = theta + t * step
            trial_value, _ = batched(trial, d, weights)
            take = ~rose & np.isfinite(trial_value) & (trial_value > value)
            best[take], rose = trial[take], rose | take
        theta, (value, grad) = best, batched(best, d, weights)
        if not rose.any() or np.all(np.abs(grad) < 1e-5):
            break
    return theta, np.all(np.abs(grad) < 1e-3, axis=1)


def log_likelihood(theta: np.ndarray, d: Design, slope: float | None = None) -> float:
    """`likelihood_and_gradient`'s value."""
    return likelihood_and_gradient(theta, d, slope)[0]


def start(d: Design, slope: float | None) -> np.ndarray:
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
    """(theta, log L) at the maximum, from `x0` (default `start`); None when the optimiser
    fails."""

    def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = likelihood_and_gradient(theta, d, slope)
        return -value, -grad

    first = start(d, slope) if x0 is None else x0
    result = optimize.minimize(negative, first, jac=True, method="BFGS")
    if not np.all(np.isfinite(result.x)) or not math.isfinite(result.fun):
        return None
    return result.x, -float(result.fun)


def identified(observations: Sequence[Observation]) -> bool:
    """b can be estimated: exact or interval runs at two or more state sizes, 3 runs or more."""
    read = {o.floats for o in observations if o.kind in (EXACT, INTERVAL)}
    return len(observations) >= 3 and len(read) >= 2


def resample_weights(observations: Sequence[Observation], resamples: int, seed: int) -> np.ndarray:
    """[resamples, n]: how often each run is drawn in each resample of the bootstrap over
    seeds (within each cell, as many runs as it has, with replacement)."""
    rng = np.random.default_rng(seed)
    weights = np.zeros((resamples, len(observations)))
    by_cell: dict[str, list[int]] = defaultdict(list)
    for index, o in enumerate(observations):
        by_cell[o.cell or str(o.floats)].append(index)
    for members in by_cell.values():
        drawn = rng.integers(0, len(members), size=(resamples, len(members)))
        for column in range(len(members)):
            np.add.at(weights, (np.arange(resamples), np.array(members)[drawn[:, column]]), 1)
    return weights


def resampled_slopes(
    observations: Sequence[Observation], theta: np.ndarray, resamples: int, seed: int
) -> list[float]:
    """b refitted on each resample (`resample_weights`), from the full fit's `theta`, each read
    run's log readout redrawn within its own sampling error (N(0, s_i^2): another test set),
    censored bounds kept; a resample whose drawn runs read at fewer than two state sizes, or
    whose fit does not converge, is left out."""
    weights = resample_weights(observations, resamples, seed)
    read = np.array([o.kind in (EXACT, INTERVAL) for o in observations])
    floats = np.array([o.floats for o in observations])
    sizes = [len(set(floats[(w > 0) & read])) for w in weights]
    keep = np.array(sizes) >= 2
    if not keep.any():
        return []
    start_ = np.repeat(theta[None, :], int(keep.sum()), axis=0)
    design = Design(observations)
    noise = np.random.default_rng(seed + 1).normal(size=(int(keep.sum()), len(observations)))
    noise *= np.sqrt(design.s2) * design.masks[EXACT]
    design.lo, design.hi = design.lo + noise, design.hi + noise
    fitted, ok = newton(start_, design, weights[keep])
    return [float(b) for b in fitted[ok, 1]]


def small_sample_factor(observations: Sequence[Observation]) -> float:
    """sqrt(m / (m - 1)), m the mean number of runs per cell (over cells with two or more):
    resampling m runs within a cell has the spread of a variance estimate that divides by m,
    not m - 1, so the bootstrap's interval is widened by this factor about b."""
    sizes = Counter(o.cell or str(o.floats) for o in observations)
    many = [n for n in sizes.values() if n >= 2]
    if not many:
        return 1.0
    m = sum(many) / len(many)
    return math.sqrt(m / (m - 1))


def fit_censored_law(
    observations: Sequence[Observation],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> CensoredLaw | None:
    """The maximum-likelihood law of the module docstring with b's bootstrap interval at
    `level` over `resamples` seeded resamples (resamples in which b is not `identified` are
    skipped); None where b cannot be estimated."""
    observations = list(observations)
    if not identified(observations):
        return None
    found = maximise(Design(observations))
    if found is None:
        return None
    (log_a, b, log_sigma), log_l = found
    bs = resampled_slopes(observations, found[0], resamples, seed)
    tail = (1 - level) / 2
    low, high = np.quantile(bs, [tail, 1 - tail]) if bs else (math.nan, math.nan)
    widen = small_sample_factor(observations)
    low, high = b - (b - low) * widen, b + (high - b) * widen
    exact = [o.floats for o in observations if o.kind in (EXACT, INTERVAL)]
    return CensoredLaw(
        a=math.exp(log_a),
        b=float(b),
        sigma=math.sqrt(math.exp(2 * log_sigma) + MIN_SIGMA**2),
        log_likelihood=log_l,
        b_low=float(low),
        b_high=float(high),
        n=len(observations),
        counts={k: sum(o.kind == k for o in observations) for k in KINDS},
        cells=len({o.cell or str(o.floats) for o in observations}),
        floats_range=(min(exact), max(exact)),
        level=level,
        resampled_b=tuple(bs),
    )
