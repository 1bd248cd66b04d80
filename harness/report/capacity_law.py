"""Each mixer's capacity law (docs/background.md, "The censored capacity law"): n90 = a floats^b
and n50 = a floats^b fitted by censored maximum likelihood to every run that is not
training_limited (`harness.readouts.censored_law`), b's interval a bootstrap over seeds, and
the two nulls beside it (`harness.readouts.proportional_law`): the exponent the mixer's rank
bound predicts across the sweep's cells, and a proportional law with an overhead."""

import math
from collections import defaultdict
from dataclasses import dataclass

from harness.readouts.capacity import level_name
from harness.readouts.censored_law import LEFT, RESAMPLES, RIGHT, CensoredLaw, fit_censored_law
from harness.readouts.proportional_law import (
    ProportionalLaw,
    fit_proportional_law,
    rank_bound_exponent,
)
from harness.report.capacity_runs import CapacityRun
from harness.report.style import model_order


@dataclass(frozen=True)
class MixerLaw:
    """One mixer's laws: `n90` (at the report's threshold) and `n50`, the rank-bound exponent
    of its cells, the proportional law at the threshold, and the runs they come from."""

    mixer: str
    n90: CensoredLaw | None
    n50: CensoredLaw | None
    rank_exponent: float | None
    proportional: ProportionalLaw | None
    runs: list[CapacityRun]
    threshold: float

    @property
    def name(self) -> str:
        """The threshold's readout, `n90` or `n80`."""
        return level_name(self.threshold)

    def against_rank_bound(self) -> str:
        """Whether the rank bound's exponent lies in b's interval."""
        law, slope = self.n90, self.rank_exponent
        if law is None or slope is None:
            return "no rank-bound exponent"
        inside = law.b_low <= slope <= law.b_high
        where = "inside" if inside else ("below" if slope < law.b_low else "above")
        return f"rank-bound exponent {slope:.2f}, {where} b's interval"

    def against_proportional(self) -> str:
        """Which of the power law and n = c (floats - F0) fits better, by AIC."""
        law, prop = self.n90, self.proportional
        if law is None or prop is None:
            return ""
        gap = prop.aic - law.aic
        better = "the power law" if gap > 0 else "the proportional law"
        return (
            f"proportional {self.name} = {prop.c:.3g} (floats - {prop.overhead:.0f}): "
            f"log L {prop.log_likelihood:.1f} against the power law's "
            f"{law.log_likelihood:.1f}, {better} fits better by {abs(gap):.1f} in AIC"
        )


def observations(runs: list[CapacityRun], name: str) -> list:
    """The runs' readouts `name` (`n90`, `n50`) as the censored fit's observations."""
    return [o for o in (r.observation(name) for r in runs) if o is not None]


def capacity_laws(
    runs: list[CapacityRun], threshold: float, resamples: int = RESAMPLES
) -> dict[str, MixerLaw]:
    """Each mixer with an n90 law (exact readouts at two or more state sizes)."""
    by_mixer: dict[str, list[CapacityRun]] = defaultdict(list)
    for run in runs:
        by_mixer[run.mixer].append(run)
    laws = {}
    for mixer, mine in by_mixer.items():
        n90 = fit_censored_law(observations(mine, "n90"), resamples=resamples)
        if n90 is None:
            continue
        laws[mixer] = MixerLaw(
            mixer=mixer,
            n90=n90,
            n50=fit_censored_law(observations(mine, "n50"), resamples=resamples),
            rank_exponent=rank_bound_exponent([(r.floats, r.rank_bound) for r in mine]),
            proportional=fit_proportional_law(observations(mine, "n90")),
            runs=mine,
            threshold=threshold,
        )
    return laws


def law_runs(law: MixerLaw) -> str:
    """`35 runs at 7 state sizes (132-1,056 floats), 5 seeds; 20 read, 10 left-censored, 5
    right-censored; 3 training_limited left out`."""
    fit, runs = law.n90, law.runs
    fitted = [r for r in runs if r.fitted]
    sizes = sorted({r.floats for r in fitted})
    seeds = len({r.seed for r in fitted})
    counts = fit.counts
    left_out = len(runs) - len(fitted)
    return (
        f"{fit.n} runs at {len(sizes)} state sizes ({sizes[0]:,.0f}-{sizes[-1]:,.0f} floats), "
        f"{seeds} seeds; {counts['exact']} read, {counts[LEFT]} left-censored, "
        f"{counts[RIGHT]} right-censored; {left_out} training_limited left out"
    )


def error_against_spread(runs: list[CapacityRun]) -> str:
    """The readouts' sampling error against the spread between seeds, both of log n90 over
    the read runs: the root mean square of the errors, and the pooled standard deviation
    within cells (sum over cells of squared deviations from the cell's mean, over the runs
    less the cells)."""
    read = [r for r in runs if r.fitted and r.n90_censoring is None and r.n90_se_log]
    by_cell: dict[float, list[float]] = defaultdict(list)
    for r in read:
        by_cell[r.floats].append(math.log(r.n90))
    cells = [v for v in by_cell.values() if len(v) >= 2]
    free = sum(len(v) - 1 for v in cells)
    if not free:
        return "no cell with two read seeds to compare the sampling error with"
    pooled = math.sqrt(sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in cells) / free)
    error = math.sqrt(sum(r.n90_se_log**2 for r in read) / len(read))
    relation = "below" if error < pooled else "not below"
    return (
        f"sampling error of log n90 {error:.3f} (rms over {len(read)} read runs), {relation} "
        f"the spread between seeds {pooled:.3f} (pooled over {len(cells)} cells)"
    )


def law_note(law: MixerLaw) -> str:
    """One line per mixer: both laws with their intervals, the runs, and both nulls."""
    fit, half = law.n90, law.n50
    text = (
        f"capacity law: {law.mixer} {law.name} = {fit.a:.3g} floats^{fit.b:.2f}, "
        f"b = {fit.shown()} ({fit.level:.0%} bootstrap over seeds) from {law_runs(law)}; "
        f"{law.against_rank_bound()}"
    )
    if half is not None:
        text += f"; n50 b = {half.shown()}"
    proportional = law.against_proportional()
    text += f"; {proportional}" if proportional else ""
    return f"{text}; {error_against_spread(law.runs)}."


def law_notes(laws: dict[str, MixerLaw]) -> list[str]:
    """`law_note` per mixer, in the registry's order."""
    return [law_note(laws[mixer]) for mixer in sorted(laws, key=model_order)]
