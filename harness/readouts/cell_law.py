"""The capacity law on each estimand (docs/background.md, "Capacity and learnability", "The
censored capacity law"), fitted to a sweep's restarts (`harness.readouts.restarts`):

- **capacity**: each cell's restarts that reach its capacity (readouts within `REACH` of the
  best restart's, the best included): replicates of what the state holds when training finds
  it, so that the widths' scatter about the law can be told from the spread within a width. A
  cell none of whose restarts reads above the judging load gives its best restart, censored
  there;
- **typical**: every readable design restart, learned or not: the law of the run a single
  restart most likely gives, as the harness fitted it before it read restarts apart. Where
  restarts split, it measures how often training succeeds as much as the state.

A restart that is not a readout of the state (at the floor, still rising below the judging
load) is left out and counted. On each estimand's observations:

- the primary model, n90 = c (R - R0) in the stack's rank bound R (`ProportionalLaw`), with
  the range of c when one width is left out;
- the power law n90 = a R^b (`CensoredLaw`), whose b says whether the exponent 1 holds, with
  its interval (`harness.readouts.censored_law.slope_interval`: a random effect per width),
  the range of b over the drop-one-width refits and how many left-out widths they predict
  (`harness.readouts.drop_one_width`);
- the power law in floats n90 = a floats^b, the alternative."""

from dataclasses import dataclass

import pandas as pd

from harness.readouts.censored_law import (
    EXACT,
    INTERVAL,
    CensoredLaw,
    Observation,
    fit_censored_law,
    readout_observation,
)
from harness.readouts.drop_one_width import HeldOut, by_cell, held_out, predicted_share
from harness.readouts.proportional_law import ProportionalLaw, fit_proportional_law
from harness.readouts.restarts import (
    CAPACITY,
    ESTIMANDS,
    LEFT,
    REACH,
    STATE_COLUMNS,
    TYPICAL,
    reaches,
    readable,
)

AXES = {"floats": STATE_COLUMNS[0], "rank_bound": STATE_COLUMNS[1]}


@dataclass(frozen=True)
class CellLaw:
    """One mixer's laws on one estimand: `primary` (n90 = c (R - R0)) with `c_range` over
    the drop-one-width refits; `rank` (n90 = a R^b) with its left-out widths (`held`);
    `floats` (n90 = a floats^b); the `observations` in R; the widths fitted and left out
    (`widths`, `left_out`) and the design restarts behind them (`restarts`)."""

    mixer: str
    estimand: str
    rank: CensoredLaw
    floats: CensoredLaw | None
    primary: ProportionalLaw | None
    c_range: tuple[float, float] | None
    held: list[HeldOut]
    observations: list[Observation]
    widths: tuple[float, ...]
    left_out: int
    restarts: int

    @property
    def fitted(self) -> int:
        return len(self.widths)

    @property
    def read(self) -> int:
        """Widths read between two tested loads (exact or interval-censored)."""
        return len({o.floats for o in self.observations if o.kind in (EXACT, INTERVAL)})


def observation(run: pd.Series | dict, axis: str = "rank_bound") -> Observation | None:
    """A restart's readout as an observation of the censored fit on `axis` (`AXES`), its cell
    named by its floats; None where it is not a readout of the state. The readout's own
    sampling error is part of the spread the fit estimates."""
    size, value = run.get(AXES[axis]), run.get("capacity.n90")
    if not readable(run) or not size or not value or value <= 0:
        return None
    get = run.get
    name = f"{get(AXES['floats']):g}"
    low, high = get("capacity.n90_low"), get("capacity.n90_high")
    return readout_observation(size, get("capacity.n90_censoring"), value, low, high, cell=name)


def estimand_runs(design: pd.DataFrame, best: pd.Series | None, estimand: str) -> list:
    """A cell's restarts on `estimand` (module docstring)."""
    if estimand == TYPICAL:
        return [row for _, row in design.iterrows()]
    if best is None:
        return []
    reached = [row for _, row in design.iterrows() if reaches(row, best) or unsure(row, best)]
    return reached or [best]


def unsure(run: pd.Series, best: pd.Series) -> bool:
    """A restart below the judging load whose bound lies above `REACH` x the capacity: it may
    have reached it, and leaving it out would keep only the restarts that drew high at the
    narrow widths, where the judging load cuts; its censoring carries it into the fit."""
    return (
        readable(run)
        and readable(best)
        and run.get("capacity.n90_censoring") == LEFT
        and best.get("capacity.n90_censoring") != LEFT
        and float(run["capacity.n90"]) > REACH * float(best["capacity.n90"])
    )


