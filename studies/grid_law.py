"""Rank or floats: three censored capacity models over a grid of key dim x value dim
(docs/background.md, "Rank or floats: the state grid"), fitted by maximum likelihood to the
same runs (the censored likelihood of `harness.readouts.censored_law`):

    rank     log n = log c + a log R                  (the value dim has no effect)
    floats   log n = log c + b log F                  (F the floats the state holds)
    both     log n = log c + a log R + b log d_v      (a key and a value exponent)

At fixed heads and layers R is proportional to the key dim D, so a is D's exponent too. With
F = H D d_v (a state of H heads, no normaliser) the floats model is `both` with a = b, and the
rank model is `both` with b = 0; the three are compared by AIC (k = 3, 3, 4) and `both`
against `rank` by the likelihood ratio (chi-square, 1 degree of freedom).

`both` is fitted by profiling b: at a fixed b the likelihood is the one-exponent law in R with
the offset b log d_v, maximised over b by a bounded scalar search. b's standard error comes
from the observed information of all four parameters (a numerical Hessian of the
log-likelihood) and its interval from `censored_law.slope_interval` with three parameters in
the mean, widened by the cells' lack of fit like the one-exponent law's. A cell is a
(key dim, value dim) pair; `drop_one_cell` refits `both` without each cell in turn."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, stats

from harness.readouts.censored_law import (
    EXACT,
    INTERVAL,
    LEVEL,
    MIN_SIGMA,
    CensoredLaw,
    Design,
    LackOfFit,
    Observation,
    fit_censored_law,
    lack_of_fit,
    log_likelihood,
    maximise,
    slope_interval,
)

B_BOUNDS = (-3.0, 5.0)
"""The value exponent's search range: a grid's readouts cannot pin a steeper one."""


@dataclass(frozen=True)
class GridRun:
    """One run's readout as an `Observation` on the rank bound (`observation.floats` is R),
    its value dim per head and the floats its state holds."""

    observation: Observation
    value_dim: float
    floats: float


@dataclass(frozen=True)
class TwoExponentLaw:
    """n = c R^a d_v^b with residual sigma on log scale, its log-likelihood, b's interval at
    `level` and standard error, and the cells' lack of fit."""

    c: float
    a: float
    b: float
    sigma: float
    log_likelihood: float
    b_low: float
    b_high: float
    b_se: float
    n: int
    lack_of_fit: LackOfFit | None
    level: float = LEVEL

    def __call__(self, rank_bound: float, value_dim: float) -> float:
        return self.c * rank_bound**self.a * value_dim**self.b

    @property
    def aic(self) -> float:
        """2 k - 2 log L with k = 4 (log c, a, b, sigma)."""
        return 8 - 2 * self.log_likelihood

    def shown(self) -> str:
        """`0.52 [0.41, 0.63]`: b and its interval."""
        return f"{self.b:.2f} [{self.b_low:.2f}, {self.b_high:.2f}]"


def design_at(runs: Sequence[GridRun], b: float) -> Design:
    """The one-exponent law's design in log R with the offset b log d_v."""
    return Design([r.observation for r in runs], b * np.log([r.value_dim for r in runs]))


def profile_value_exponent(runs: Sequence[GridRun], b: float) -> tuple[np.ndarray, float]:
    """(log c, a, log sigma) and the log-likelihood maximised at a fixed value exponent b."""
    found = maximise(design_at(runs, b))
    return found if found is not None else (np.zeros(3), -math.inf)


def full_log_likelihood(runs: Sequence[GridRun], theta: np.ndarray) -> float:
    """The log-likelihood at theta = (log c, a, b, log sigma)."""
    log_c, a, b, log_sigma = theta
    return log_likelihood(np.array([log_c, a, log_sigma]), design_at(runs, b))


def value_exponent_se(runs: Sequence[GridRun], theta: np.ndarray, step: float = 1e-4) -> float:
    """b's standard error from the observed information of (log c, a, b, log sigma): the
    inverse of minus a central-difference Hessian; NaN where it is singular."""
    size = theta.size
    h = np.zeros((size, size))
    eye = np.eye(size) * step
    for i in range(size):
        for j in range(i, size):
            corners = [
                full_log_likelihood(runs, theta + si * eye[i] + sj * eye[j])
                for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1))
            ]
            h[i, j] = h[j, i] = (corners[0] - corners[1] - corners[2] + corners[3]) / (4 * step**2)
    try:
        variance = np.linalg.inv(-h)[2, 2]
    except np.linalg.LinAlgError:
        return math.nan
    return math.sqrt(variance) if variance > 0 else math.nan


