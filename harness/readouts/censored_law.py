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
past the ceiling (right), a run still rising (right: a lower bound), a converged run that fell
between two tested loads near the ceiling (interval). b's interval is Student's t on the
observed information with a random effect per width (`slope_interval`): the widths' scatter
about the law against the restarts' spread within a width (`lack_of_fit`) widens it and sets
its degrees of freedom, continuously.
`offset` and a fixed slope give the proportional model (`harness.readouts.proportional_law`)."""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from harness.readouts.tobit_likelihood import (
    EXACT,
    INTERVAL,
    KINDS,
    LEFT,
    LEVEL,
    MIN_SIGMA,
    RIGHT,
    Design,
    Observation,
    covariance,
    hessian,
    identified,
    inverse,
    log_likelihood,
    maximise,
)

__all__ = [  # the law, and the likelihood's names its users read from here
    "EXACT", "INTERVAL", "KINDS", "LEFT", "LEVEL", "MIN_SIGMA", "RIGHT", "CensoredLaw",
    "Design", "LackOfFit", "Observation", "covariance", "effective_runs", "fit_censored_law",
    "hessian", "identified", "inverse", "lack_of_fit", "log_likelihood", "maximise",
    "new_width_interval", "readout_observation", "slope_interval", "widening",
]  # fmt: skip


def readout_observation(
    size: float,
    censoring: str | None,
    value: float,
    low: float | None = None,
    high: float | None = None,
    se_log: float = 0.0,
    cell: str = "",
) -> Observation:
    """A readout at state `size` as an observation: its `censoring` (`left`, `right`,
    `interval`; anything else read exact), an interval between `low` and `high`."""
    kind = censoring if censoring in KINDS else EXACT
    if kind == INTERVAL:
        return Observation(float(size), kind, float(low), float(high), se_log, cell)
    return Observation(float(size), kind, float(value), se_log=se_log, cell=cell)


@dataclass(frozen=True)
class CensoredLaw:
    """n = a * floats^b with residual sigma (log scale), its log-likelihood, b's interval at
    `level` (`slope_interval`) and standard error, the lack of fit, and what was fitted:
    `counts` of each kind, `cells`, `floats_range` (the exact runs' state sizes)."""

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
    b_se: float = math.nan
    mean_covariance: tuple = ((math.nan, math.nan), (math.nan, math.nan))
    lack_of_fit: "LackOfFit | None" = None
    effective: float = math.nan
    """The readouts' worth in exact ones for sigma (`effective_runs`): its t's degrees of
    freedom are this less 2."""

    def __call__(self, floats: float) -> float:
        return self.a * floats**self.b

    def prediction_interval(self, floats: float, runs: int) -> tuple[float, float]:
        """Where the geometric mean of `runs` new readouts at a new width `floats` falls with
        probability `level` (`new_width_interval`, var mu from the covariance of (log a, b))."""
        x = np.array([1.0, math.log(floats)])
        var_mu = float(x @ np.array(self.mean_covariance) @ x)
        return new_width_interval(math.log(self(floats)), var_mu, self, runs)

    @property
    def aic(self) -> float:
        """2 k - 2 log L with k = 3 (log a, b, sigma)."""
        return 6 - 2 * self.log_likelihood

    def shown(self) -> str:
        """`0.52 [0.41, 0.63]`, or `3.05 (no interval)` where the readouts hold nothing about
        the scatter (read at two widths or fewer)."""
        if math.isnan(self.b_low):
            return f"{self.b:.2f} (no interval)"
        return f"{self.b:.2f} [{self.b_low:.2f}, {self.b_high:.2f}]"


@dataclass(frozen=True)
class LackOfFit:
    """The law's residual scatter against the spread between seeds, on the exact readouts'
    log n (docs/background.md, "The censored capacity law"): with m_i exact runs in cell i of
    c cells, cell means ybar_i, the law's mu_i and n_e runs in all,

        F = [sum_i m_i (ybar_i - mu_i)^2 / (c - 2)] / [sum_ij (y_ij - ybar_i)^2 / (n_e - c)],

    against F(c - 2, n_e - c): a large F says the cells scatter about the law more than seeds
    scatter within a cell, so the law misses something (a step, a ceiling). `scatter` is the
    root mean square of the cell means' residuals, `spread` the pooled seed standard
    deviation."""

    f: float
    p: float
    df: tuple[int, int]
    scatter: float
    spread: float

    def shown(self) -> str:
        """`lack of fit F(2, 8) = 5.1, p = 0.04 (scatter 0.31 against seed spread 0.12)`."""
        return (
            f"lack of fit F({self.df[0]}, {self.df[1]}) = {self.f:.2g}, p = {self.p:.2g} "
            f"(scatter {self.scatter:.2f} against seed spread {self.spread:.2f})"
        )


def lack_of_fit(
    observations: Sequence[Observation], predicted_log: Sequence[float], means: int = 2
) -> LackOfFit | None:
    """`LackOfFit` of the exact runs against the law's `predicted_log` n (one per
    observation), for a law with `means` parameters in its mean (the class docstring's 2:
    log a and b; the cells' degrees of freedom are c - `means`); None with no more cells read
    than `means` or no cell with two seeds read."""
    by_cell: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for o, mu in zip(observations, predicted_log, strict=True):
        if o.kind == EXACT:
            by_cell[o.cell or str(o.floats)].append((math.log(o.value), mu))
    cells, runs = len(by_cell), sum(len(v) for v in by_cell.values())
    if cells <= means or runs - cells < 1:
        return None
    between = within = squares = 0.0
    for members in by_cell.values():
        ys = [y for y, _ in members]
        mean, mu = sum(ys) / len(ys), members[0][1]
        between += len(ys) * (mean - mu) ** 2
        squares += (mean - mu) ** 2
        within += sum((y - mean) ** 2 for y in ys)
    df = (cells - means, runs - cells)
    spread = math.sqrt(within / df[1])
    f = (between / df[0]) / max(within / df[1], 1e-12)
    return LackOfFit(
        f=f,
        p=float(stats.f.sf(f, *df)),
        df=df,
        scatter=math.sqrt(squares / cells),
        spread=spread,
    )


def new_width_interval(mu: float, var_mu: float, law: "CensoredLaw", runs: int) -> tuple:
    """exp(mu +- t(nu) sqrt(V)) at a new width, with the random effect per width of
    `slope_interval` (r = max(1, F), nu its degrees of freedom): the new width's own offset
    from the law, s^2 (r - 1) / k_bar (k_bar readouts a width in the fit), its `runs`
    readouts' spread s^2 / runs (s^2 the restarts' variance within a width, `LackOfFit`;
    sigma^2 m / (m - 2) without one, m the effective readouts), and the law's uncertainty
    there, `var_mu` r:

        V = s^2 ((r - 1) / k_bar + 1 / runs) + var mu r.

    `law` gives sigma, m (`effective`), the lack of fit and the level. NaN where the readouts
    hold nothing about the scatter (m <= 2 or unknown)."""
    m, lack = law.effective, law.lack_of_fit
    if not m - 2 > 0:
        return math.nan, math.nan
    r, free = widening(m - 2, lack)
    per_width = (lack.df[1] + lack.df[0] + 2) / (lack.df[0] + 2) if lack else 1.0
    spread = lack.spread**2 if lack else law.sigma**2 * m / (m - 2)
    variance = spread * ((r - 1) / per_width + 1 / runs) + var_mu * r
    half = min(stats.t.ppf(0.5 + law.level / 2, free) * math.sqrt(variance), 700.0)
    return math.exp(mu - half), math.exp(mu + half)  # the half-width capped to exp's range


def effective_runs(info_log_sigma: float, sigma: float, d: Design) -> float:
    """How many exact readouts the observations are worth for the residual sigma: the observed
    information about log sigma over what one exact readout carries. An exact readout with
    tau^2 = sigma^2 + s^2 carries 2 (sigma^2 / tau^2)^2 at the maximum (2 where its own
    sampling error s is nil), so n exact readouts are worth n; a censored one carries less,
    and nothing where the law is far from its bound. `fit_censored_law` counts at most the
    readings (exact or interval) and none where they lie at two widths or fewer: two
    parameters fit two widths exactly, whatever the scatter about the law."""
    share = (sigma**2 / (sigma**2 + MIN_SIGMA**2 + d.s2)) ** 2
    per_run = 2 * float(np.mean(share))
    return info_log_sigma / per_run if math.isfinite(info_log_sigma) and per_run > 0 else math.nan


def slope_interval(
    b: float, se: float, runs: float, lack: LackOfFit | None, level: float, means: int = 2
) -> tuple[float, float]:
    """b's interval at `level`, a random effect per width with Satterthwaite's degrees of
    freedom: with m the effective readouts (`effective_runs`) and r = max(1, F) the lack of
    fit's ratio of the widths' scatter about the law to the restarts' spread within a width,

        V = se^2 m / (m - p) r,   nu = r^2 / (1 / (m - p) + (r - 1)^2 / (c - p)),
        b +- t(nu) sqrt(V),

    p = `means` parameters in the law's mean, c the widths read. At r = 1 it is least
    squares' exact interval (t on m - p); as the widths scatter more than the restarts, V
    grows by r (the widths, not the runs, become the units) and nu falls towards the widths'
    c - p, continuously: no switch at F = 1. Scaling the pooled se by F is conservative where
    the restarts' spread is narrow (the capacity's restarts within 0.8 of their best): a
    measured choice, the tighter MS_between / s^2 covered 0.84 of simulated sweeps whose
    learning grows with width. A censored readout tells less about sigma than a read one (it
    adds less than one to m), so fewer read widths give a wider interval; with two read
    widths or fewer there is none (`fit_censored_law`). Its coverage is measured on simulated
    sweeps built like the committed ones (`studies.law_coverage`,
    tests/harness/readouts/test_law_coverage.py)."""
    within = runs - means
    if not (within > 0 and math.isfinite(se)):
        return math.nan, math.nan
    r, free = widening(within, lack)
    half = stats.t.ppf(0.5 + level / 2, free) * se * math.sqrt(runs / within * r)
    return b - half, b + half


def widening(within: float, lack: LackOfFit | None) -> tuple[float, float]:
    """(r, nu) of `slope_interval`: r = max(1, F) and Satterthwaite's degrees of freedom
    r^2 / (1 / `within` + (r - 1)^2 / (c - p)); (1, `within`) without a lack-of-fit test."""
    if lack is None:
        return 1.0, within
    r = max(1.0, lack.f)
    return r, r**2 / (1 / within + (r - 1) ** 2 / lack.df[0])


def fit_censored_law(
    observations: Sequence[Observation], level: float = LEVEL
) -> CensoredLaw | None:
    """The maximum-likelihood law of the module docstring with b's interval at `level`
    (`slope_interval`) and its lack of fit (`lack_of_fit`); None where b cannot be
    estimated."""
    observations = list(observations)
    if not identified(observations):
        return None
    design = Design(observations)
    found = maximise(design)
    if found is None:
        return None
    theta, log_l = found
    log_a, b, log_sigma = theta
    lack = lack_of_fit(observations, list(log_a + b * design.x))
    information = -hessian(theta, design)
    cov = inverse(information)
    se = float(math.sqrt(cov[1, 1])) if cov[1, 1] > 0 else math.nan
    read = [o for o in observations if o.kind in (EXACT, INTERVAL)]
    runs = min(effective_runs(float(information[2, 2]), math.exp(log_sigma), design), len(read))
    if len({o.floats for o in read}) <= 2:  # a line through two widths: the scatter unknown
        runs = math.nan
    sigma = math.sqrt(math.exp(2 * log_sigma) + MIN_SIGMA**2)
    low, high = slope_interval(float(b), se, runs, lack, level)
    exact = [o.floats for o in observations if o.kind in (EXACT, INTERVAL)]
    return CensoredLaw(
        a=math.exp(log_a),
        b=float(b),
        sigma=sigma,
        log_likelihood=log_l,
        b_low=float(low),
        b_high=float(high),
        b_se=se,
        mean_covariance=tuple(map(tuple, cov[:2, :2].tolist())),
        n=len(observations),
        counts={k: sum(o.kind == k for o in observations) for k in KINDS},
        cells=len({o.cell or str(o.floats) for o in observations}),
        floats_range=(min(exact), max(exact)),
        level=level,
        lack_of_fit=lack,
        effective=runs,
    )
