"""The report's opening lines: how many runs converged, which points sit at chance or at the
binding-free floor (docs/tasks.md, "Binding-free baselines"), what to change, and one verdict
line per cell (mixer x state) with its seeds' readouts and what to change where the cell did
not learn (docs/background.md, "Reading a load curve").

The floor is one thing everywhere: the accuracy of the strongest binding-free baseline on the
examples an accuracy is measured on. A point with a load curve is placed against chance and
the floor at its judging load (the smallest load a guess cannot pass), where its verdict is
judged; a point without one, on its whole test set."""

from collections import Counter

import pandas as pd

from harness.readouts.capacity import (
    BELOW_JUDGING_LOAD,
    FLOOR_AT_JUDGING_LOAD,
    HOLDS_EVERY_LOAD,
    RISING_BELOW_JUDGING_LOAD,
    WHY,
    accuracy_by_load,
    baselines_by_load,
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
PLACES = ("chance", "between", "floor")


def name(point: Point) -> str:
    return " ".join(filter(None, [point.model, describe(point.params)]))


def judged_accuracy(point: Point) -> tuple[float | None, dict[str, float]]:
    """(accuracy, baselines) where the point is judged: at its judging load where it has a load
    curve (its seeds' means there), else on its whole test set."""
    at_load = next((r.get("judged_at") for r in point.capacity if r.get("judged_at")), None)
    load = load_of(metrics(point))
    if at_load is None or load is None:
        return point.test_acc, baselines(point)
    found = {
        k: v[at_load] for k, v in baselines_by_load(metrics(point), load).items() if at_load in v
    }
    return accuracy_by_load(metrics(point), load).get(at_load), found


def place(point: Point) -> str | None:
    """`chance`, `between` (chance and the floor) or `floor` for a point whose judged accuracy
    (`judged_accuracy`) is within a tenth of the way from the floor to 1
    (`convergence.left_floor`), by the console's margin (`convergence.under_floor`); None for
    one above the floor."""
    acc, found = judged_accuracy(point)
    if acc is None or missing(acc) or not found:
        return None
    floor = max(found.values())
    if left_floor([(0, acc)], floor, MIN_DELTA):
        return None
    return under_floor(acc, found.get("chance"), floor, MIN_DELTA) or "floor"


def listed(points: list[Point], most: int = 8) -> str:
    names = [name(p) for p in points[:most]]
    return "; ".join(names) + (f" (+{len(points) - most} more)" if len(points) > most else "")


def advice(readouts: list[dict], largest: str) -> str:
    """What to change for a cell, from its seeds' verdicts and reasons."""
    why = Counter(r.get("why") for r in readouts)
    if why[FLOOR_AT_JUDGING_LOAD] == len(readouts):
        return (
            "not learned: no seed clearly above the binding-free floor at the judging load; try "
            "another optim.lr or a larger trainer.max_steps before reading it as capacity"
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


def by_seed(readouts: list[dict], with_error: bool = False, verdicts: bool = False) -> str:
    """Each seed's n90 named with its seed (and its verdict: `verdicts`), `<2 (seed 0), 2.41 ±
    0.2 (seed 1)`, so that a list never reads as several cells' readouts; one seed's alone."""
    if len(readouts) == 1:
        return shown(readouts[0], "n90", with_error=with_error)
    tag = lambda r: f"seed {r.get('seed')}" + f", {r.get('verdict')}" * verdicts  # noqa: E731
    return ", ".join(f"{shown(r, 'n90', with_error=with_error)} ({tag(r)})" for r in readouts)


def cell_line(point: Point, threshold: float) -> str:
    """`Cell linear D=4, 3 seeds (0, 1, 2): n90 <2 (seed 0), 2.41 ± 0.2 (seed 1), >=3.1 ± 0.1
    (seed 2); verdicts: 2 seeds capacity_limited (...), 1 seed training_limited (...).
    <advice>`; for one seed `Cell softmax, 1 seed (0): n90 >=16; verdict: not_limited (...).
    <advice>`."""
    readouts = point.capacity
    one = len(readouts) == 1
    seeds = f"{len(readouts)} seed{'' if one else 's'} "
    seeds += f"({', '.join(str(r.get('seed')) for r in readouts)})"
    kinds = Counter((r.get("verdict"), r.get("why")) for r in readouts)
    verdict_text = ", ".join(
        ("" if one else f"{n} seed{'' if n == 1 else 's'} ") + f"{v} ({WHY.get(w, w)})"
        for (v, w), n in kinds.most_common()
    )
    loads = accuracy_by_load(metrics(point), load_of(metrics(point)) or "")
    tips = advice(readouts, str(max(loads, default="the largest")))
    values = f"{level_name(threshold)} {by_seed(readouts, with_error=True)}"
    line = f"Cell {name(point)}, {seeds}: {values}; verdict{'' if one else 's'}: {verdict_text}."
    return line + (f" {tips[0].upper()}{tips[1:]}." if tips else "")


def verdicts(frame: pd.DataFrame, rows: list[dict], threshold: float) -> list[str]:
    """One line per finding, most important first; the advice names the key to change; then
    one line per cell (`cell_line`)."""
    ok_rows = [r for r in rows if r.get("status") == OK]
    flags = [bool(r["train.converged"]) for r in ok_rows if "train.converged" in r]  # reread
    lines = [f"{sum(flags)} of {len(flags)} finished runs converged." if flags else ""]
    points = [p for _, p in frame.iterrows()]
    ok = [p for p in points if p.status == OK and not missing(p.test_acc) and baselines(p)]
    chance, between, floor = ([p for p in ok if place(p) == w] for w in PLACES)
    where = " (load curves: at the judging load)" * any(p.capacity for p in ok)
    findings = [
        (chance, f"At chance{where} (not even the answer tokens learned): {{}}. Check the learning "
         "rate (optim.lr) and the step budget (trainer.max_steps) before reading these as limits."),
        (between, f"Between chance and the binding-free floor{where} (learning which tokens "
         "answer): {}. Give them more steps (trainer.max_steps)."),
        (floor, f"At the binding-free floor{where} (no retrieval learned): {{}}. A recall model "
         "sits at the floor for an unpredictable number of steps before it jumps: try another "
         "optim.lr or a larger trainer.max_steps before reading it as capacity."),
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
