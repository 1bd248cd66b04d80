"""Does the capacity law's interval cover what it claims? `python -m studies.law_coverage`.

Simulated sweeps built like the committed ones (docs/results/capacity_law/, "The interval's
coverage"), read as the harness reads them:

- at each stack rank bound R, `restarts` restarts (seeds x two rates); a restart *learns*
  with probability p(R) and then reads n = c R^b exp(u_R + e), e ~ N(0, spread^2) per
  restart, u_R ~ N(0, width_sd^2) per width; one that does not learn levels off at a fraction
  f ~ U(`level_off`) of that, or stays at the floor (`floor` of them); a share `rising` is
  still rising at the end of its budget and reads a lower bound at a fraction U(0.5, 1) of it;
- its validation accuracy rises with its readout (log n plus N(0, 0.05^2) noise), so the
  choice on validation is the choice the harness makes, with its mistakes;
- each readout is censored as the protocol censors it: below the judging load 2, left; at or
  past the largest tested load (the first load of the grid 1, 2, 3, 4, 6, 8, 12, ... at or
  above 2R, or the design's `max_load`), right; within a quarter of it, interval-censored
  between the two tested loads it fell between (a converged run) or right (a rising one);
- the cells are read by `harness.readouts.restarts.cells` and the law in R fitted to their
  observations (`harness.readouts.cell_law.observation`), as the report does.

The estimands' truths: capacity's b is the exponent of c R^b, the state's law; the typical
restart's b is the same where every width's mixture of learners is alike (p constant), and
not a power law otherwise (those designs report capacity only). Beside the new rule, the
rule it replaces (`todays_interval`: every restart at the rate chosen per width, b's t
interval switching from n - 2 to c - 2 degrees of freedom and widened by sqrt(F) once the lack
of fit F passes 1) is run on the same sweeps."""

import argparse
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from harness.config.capacity_protocol import load_grid
from harness.readouts.capacity import INTERVAL, LEFT, RIGHT
from harness.readouts.cell_law import observations
from harness.readouts.censored_law import EXACT, CensoredLaw, Observation, fit_censored_law
from harness.readouts.restarts import CAPACITY, TYPICAL, cells, restarts
from harness.report.plain_table import print_table

RATES = (0.003, 0.01)
TODAY = "replaced"
VAL_NOISE = 0.05


@dataclass(frozen=True)
class Design:
    """One simulated sweep's design (module docstring)."""

    name: str
    bounds: tuple[int, ...] = (4, 6, 8, 12, 16)
    c: float = 0.31
    b: float = 1.0
    spread: float = 0.10
    restarts: int = 6
    learn: tuple[float, ...] | float = 1.0
    level_off: tuple[float, float] = (0.2, 0.5)
    floor: float = 0.5
    rising: float = 0.0
    width_sd: float = 0.0
    max_load: dict | None = None
    fixed_loads: int | None = None
    typical_has_law: bool = True

    def p(self, i: int) -> float:
        return self.learn[i] if isinstance(self.learn, tuple) else self.learn

    def loads(self, bound: int) -> list[int]:
        if self.fixed_loads:
            return load_grid(self.fixed_loads)
        return load_grid((self.max_load or {}).get(bound, 2 * bound))


DESIGNS = (
    Design("linear: every restart learns (c 0.31, spread 0.10)"),
    Design(
        "DeltaNet: half the restarts level off (c 1.1, spread 0.10)",
        c=1.1,
        learn=0.5,
        max_load={16: 64},
    ),
    Design(
        "published: learning grows with width (DeltaNet 4,000 steps)",
        c=1.1,
        learn=(0.2, 0.3, 0.4, 0.5, 0.6),
        rising=0.1,
        max_load={16: 64},
        typical_has_law=False,
    ),
    Design("linear, widths scatter about the law (w 0.15)", width_sd=0.15),
    Design(
        "linear at 8,000 steps: R 4-12, 3 seeds at one rate",
        bounds=(4, 6, 8, 12),
        restarts=3,
    ),
    Design(
        "5 widths x 5 seeds (b 1, spread 0.12, loads to 24)",
        bounds=(2, 4, 8, 16, 32),
        c=0.9,
        spread=0.12,
        restarts=5,
        fixed_loads=24,
    ),
)


def censor(n: float, loads: list[int], rising: bool) -> tuple[str | None, float, float | None]:
    """(censoring, reading, upper end) of a true n read off `loads` (module docstring)."""
    largest = max(loads)
    if n < 2:
        return LEFT, 2.0, None
    if n >= largest:
        return RIGHT, float(largest), None
    if rising:
        return RIGHT, n, None
    if n >= 0.75 * largest:
        return INTERVAL, n, float(min(x for x in loads if x > n))
    return None, n, None


