"""A law checked width by width (docs/background.md, "The censored capacity law"): each width
(cell) is left out in turn, the law refitted on the others, and

- the fitted values' range over those refits says how much one width carries the law;
- the refit predicts the left-out width: the geometric mean of its exact readouts should fall
  inside the refit's prediction interval (`CensoredLaw.prediction_interval`). A law that
  predicts widths it has not seen is a law, not a curve through its points.

A width whose readouts are all censored has no mean to predict: it is refitted without, and
its prediction is not judged."""

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.readouts.censored_law import EXACT, CensoredLaw, Observation, fit_censored_law


@dataclass(frozen=True)
class HeldOut:
    """One width left out: its `cell` and state `size`, the refit without it (`b` its
    exponent), the refit's `predicted` readout there with its `interval`, and the geometric
    mean of the width's exact readouts (`observed`, None when none is exact)."""

    cell: str
    size: float
    b: float
    predicted: float
    interval: tuple[float, float]
    observed: float | None

    @property
    def inside(self) -> bool | None:
        """The observed mean lies inside the predicted interval (None: nothing to judge, or
        no interval: the refit's readouts hold nothing about the scatter)."""
        if self.observed is None or not all(map(math.isfinite, self.interval)):
            return None
        return self.interval[0] <= self.observed <= self.interval[1]


def by_cell(observations: Sequence[Observation]) -> dict[str, list[Observation]]:
    """The observations grouped by their cell (state size), in order of size."""
    cells: dict[str, list[Observation]] = defaultdict(list)
    for o in sorted(observations, key=lambda o: o.floats):
        cells[o.cell or str(o.floats)].append(o)
    return dict(cells)


def held_out(
    observations: Sequence[Observation],
    fit: Callable[[Sequence[Observation]], CensoredLaw | None] = fit_censored_law,
) -> list[HeldOut]:
    """`HeldOut` for every width whose refit without it exists."""
    cells = by_cell(observations)
    out = []
    for cell, members in cells.items():
        rest = [o for name, group in cells.items() if name != cell for o in group]
        law = fit(rest)
        if law is None:
            continue
        exact = [math.log(o.value) for o in members if o.kind == EXACT]
        size = members[0].floats
        out.append(
            HeldOut(
                cell=cell,
                size=size,
                b=law.b,
                predicted=law(size),
                interval=law.prediction_interval(size, max(len(exact), 1)),
                observed=math.exp(sum(exact) / len(exact)) if exact else None,
            )
        )
    return out


def exponent_range(held: Sequence[HeldOut]) -> tuple[float, float] | None:
    """(smallest, largest) b over the refits; None without any."""
    bs = [h.b for h in held]
    return (min(bs), max(bs)) if bs else None


def predicted_share(held: Sequence[HeldOut]) -> tuple[int, int]:
    """(widths predicted inside their interval, widths judged)."""
    judged = [h.inside for h in held if h.inside is not None]
    return sum(judged), len(judged)
