"""The report's opening lines: how many runs converged, which points sit at chance or at the
binding-free floor (docs/tasks.md, "Binding-free baselines"), what to change, and one verdict
line per cell (mixer x state) with its seeds' readouts and what to change where the cell did
not learn (docs/background.md, "Reading a load curve")."""

from collections import Counter

import pandas as pd

from harness.readouts.capacity import (
    BELOW_JUDGING_LOAD,
    FLOOR_AT_JUDGING_LOAD,
    HOLDS_EVERY_LOAD,
    RISING_BELOW_JUDGING_LOAD,
    WHY,
    accuracy_by_load,
    level_name,
    load_of,
    shown,
)
from harness.readouts.convergence import MIN_DELTA, STILL_RISING, left_floor, under_floor
from harness.records.schema import OK
from harness.report.frame import baselines, metrics, missing, sort_key
from harness.report.look import describe, model_order

Point = pd.Series
"""A row of the points' DataFrame (`harness.report.frame.points`)."""


def name(point: Point) -> str:
    return " ".join(filter(None, [point.model, describe(point.params)]))


def at(point: Point, level: float) -> bool:
    """Accuracy within a tenth of the way from `level` to 1 (`convergence.left_floor`)."""
    return not left_floor([(0, point.test_acc)], level, MIN_DELTA)


def below_floor(point: Point) -> str | None:
    """`chance` or `between` for a point at the floor that is under it by more than the
    margin of `harness.readouts.convergence.under_floor` (max(min_delta, FLOOR_MARGIN x
    (floor - chance))): at chance it has not learned which tokens answer; between, it is
    learning that; None when it answers as a binding-free strategy does."""
    floor = max(baselines(point).values())
    return under_floor(point.test_acc, baselines(point).get("chance"), floor, MIN_DELTA)


def listed(points: list[Point], most: int = 8) -> str:
    names = [name(p) for p in points[:most]]
    return "; ".join(names) + (f" (+{len(points) - most} more)" if len(points) > most else "")


def advice(readouts: list[dict], largest: str) -> str:
    """What to change for a cell, from its seeds' verdicts and reasons."""
    why = Counter(r.get("why") for r in readouts)
    if why[FLOOR_AT_JUDGING_LOAD] == len(readouts):
        return (
            "not learned: every seed at the binding-free floor; try another optim.lr or a "
            "larger trainer.max_steps before reading it as capacity"
        )
    training_limited = why[FLOOR_AT_JUDGING_LOAD] or why[RISING_BELOW_JUDGING_LOAD]
    lower_bounds = any(
        r.get("training") == STILL_RISING and r.get("why") != RISING_BELOW_JUDGING_LOAD
        for r in readouts
    )
    unread = (FLOOR_AT_JUDGING_LOAD, RISING_BELOW_JUDGING_LOAD, BELOW_JUDGING_LOAD)
    below, read_above = why[BELOW_JUDGING_LOAD], any(r.get("why") not in unread for r in readouts)
    tips = {
        "raise trainer.max_steps for the training_limited seeds": training_limited,
        "readouts of runs still rising are lower bounds: more steps can raise them": lower_bounds,
        "its state holds less than the judging load: widen it to read its n90": below
        and not read_above,
        f"{below} seed(s) levelled off below the judging load while others read above it: the "
        "seeds disagree, so add seeds or try another optim.lr": below and read_above,
        f"holds every tested load, up to {largest}: test larger loads": why[HOLDS_EVERY_LOAD],
    }
    return "; ".join(tip for tip, given in tips.items() if given)


def cell_line(point: Point, threshold: float) -> str:
    """`Cell linear D=4, 3 seeds (0, 1, 2): n90 <2; 2.41 ± 0.2; >=3.1 ± 0.1; 2 capacity_limited
    (...), 1 training_limited (...). <advice>`; for one seed `Cell softmax, 1 seed (0): n90 >=16,
    not_limited (...). <advice>` (no count before its verdict)."""
    readouts = point.capacity
    level = level_name(threshold)
    one = len(readouts) == 1
    seeds = f"{len(readouts)} seed{'' if one else 's'} "
    seeds += f"({', '.join(str(r.get('seed')) for r in readouts)})"
    values = "; ".join(shown(r, "n90", with_error=True) for r in readouts)
    kinds = Counter((r.get("verdict"), r.get("why")) for r in readouts)
    verdict_text = ", ".join(
        ("" if one else f"{n} ") + f"{v} ({WHY.get(w, w)})" for (v, w), n in kinds.most_common()
    )
    loads = accuracy_by_load(metrics(point), load_of(metrics(point)) or "")
    tips = advice(readouts, str(max(loads, default="the largest")))
    line = f"Cell {name(point)}, {seeds}: {level} {values}{',' if one else ';'} {verdict_text}."
    return line + (f" {tips[0].upper()}{tips[1:]}." if tips else "")


def converged_now(row: dict) -> bool:
    """Converged by the rule the report reads the records with (`capacity.training`, judged
    anew), else by the record's own `train.converged`."""
    training = row.get("capacity.training")
    return training == "converged" if training is not None else bool(row["train.converged"])


def verdicts(frame: pd.DataFrame, rows: list[dict], threshold: float) -> list[str]:
    """One line per finding, most important first; the advice names the key to change; then
    one line per cell (`cell_line`)."""
    ok_rows = [r for r in rows if r.get("status") == OK]
    flags = [converged_now(r) for r in ok_rows if "train.converged" in r]
    lines = [f"{sum(flags)} of {len(flags)} finished runs converged." if flags else ""]
    points = [p for _, p in frame.iterrows()]
    ok = [p for p in points if p.status == OK and not missing(p.test_acc) and baselines(p)]
    floor = [p for p in ok if at(p, max(baselines(p).values()))]
    chance = [p for p in floor if below_floor(p) == "chance"]
    between = [p for p in floor if below_floor(p) == "between"]
    floor = [p for p in floor if below_floor(p) is None]
    findings = [
        (chance, "At chance (not even the answer tokens learned): {}. Check the learning rate "
         "(optim.lr) and the step budget (trainer.max_steps) before reading these as limits."),
        (between, "Between chance and the binding-free floor (learning which tokens answer): "
         "{}. Give them more steps (trainer.max_steps)."),
        (floor, "At the binding-free floor (no retrieval learned): {}. A recall model sits at the "
         "floor for an unpredictable number of steps before it jumps: try another optim.lr or a "
         "larger trainer.max_steps before reading it as capacity."),
    ]  # fmt: skip
    lines += [text.format(listed(found)) for found, text in findings if found]
    rising = [
        p
        for p in ok
        if p.converged is False and p.name not in {q.name for q in chance + between + floor}
    ]
    if rising:
        bounds = any(r.get("training") == STILL_RISING for p in rising for r in p.capacity)
        then = f"; their {level_name(threshold)} are lower bounds (>=)" if bounds else ""
        lines.append(
            f"Still improving when the budget ran out: {listed(rising)}. Raise "
            f"trainer.max_steps to read their final accuracy{then}."
        )
    for status, then in (
        ("diverged", ". Lower optim.lr."),
        ("failed", ": see the failed jobs below."),
    ):
        if found := [p for p in points if p.status == status]:
            lines.append(f"{status.capitalize()}: {listed(found)}{then}")
    cells = sorted(
        (p for p in points if p.capacity),
        key=lambda p: (model_order(p.model), [sort_key(v) for v in p.params.values()]),
    )
    lines.extend(cell_line(p, threshold) for p in cells)
    return [line for line in lines if line]