def both_identified(runs: Sequence[GridRun]) -> bool:
    """Both exponents can be estimated: readings at two key dims and two value dims, 4 runs
    or more."""
    read = [r for r in runs if r.observation.kind in (EXACT, INTERVAL)]
    keys = {r.observation.floats for r in read}
    values = {r.value_dim for r in read}
    return len(runs) >= 4 and len(keys) >= 2 and len(values) >= 2


def fit_two_exponents(runs: Sequence[GridRun], level: float = LEVEL) -> TwoExponentLaw | None:
    """The `both` model of the module docstring; None where it is not identified."""
    runs = list(runs)
    if not both_identified(runs):
        return None
    found = optimize.minimize_scalar(
        lambda b: -profile_value_exponent(runs, b)[1], bounds=B_BOUNDS, method="bounded"
    )
    b = float(found.x)
    (log_c, a, log_sigma), log_l = profile_value_exponent(runs, b)
    if not math.isfinite(log_l):
        return None
    theta = np.array([log_c, a, b, log_sigma])
    design = design_at(runs, b)
    predicted = log_c + a * design.x + design.offset
    observations = [r.observation for r in runs]
    lack = lack_of_fit(observations, list(predicted), means=3)
    se = value_exponent_se(runs, theta)
    low, high = slope_interval(b, se, len(runs), lack, level, means=3)
    return TwoExponentLaw(
        c=math.exp(log_c),
        a=float(a),
        b=b,
        sigma=math.sqrt(math.exp(2 * log_sigma) + MIN_SIGMA**2),
        log_likelihood=log_l,
        b_low=float(low),
        b_high=float(high),
        b_se=se,
        n=len(runs),
        lack_of_fit=lack,
        level=level,
    )


def in_floats(runs: Sequence[GridRun]) -> list[Observation]:
    """The runs' observations on the floats axis (the floats model's x)."""
    return [replace(r.observation, floats=r.floats) for r in runs]


@dataclass(frozen=True)
class GridLaws:
    """The three models on one family's runs, `chosen` by AIC (the smallest; None where the
    fits are missing), the likelihood ratio test of `both` against `rank` (`p_value`), and the
    value exponents of `both` refitted without each cell (`b_without_cell`)."""

    rank: CensoredLaw | None
    floats: CensoredLaw | None
    both: TwoExponentLaw | None
    b_without_cell: dict[str, float]

    @property
    def aics(self) -> dict[str, float]:
        """Each fitted model's AIC."""
        fits = {"rank": self.rank, "floats": self.floats, "both": self.both}
        return {name: fit.aic for name, fit in fits.items() if fit is not None}

    @property
    def chosen(self) -> str | None:
        """The fitted model with the smallest AIC; None with fewer than two fitted (no
        choice was made)."""
        aics = self.aics
        return min(aics, key=aics.get) if len(aics) >= 2 else None

    def close(self, margin: float = 2.0) -> list[str]:
        """The other models within `margin` of the chosen one's AIC: not told apart."""
        aics, best = self.aics, self.chosen
        if best is None:
            return []
        return [m for m in aics if m != best and aics[m] - aics[best] < margin]

    @property
    def p_value(self) -> float | None:
        """P(chi-square_1 >= 2 (log L both - log L rank)): does the value dim matter?"""
        if self.rank is None or self.both is None:
            return None
        statistic = max(2 * (self.both.log_likelihood - self.rank.log_likelihood), 0.0)
        return float(stats.chi2.sf(statistic, 1))

    @property
    def b_range(self) -> tuple[float, float] | None:
        """(smallest, largest) value exponent over the drop-one-cell refits."""
        bs = list(self.b_without_cell.values())
        return (min(bs), max(bs)) if bs else None


def drop_one_cell(runs: Sequence[GridRun]) -> dict[str, float]:
    """The value exponent of `both` refitted without each cell in turn (where it exists)."""
    cells = sorted({r.observation.cell for r in runs})
    out = {}
    for cell in cells:
        law = fit_two_exponents([r for r in runs if r.observation.cell != cell])
        if law is not None:
            out[cell] = law.b
    return out


def fit_grid_laws(runs: Sequence[GridRun]) -> GridLaws:
    """`GridLaws` of one family's runs."""
    runs = list(runs)
    return GridLaws(
        rank=fit_censored_law([r.observation for r in runs]),
        floats=fit_censored_law(in_floats(runs)),
        both=fit_two_exponents(runs),
        b_without_cell=drop_one_cell(runs),
    )
