"""A cell's restarts read as two quantities, never mixed (docs/background.md, "Capacity and
learnability").

A *cell* is one mixer at one state size, one budget and one task; its *restarts* are its runs
over seeds and learning rates. Training a linear-attention layer on recall is a lottery: at one
width some restarts learn the lookup and others level off at a fraction of it or stay at the
floor. The mean of such a mixture measures how often training succeeds as much as what the
state holds, so a cell is read twice:

- **capacity**: the n(t) readout of the cell's best restart, the restart with the highest
  validation accuracy (never test: the choice would then select on the measurement). It is a
  lower bound on what the state holds, censored as that run is;
- **learnability**: k of n, the restarts whose readout reaches `REACH` x the capacity. A
  capacity below the judging load is `0 of n` (nothing was learned); where the capacity is a
  lower bound, so is k (`>=k of n`).

Every cell is a best of the same number of restarts: the *design* is seeds `DESIGN_SEEDS` x
the `DESIGN_RATES` learning rates a mixer was run at most often (the two rates around its
pilot rate), each configuration once (deduplicated by config hash). Restarts outside the
design are counted (`extra`) and shown, never used for the capacity.

A restart's readout and its censoring come from `harness.readouts.capacity`: `left` (below
the judging load), `right` (a lower bound), `interval` (between two tested loads) or exact.
The functions take a tidy DataFrame of records, one row per run (the report's rows): `model`,
`seed`, `optim.lr`, `status`, `val/acc`, `config_hash` and the readout's `capacity.*`
columns."""

import math
from typing import Any

import pandas as pd

from harness.readouts.capacity import (
    LEFT,
    RIGHT,
    RISING_PAST_JUDGING_LOAD,
    TRAINING_LIMITED,
)

DESIGN_SEEDS = (0, 1, 2)
DESIGN_RATES = 2
REACH = 0.8
"""A restart reaches the capacity when its readout is at least this fraction of it."""

CAPACITY, TYPICAL = "capacity", "typical"
ESTIMANDS = (CAPACITY, TYPICAL)


def readable(row: pd.Series | dict) -> bool:
    """A readout of the state (the weak-run rule, docs/background.md, "The capacity
    protocol"): not training-limited, or still rising past the judging load (a lower bound);
    with a readout."""
    verdict, why = row.get("capacity.verdict"), row.get("capacity.why")
    usable = verdict not in (None, TRAINING_LIMITED) or why == RISING_PAST_JUDGING_LOAD
    return bool(usable and present(row.get("capacity.n90")))


def present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def rank(row: pd.Series | dict) -> float:
    """A restart's place in its cell, by readout: an unreadable run (at the floor, failed)
    below everything, a left-censored one just below its bound, others at their reading."""
    if row.get("status") != "ok" or not readable(row):
        return -math.inf
    value = float(row["capacity.n90"])
    return value - 1e-9 if row.get("capacity.n90_censoring") == LEFT else value


def design_rates(frame: pd.DataFrame, by: str = "model") -> dict[Any, tuple]:
    """Each mixer's design rates: the `DESIGN_RATES` learning rates with the most runs at the
    design seeds (ties to the smaller rate)."""
    seeds = frame[frame["seed"].isin(DESIGN_SEEDS)]
    out = {}
    for mixer, group in seeds.groupby(by, sort=False):
        counts = group["optim.lr"].value_counts()
        ordered = sorted(counts.index, key=lambda lr: (-counts[lr], lr))
        out[mixer] = tuple(sorted(ordered[:DESIGN_RATES]))
    return out


def restarts(frame: pd.DataFrame, by: str = "model") -> pd.DataFrame:
    """`frame` deduplicated by config hash (an ok record preferred, then the latest), with
    `in_design` (a design seed at a design rate, `design_rates`) and `rank` (`rank`)."""
    frame = frame.copy()
    frame["_ok"] = frame["status"] == "ok"
    if "config_hash" in frame:
        frame = frame.sort_values("_ok", kind="stable").drop_duplicates("config_hash", keep="last")
    rates = design_rates(frame, by)
    frame["in_design"] = [
        seed in DESIGN_SEEDS and lr in rates.get(mixer, ())
        for seed, lr, mixer in zip(frame["seed"], frame["optim.lr"], frame[by], strict=True)
    ]
    frame["rank"] = [rank(row) for _, row in frame.iterrows()]
    return frame.drop(columns="_ok")


