"""Each mixer's capacity law (docs/background.md, "The censored capacity law"), fitted by
censored maximum likelihood to the runs the weak-run rule keeps (`CapacityRun.fitted`):

- the primary model, n90 = c (R - R0) against the stack's rank bound R (exponent 1), with the
  range of c when one width is left out;
- the power law n90 = a R^b in the rank bound, whose b says whether the exponent 1 holds: its
  interval (`harness.readouts.censored_law.slope_interval`, coverage tested), the lack of fit,
  the range of b over the drop-one-width refits and how many left-out widths the refits
  predict (`harness.readouts.drop_one_width`);
- the alternative, the power law in floats n90 = a floats^b (and n50's), with its AIC against
  the primary model's."""

import math
from collections import defaultdict
from dataclasses import dataclass

from harness.readouts.capacity import FLOOR_AT_JUDGING_LOAD, level_name
from harness.readouts.censored_law import LEFT, RIGHT, CensoredLaw, fit_censored_law
from harness.readouts.drop_one_width import (
    HeldOut,
    by_cell,
    exponent_range,
    held_out,
    predicted_share,
)
from harness.readouts.proportional_law import ProportionalLaw, fit_proportional_law
from harness.report.capacity_runs import CapacityRun
from harness.report.style import model_order


@dataclass(frozen=True)
class MixerLaw:
    """One mixer's laws: `primary` (n90 = c (R - R0)) with `c_range` over the drop-one-width
    refits; `rank` (n90 = a R^b) with its left-out widths (`held`); `n90` and `n50` (power
    laws in floats); and the runs they come from."""

    mixer: str
    n90: CensoredLaw | None
    n50: CensoredLaw | None
    rank: CensoredLaw | None
    primary: ProportionalLaw | None
    c_range: tuple[float, float] | None
    held: list[HeldOut]
    runs: list[CapacityRun]
    threshold: float

    @property
    def name(self) -> str:
        """The threshold's readout, `n90` or `n80`."""
        return level_name(self.threshold)

    def against_exponent_one(self) -> str:
        """Whether the rank bound's exponent 1 lies in the interval of b in R."""
        law = self.rank
        if law is None or math.isnan(law.b_low):
            return "no interval for the exponent in R"
        inside = law.b_low <= 1 <= law.b_high
        where = "inside" if inside else ("below" if law.b_low > 1 else "above")
        return f"exponent 1 {where} it"

    def against_floats(self) -> str:
        """The power law in floats' b (where the floats do not move with R alone) and its AIC
        against the primary model's."""
        if self.primary is None or self.n90 is None:
            return ""
        gap = self.n90.aic - self.primary.aic
        better = "the line in R" if gap > 0 else "the power law"
        same = self.rank is not None and abs(self.rank.b - self.n90.b) < 5e-3
        text = "floats in proportion to R here" if same else f"b in floats = {self.n90.shown()}"
        return f"{text}; {better} fits better by {abs(gap):.1f} in AIC"


def observations(runs: list[CapacityRun], name: str, axis: str = "floats") -> list:
    """The runs' readouts `name` (`n90`, `n50`) as the censored fit's observations on the
    law's x `axis` (`floats` or `rank_bound`)."""
    return [o for o in (r.observation(name, axis) for r in runs) if o is not None]


def c_range(observations_: list) -> tuple[float, float] | None:
    """(smallest, largest) c of n90 = c (R - R0) refitted without each width in turn."""
    cells = by_cell(observations_)
    cs = []
    for cell in cells:
        law = fit_proportional_law([o for name, g in cells.items() if name != cell for o in g])
        if law is not None:
            cs.append(law.c)
    return (min(cs), max(cs)) if cs else None


