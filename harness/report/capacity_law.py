"""Each mixer's cells and capacity laws as the report says them (docs/background.md, "Capacity
and learnability", "The censored capacity law"): the cells' capacity and learnability
(`harness.readouts.restarts.cells`) and the laws on both estimands
(`harness.readouts.cell_law.fit_cell_laws`), read from the report's rows.

Per mixer, one line a law: on capacity (each width's restarts that reach its best) and on the
typical restart (every readable restart):

- the primary model, n90 = c (R - R0) against the stack's rank bound R (exponent 1), with the
  range of c when one width is left out;
- the power law n90 = a R^b, whose b says whether the exponent 1 holds, its interval, the
  range of b over the drop-one-width refits and how many left-out widths the refits predict;
- the alternative, the power law in floats n90 = a floats^b, with its AIC against the
  primary model's;

and a line of each width's capacity and learnability."""

import math

import pandas as pd

from harness.readouts.capacity import level_name, shown
from harness.readouts.cell_law import CellLaw, fit_cell_laws
from harness.readouts.censored_law import LEFT, RIGHT
from harness.readouts.drop_one_width import exponent_range, predicted_share
from harness.readouts.restarts import (
    CAPACITY,
    ESTIMANDS,
    REACH,
    STATE_COLUMNS,
    TYPICAL,
    cells,
    restarts,
)
from harness.report.frame import as_key
from harness.report.look import model_order

CELL = "cell"
"""The report's cell column: a point's task and parameters (`cell_key`), rate and seed aside."""
PROTOCOL = ("task", "trainer.max_steps", "backbone.n_layers", "capacity.protocol")
GROWS = "state.grows_with_seq_len"
"""Whether a cell's state grows with T (a KV cache): no fixed state to pair it at."""
"""The settings a cell keeps beside its state: cells compare only under the same ones."""
ESTIMAND_NAMES = {
    CAPACITY: "capacity (each width's restarts within 0.8 of its best, chosen on validation)",
    TYPICAL: "the typical restart (every readable restart)",
}


def cell_key(row: dict | pd.Series, point_keys: list[str]) -> str:
    """A run's or a point's cell: its task and `point_keys` values, as one string."""
    return "|".join([str(row.get("task")), *(as_key(row.get(k)) for k in point_keys)])


def restart_frame(rows: list[dict], points: pd.DataFrame, point_keys: list[str]) -> pd.DataFrame:
    """Every job of the points as a tidy DataFrame with its mixer's name (`mixer`: the
    point's variant name, its `name`, `linear elu`) and its `cell`."""
    name_of = {
        (p["model"], cell_key(p["params"] | {"task": p["task"]}, point_keys)): p["name"]
        for _, p in points.iterrows()
    }
    frame = pd.DataFrame(rows)
    if frame.empty or "capacity.n90" not in frame:
        return pd.DataFrame()
    frame[CELL] = [cell_key(r, point_keys) for r in rows]
    keys = zip(rows, frame[CELL], strict=True)
    frame["mixer"] = [name_of.get((r.get("model"), key)) for r, key in keys]
    for column in ("seed", "optim.lr", "val/acc", "config_hash", "status"):
        if column not in frame:
            frame[column] = None
    return frame[frame["mixer"].notna()]


def cells_and_laws(
    rows: list[dict], points: pd.DataFrame, point_keys: list[str]
) -> tuple[pd.DataFrame, dict[tuple[str, str], CellLaw]]:
    """The cells (`harness.readouts.restarts.cells`, by mixer and cell) of the runs with a
    load-curve readout, and each (mixer, estimand)'s law."""
    frame = restart_frame(rows, points, point_keys)
    if frame.empty:
        return pd.DataFrame(), {}
    frame = frame[frame["capacity.verdict"].notna() | (frame["status"] != "ok")]
    table = cells(frame, [CELL], by="mixer", keep=(*STATE_COLUMNS, *PROTOCOL, GROWS))
    return table, fit_cell_laws(restarts(frame, "mixer"), table, [CELL], by="mixer")


def primary_note(law: CellLaw, name: str) -> str:
    """`n90 = 0.84 (R - 1.2), c 0.71-0.95 over 4 of 5 drop-one-width refits`."""
    primary = law.primary
    if primary is None:
        return f"no rank-bound line for {name}"
    sign = "-" if primary.overhead >= 0 else "+"
    text = f"{name} = {primary.c:.3g} (R {sign} {abs(primary.overhead):.2g})"
    if law.c_range is not None:
        text += f", c {law.c_range[0]:.3g}-{law.c_range[1]:.3g} {refits(law)}"
    return text


def refits(law: CellLaw) -> str:
    """`over 3 of 4 drop-one-width refits` (a refit needs readings at two widths left)."""
    return f"over {len(law.held)} of {law.fitted} drop-one-width refits"