def best_restart(design: pd.DataFrame) -> pd.Series | None:
    """The design restart with the highest validation accuracy among the ok ones."""
    ok = design[(design["status"] == "ok") & design["val/acc"].notna()]
    if ok.empty:
        return None
    return ok.loc[ok["val/acc"].astype(float).idxmax()]


def reaches(restart: pd.Series, capacity: pd.Series) -> bool:
    """`restart`'s readout is at least `REACH` x the capacity's (both readable, neither below
    the judging load)."""
    if not (readable(restart) and readable(capacity)):
        return False
    if LEFT in (restart.get("capacity.n90_censoring"), capacity.get("capacity.n90_censoring")):
        return False
    return float(restart["capacity.n90"]) >= REACH * float(capacity["capacity.n90"])


def learnability(design: pd.DataFrame, capacity: pd.Series | None) -> tuple[int, int, bool]:
    """(k, n, k is a lower bound) of the module docstring."""
    n = len(design)
    if capacity is None or not readable(capacity):
        return 0, n, False
    k = sum(reaches(row, capacity) for _, row in design.iterrows())
    return k, n, capacity.get("capacity.n90_censoring") == RIGHT


def shown_learnability(k: int, n: int, lower: bool) -> str:
    """`4 of 6`, `>=4 of 6` where the capacity is a lower bound."""
    return f"{'>=' if lower else ''}{k} of {n}"


def readout_columns(restart: pd.Series | None, prefix: str) -> dict[str, Any]:
    """A chosen restart's readout as `<prefix>_n90`, `_censoring`, `_low`, `_high`, `_se_log`,
    `_readable`, `_seed`, `_lr`, `_why` (None where there is no restart)."""
    if restart is None:
        return {f"{prefix}_readable": False}
    get = restart.get
    return {
        f"{prefix}_n90": get("capacity.n90"),
        f"{prefix}_censoring": get("capacity.n90_censoring"),
        f"{prefix}_low": get("capacity.n90_low"),
        f"{prefix}_high": get("capacity.n90_high"),
        f"{prefix}_se_log": get("capacity.n90_se_log"),
        f"{prefix}_readable": readable(restart),
        f"{prefix}_seed": get("seed"),
        f"{prefix}_lr": get("optim.lr"),
        f"{prefix}_why": get("capacity.why"),
    }


STATE_COLUMNS = ("state.mixer_floats_per_layer", "state.rank_bound_stack")
"""A cell's state, the law's x axes: floats per layer and the stack's rank bound."""


def cells(
    frame: pd.DataFrame, cell_keys: list[str], by: str = "model", keep: tuple = STATE_COLUMNS
) -> pd.DataFrame:
    """One row per cell (`by` and `cell_keys`): the capacity's readout (`capacity_*`,
    `readout_columns`), `learned` and `restarts` (k and
    n of the learnability), `learnability` as shown, `extra` (restarts outside the design),
    and the `keep` columns (the state) of its first run that has them."""
    runs = restarts(frame, by)
    keys = [by, *cell_keys]
    rows = []
    for values, group in runs.groupby(keys, sort=False, dropna=False):
        design = group[group["in_design"]]
        best = best_restart(design)
        k, n, lower = learnability(design, best)
        row = dict(zip(keys, values if isinstance(values, tuple) else (values,), strict=True))
        row.update(readout_columns(best, CAPACITY))
        row.update(learned=k, restarts=n, learned_lower_bound=lower, extra=len(group) - n)
        row["learnability"] = shown_learnability(k, n, lower)
        for column in keep:
            known = group[column].dropna() if column in group else []
            row[column] = known.iloc[0] if len(known) else None
        rows.append(row)
    return pd.DataFrame(rows)