def capacity_laws(runs: list[CapacityRun], threshold: float) -> dict[str, MixerLaw]:
    """Each mixer with an n90 law (exact readouts at two or more state sizes)."""
    by_mixer: dict[str, list[CapacityRun]] = defaultdict(list)
    for run in runs:
        by_mixer[run.mixer].append(run)
    laws = {}
    for mixer, mine in by_mixer.items():
        n90 = fit_censored_law(observations(mine, "n90"))
        if n90 is None:
            continue
        in_rank = observations(mine, "n90", "rank_bound")
        laws[mixer] = MixerLaw(
            mixer=mixer,
            n90=n90,
            n50=fit_censored_law(observations(mine, "n50")),
            rank=fit_censored_law(in_rank),
            primary=fit_proportional_law(in_rank),
            c_range=c_range(in_rank),
            held=held_out(in_rank),
            runs=mine,
            threshold=threshold,
        )
    return laws


def law_runs(law: MixerLaw) -> str:
    """`12 runs at 4 widths (R 4-12, 128-384 floats), 3 seeds; 8 read, 1 left-censored, 3
    right-censored; left out: 1 at the floor, 0 still rising below the judging load`."""
    fit, runs = law.n90, law.runs
    fitted = [r for r in runs if r.fitted]
    sizes = sorted({r.floats for r in fitted})
    bounds = sorted({r.rank_bound for r in fitted if r.rank_bound})
    seeds = len({r.seed for r in fitted})
    counts = fit.counts
    out = [r for r in runs if not r.fitted]
    at_floor = sum(r.why == FLOOR_AT_JUDGING_LOAD for r in out)
    span = f"R {bounds[0]:g}-{bounds[-1]:g}, " if bounds else ""
    return (
        f"{fit.n} runs at {len(sizes)} widths ({span}{sizes[0]:,.0f}-{sizes[-1]:,.0f} floats), "
        f"{seeds} seeds; {counts['exact']} read, {counts[LEFT]} left-censored, "
        f"{counts[RIGHT]} right-censored; left out: {at_floor} at the floor, "
        f"{len(out) - at_floor} still rising below the judging load"
    )


def refits(law: MixerLaw) -> str:
    """`over 3 of 4 drop-one-width refits` (a refit needs readings at two widths left)."""
    widths = len({r.floats for r in law.runs if r.fitted})
    return f"over {len(law.held)} of {widths} drop-one-width refits"


def primary_note(law: MixerLaw) -> str:
    """`n90 = 0.84 (R - 1.2), c from 0.71 to 0.95 leaving out one width`."""
    primary = law.primary
    if primary is None:
        return f"no rank-bound line for {law.name}"
    sign = "-" if primary.overhead >= 0 else "+"
    text = f"{law.name} = {primary.c:.3g} (R {sign} {abs(primary.overhead):.2g})"
    if law.c_range is not None:
        text += f", c {law.c_range[0]:.3g}-{law.c_range[1]:.3g} {refits(law)}"
    return text


def rank_note(law: MixerLaw) -> str:
    """b in R with its interval, the exponent 1 against it, its drop-one-width range, the
    widths it predicts and its lack of fit."""
    rank = law.rank
    if rank is None:
        return "no power law in R"
    text = f"b in R = {rank.shown()} ({rank.level:.0%}; {law.against_exponent_one()})"
    spread = exponent_range(law.held)
    if spread is not None:
        text += f", {spread[0]:.2f}-{spread[1]:.2f} {refits(law)}"
    inside, judged = predicted_share(law.held)
    if judged:
        text += f"; the refits predict {inside} of {judged} left-out widths"
    if rank.lack_of_fit is not None:
        text += f"; {rank.lack_of_fit.shown()}"
    return text


def law_note(law: MixerLaw) -> str:
    """One line per mixer: the primary model, the exponent in R and its checks, the
    alternative in floats, and the runs."""
    parts = [primary_note(law), rank_note(law), law.against_floats(), law_runs(law)]
    return f"capacity law: {law.mixer} " + "; ".join(p for p in parts if p) + "."


def law_notes(laws: dict[str, MixerLaw]) -> list[str]:
    """`law_note` per mixer, in the registry's order."""
    return [law_note(laws[mixer]) for mixer in sorted(laws, key=model_order)]