def against_exponent_one(law: CellLaw) -> str:
    """Whether the rank bound's exponent 1 lies in the interval of b in R."""
    rank = law.rank
    if rank is None or math.isnan(rank.b_low):
        return "no interval for the exponent in R"
    where = "inside" if rank.b_low <= 1 <= rank.b_high else ("below" if rank.b_low > 1 else "above")
    return f"exponent 1 {where} it"


def rank_note(law: CellLaw) -> str:
    """b in R with its interval, the exponent 1 against it, its drop-one-width range and the
    widths it predicts."""
    rank = law.rank
    if math.isnan(rank.b_low):
        text = f"b in R = {rank.b:.2f}, no interval (read at {law.read} widths)"
    else:
        text = f"b in R = {rank.shown()} ({rank.level:.0%}; {against_exponent_one(law)})"
    spread = exponent_range(law.held)
    if spread is not None:
        text += f", {spread[0]:.2f}-{spread[1]:.2f} {refits(law)}"
    inside, judged = predicted_share(law.held)
    if judged:
        text += f"; the refits predict {inside} of {judged} left-out widths"
    if rank.lack_of_fit is not None:
        text += f"; {rank.lack_of_fit.shown()}"
    return text


def against_floats(law: CellLaw) -> str:
    """The power law in floats' b (where the floats do not move with R alone) and its AIC
    against the primary model's."""
    if law.primary is None or law.floats is None:
        return ""
    gap = law.floats.aic - law.primary.aic
    better = "the line in R" if gap > 0 else "the power law"
    same = abs(law.rank.b - law.floats.b) < 5e-3
    text = "floats in proportion to R here" if same else f"b in floats = {law.floats.shown()}"
    return f"{text}; {better} fits better by {abs(gap):.1f} in AIC"


def law_widths(law: CellLaw) -> str:
    """`14 readouts at 5 widths (R 4-16), 3 read: 8 exact, 6 left-censored, 0 right-censored,
    0 interval-censored; 30 restarts`."""
    counts, bounds = law.rank.counts, law.widths
    return (
        f"{law.rank.n} readouts at {law.fitted} widths (R {bounds[0]:g}-{bounds[-1]:g}), "
        f"{law.read} read: {counts['exact']} exact, {counts[LEFT]} left-censored, "
        f"{counts[RIGHT]} right-censored, {counts['interval']} interval-censored; "
        f"{law.restarts} restarts"
    )


def law_note(law: CellLaw, threshold: float) -> str:
    """One line per law: its estimand, the primary model, the exponent in R and its checks,
    the alternative in floats, and the widths."""
    name = level_name(threshold)
    parts = [primary_note(law, name), rank_note(law), against_floats(law), law_widths(law)]
    head = f"{law.estimand} law: {law.mixer}, on {ESTIMAND_NAMES[law.estimand]}: "
    return head + "; ".join(p for p in parts if p) + "."


def cell_note(mixer: str, table: pd.DataFrame, threshold: float) -> str:
    """`capacity and learnability: linear at R 4: <2, 0 of 6; R 8: 2.78, 5 of 6; ...`."""
    mine = table[table["mixer"] == mixer].sort_values("state.rank_bound_stack")
    by_rank = (
        mine["state.rank_bound_stack"].notna().all() and mine["state.rank_bound_stack"].is_unique
    )
    parts = []
    for _, cell in mine.iterrows():
        where = (
            f"R {cell['state.rank_bound_stack']:g}"
            if by_rank
            else cell[CELL].split("|", 1)[-1].replace("|", ", ")
        )
        parts.append(f"{where}: {capacity_shown(cell)}, {cell['learnability']}")
    head = f"capacity ({level_name(threshold)} of the best restart) and learnability (restarts"
    return f"{head} within {REACH:g} of it): {mixer} at " + "; ".join(parts) + "."


def capacity_shown(cell: pd.Series) -> str:
    """A cell's capacity as `shown` prints a readout (`8.19`, `<2`, `>=16`, `[48, 64)`), or
    `not learned` where its best restart is no readout of the state."""
    if not cell.get("capacity_readable"):
        return "not learned"
    censoring = cell.get("capacity_censoring")
    readout = {
        "n90": cell.get("capacity_n90"),
        "n90_censoring": censoring if isinstance(censoring, str) else None,
        "n90_low": cell.get("capacity_low"),
        "n90_high": cell.get("capacity_high"),
    }
    return shown(readout, "n90")


def law_notes(
    laws: dict[tuple[str, str], CellLaw], table: pd.DataFrame, threshold: float
) -> list[str]:
    """Per mixer in the registry's order: its cells' line, then its laws' lines."""
    if table.empty:
        return []
    out = []
    for mixer in sorted(set(table["mixer"]), key=model_order):
        out.append(cell_note(mixer, table, threshold))
        out.extend(law_note(laws[(mixer, e)], threshold) for e in ESTIMANDS if (mixer, e) in laws)
    return out