def observations(
    runs: pd.DataFrame, table: pd.DataFrame, estimand: str, keys: list[str], axis: str
) -> list[Observation]:
    """Every cell's observations on `estimand` (`estimand_runs`, `observation`); `runs` are
    `harness.readouts.restarts.restarts`' rows, `table` their `cells`, both keyed by `keys`."""
    out = []
    for _, cell in table.iterrows():
        mine = runs[(runs[keys] == cell[keys]).all(axis=1) & runs["in_design"]]
        best = chosen(mine, cell)
        for run in estimand_runs(mine, best, estimand):
            found = observation(run, axis)
            if found is not None:
                out.append(found)
    return out


def chosen(design: pd.DataFrame, cell: pd.Series) -> pd.Series | None:
    """The cell's best restart (`capacity_seed`, `capacity_lr`) among its design runs."""
    match = design[
        (design["seed"] == cell.get("capacity_seed"))
        & (design["optim.lr"] == cell.get("capacity_lr"))
    ]
    return None if match.empty else match.iloc[0]


def c_range(observations_: list[Observation]) -> tuple[float, float] | None:
    """(smallest, largest) c of n90 = c (R - R0) refitted without each width in turn."""
    cells = by_cell(observations_)
    cs = []
    for cell in cells:
        law = fit_proportional_law([o for name, g in cells.items() if name != cell for o in g])
        if law is not None:
            cs.append(law.c)
    return (min(cs), max(cs)) if cs else None


def fit_cell_law(
    runs: pd.DataFrame, table: pd.DataFrame, mixer: str, estimand: str, keys: list[str]
) -> CellLaw | None:
    """`CellLaw` of one mixer's `runs` and cells on `estimand`; None without a law in R."""
    in_rank = observations(runs, table, estimand, keys, "rank_bound")
    rank = fit_censored_law(in_rank)
    if rank is None:
        return None
    widths = tuple(sorted({o.floats for o in in_rank}))
    return CellLaw(
        mixer=mixer,
        estimand=estimand,
        rank=rank,
        floats=fit_censored_law(observations(runs, table, estimand, keys, "floats")),
        primary=fit_proportional_law(in_rank),
        c_range=c_range(in_rank),
        held=held_out(in_rank),
        observations=in_rank,
        widths=widths,
        left_out=len(table) - len(widths),
        restarts=int(table["restarts"].sum()),
    )


def fit_cell_laws(
    runs: pd.DataFrame, table: pd.DataFrame, cell_keys: list[str], by: str = "model"
) -> dict[tuple[str, str], CellLaw]:
    """Each (mixer, estimand) with a law, from `runs` (`harness.readouts.restarts.restarts`)
    and their `table` (`harness.readouts.restarts.cells`), cells keyed by `by` and
    `cell_keys`."""
    laws = {}
    keys = [by, *cell_keys]
    for mixer, mine in table.groupby(by, sort=False):
        for estimand in ESTIMANDS:
            law = fit_cell_law(runs[runs[by] == mixer], mine, mixer, estimand, keys)
            if law is not None:
                laws[(mixer, estimand)] = law
    return laws


def law_row(law: CellLaw) -> dict:
    """A row of `laws.csv`: model, estimand, c, R0, b, b_low, b_high, widths read and fitted,
    restarts, the lack of fit, the left-out widths predicted, and the source (`own`: the
    sweep's records; the report marks a committed reference's `reference`)."""
    primary, rank = law.primary, law.rank
    inside, judged = predicted_share(law.held)
    lack = rank.lack_of_fit
    return {
        "model": law.mixer,
        "estimand": law.estimand,
        "c": primary.c if primary else None,
        "R0": primary.overhead if primary else None,
        "b": rank.b,
        "b_low": rank.b_low,
        "b_high": rank.b_high,
        "level": rank.level,
        "widths_read": law.read,
        "widths_fitted": law.fitted,
        "widths_left_out": law.left_out,
        "restarts": law.restarts,
        "lack_of_fit_F": lack.f if lack else None,
        "lack_of_fit_p": lack.p if lack else None,
        "predicted": f"{inside} of {judged}" if judged else None,
        "source": "own",
    }


def laws_frame(laws: dict[tuple[str, str], CellLaw]) -> pd.DataFrame:
    """`law_row` of every law, in the order fitted (each mixer's capacity, then typical)."""
    return pd.DataFrame([law_row(law) for law in laws.values()])


__all__ = ["CAPACITY", "TYPICAL", "CellLaw", "fit_cell_laws", "laws_frame", "observation"]