def restart_rows(rng: np.random.Generator, design: Design) -> list[dict]:
    """One simulated sweep's restarts as the report's rows."""
    rows = []
    for i, bound in enumerate(design.bounds):
        loads = design.loads(bound)
        full = design.c * bound**design.b * math.exp(rng.normal(0, design.width_sd))
        for j in range(design.restarts):
            n = full * math.exp(rng.normal(0, design.spread))
            at_floor = False
            if rng.random() >= design.p(i):
                at_floor = rng.random() < design.floor
                n *= rng.uniform(*design.level_off)
            rising = rng.random() < design.rising
            shown = n * rng.uniform(0.5, 1.0) if rising else n
            kind, value, high = censor(shown, loads, rising)
            low = max(x for x in loads if x <= shown) if kind == INTERVAL else None
            rows.append(
                {
                    "model": "sim",
                    "R": bound,
                    "seed": j % 3 if design.restarts == 6 else j,
                    "optim.lr": RATES[j // 3] if design.restarts == 6 else RATES[1],
                    "config_hash": f"{bound}-{j}",
                    "status": "ok",
                    "val/acc": (-5.0 if at_floor else math.log(shown)) + rng.normal(0, VAL_NOISE),
                    "capacity.verdict": "training_limited" if at_floor else "capacity_limited",
                    "capacity.why": "at_floor" if at_floor else None,
                    "capacity.n90": 2.0 if at_floor else value,
                    "capacity.n90_censoring": LEFT if at_floor else kind,
                    "capacity.n90_low": low,
                    "capacity.n90_high": high,
                    "state.mixer_floats_per_layer": float(33 * bound),
                    "state.rank_bound_stack": float(bound),
                }
            )
    return rows


def todays_interval(rows: list[dict], level: float) -> tuple[float, float]:
    """The rule replaced: every readable restart at the rate chosen per width (the better
    mean validation accuracy), b's t interval on n - 2 degrees of freedom, or on the cells'
    c - 2 and widened by sqrt(F) once the lack of fit F passes 1."""
    frame = pd.DataFrame(rows)
    kept = []
    for _, group in frame.groupby("R"):
        best = group.groupby("optim.lr")["val/acc"].mean().idxmax()
        kept.extend(group[group["optim.lr"] == best].to_dict("records"))
    obs = []
    for r in kept:
        if r["capacity.why"] == "at_floor":
            continue
        kind = r["capacity.n90_censoring"]
        kind = kind if isinstance(kind, str) else EXACT
        if kind == INTERVAL:  # today's rule: right-censored near the ceiling
            kind = RIGHT
        obs.append(Observation(float(r["R"]), kind, r["capacity.n90"], cell=str(r["R"])))
    law = fit_censored_law(obs, level=level)
    if law is None or not math.isfinite(law.b_se):
        return math.nan, math.nan
    n, lack = law.n, law.lack_of_fit
    free = lack.df[0] if lack is not None and lack.f > 1 else n - 2
    widen = math.sqrt(max(1.0, lack.f)) if lack is not None else 1.0
    half = stats.t.ppf(0.5 + level / 2, free) * law.b_se * math.sqrt(n / (n - 2)) * widen
    return law.b - half, law.b + half


def cell_laws(
    rows: list[dict], level: float = 0.9, estimands: tuple | list = (CAPACITY, TYPICAL)
) -> dict[str, CensoredLaw | None]:
    """The law in R on each of `estimands` of one simulated sweep, read as the report reads it
    (`harness.readouts.restarts`, `harness.readouts.cell_law.observations`)."""
    runs = restarts(pd.DataFrame(rows))
    table = cells(runs, ["R"])
    keys = ["model", "R"]
    return {
        estimand: fit_censored_law(observations(runs, table, estimand, keys, "rank_bound"), level)
        for estimand in estimands
    }


RULES = (CAPACITY, TYPICAL, TODAY)


def simulate(
    design: Design, sweeps: int, level: float = 0.9, seed: int = 0, rules: tuple = RULES
) -> dict:
    """Coverage of the true b, the median interval width and the share of sweeps fitted, per
    rule of `rules` (the estimands' laws, and `TODAY`: the rule replaced) over `sweeps`."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {rule: [] for rule in rules}
    for _ in range(sweeps):
        rows = restart_rows(rng, design)
        for estimand, law in cell_laws(rows, level, [r for r in rules if r != TODAY]).items():
            out[estimand].append((law.b_low, law.b_high) if law else (math.nan, math.nan))
        if TODAY in rules:
            out[TODAY].append(todays_interval(rows, level))
    return {rule: summary(intervals, design.b) for rule, intervals in out.items()}


def summary(intervals: list[tuple[float, float]], truth: float) -> dict:
    """Coverage and median width among the sweeps that give an interval, and their share (a
    law read at two widths or fewer gives none: b is not pinned)."""
    lows, highs = np.array(intervals).T
    fitted = np.isfinite(lows) & np.isfinite(highs)
    if not fitted.any():
        return {"coverage": math.nan, "width": math.nan, "fitted": 0.0}
    covered = (lows[fitted] <= truth) & (truth <= highs[fitted])
    width = float(np.median((highs - lows)[fitted]))
    return {"coverage": float(covered.mean()), "width": width, "fitted": float(fitted.mean())}


def table(sweeps: int, level: float = 0.9) -> list[dict]:
    """One row per design and rule."""
    rows = []
    for design in DESIGNS:
        found = simulate(design, sweeps, level)
        for rule in RULES:
            if rule == TYPICAL and not design.typical_has_law:
                continue
            s = found[rule]
            rows.append(
                {
                    "design": design.name,
                    "rule": {TODAY: "replaced (all restarts, F switch)"}.get(rule, rule),
                    f"coverage at {level:.2f}": f"{s['coverage']:.3f}",
                    "median width": f"{s['width']:.2f}",
                    "with an interval": f"{s['fitted']:.2f}",
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweeps", type=int, default=1000, help="simulated sweeps per design")
    parser.add_argument("--level", type=float, default=0.9, help="the interval's nominal level")
    args = parser.parse_args(argv)
    print_table(table(args.sweeps, args.level))


if __name__ == "__main__":
    main()
