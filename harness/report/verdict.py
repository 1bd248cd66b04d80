"""The report's opening lines: how many runs converged, which points sit at chance or at the
binding-free floor (docs/tasks.md, "Binding-free baselines"), what to change, and each
load curve's verdict (docs/background.md, "Reading a load curve")."""

from harness.readouts.capacity import shown
from harness.readouts.convergence import left_floor, under_floor
from harness.records.schema import OK
from harness.report.points import Point
from harness.report.style import describe


def name(point: Point) -> str:
    return " ".join(filter(None, [point.model, describe(point.params)]))


MIN_DELTA = 0.01
"""`plateau.min_delta`'s default: the least gain that counts (conf/config.yaml)."""


def at(point: Point, level: float) -> bool:
    """Accuracy within a tenth of the way from `level` to 1 (`convergence.left_floor`)."""
    return not left_floor([(0, point.test_acc)], level, MIN_DELTA)


def below_floor(point: Point) -> str | None:
    """`chance` or `between` for a point at the floor that is under it by more than the
    console's margin (`harness.training.console.why_not_converged`: max(min_delta, FLOOR_MARGIN x
    (floor - chance))): at chance it has not learned which tokens answer; between, it is
    learning that; None when it answers as a binding-free strategy does."""
    floor = max(point.baselines.values())
    return under_floor(point.test_acc, point.baselines.get("chance"), floor, MIN_DELTA)


def listed(points: list[Point], most: int = 8) -> str:
    names = [name(p) for p in points[:most]]
    return "; ".join(names) + (f" (+{len(points) - most} more)" if len(points) > most else "")


def verdicts(points: list[Point], rows: list[dict]) -> list[str]:
    """One line per finding, most important first; the advice names the key to change."""
    ok_rows = [r for r in rows if r.get("status") == OK]
    flags = [r["train.converged"] for r in ok_rows if "train.converged" in r]
    lines = [f"{sum(flags)} of {len(flags)} finished runs converged." if flags else ""]
    ok = [p for p in points if p.status == OK and p.test_acc is not None and p.baselines]
    floor = [p for p in ok if at(p, max(p.baselines.values()))]
    chance = [p for p in floor if below_floor(p) == "chance"]
    between = [p for p in floor if below_floor(p) == "between"]
    floor = [p for p in floor if below_floor(p) is None]
    if chance:
        lines.append(
            f"At chance (not even the answer tokens learned): {listed(chance)}. Check the "
            "learning rate (optim.lr) and the step budget (trainer.max_steps) before reading "
            "these as limits."
        )
    if between:
        lines.append(
            "Between chance and the binding-free floor (learning which tokens answer): "
            f"{listed(between)}. Give them more steps (trainer.max_steps)."
        )
    if floor:
        lines.append(
            f"At the binding-free floor (no retrieval learned): {listed(floor)}. A recall "
            "model sits at the floor for an unpredictable number of steps before it jumps: "
            "try another optim.lr or a larger trainer.max_steps before reading it as capacity."
        )
    rising = [p for p in ok if p.converged is False and p not in chance + between + floor]
    if rising:
        lines.append(
            f"Still improving when the budget ran out: {listed(rising)}. Raise "
            "trainer.max_steps to read their final accuracy."
        )
    diverged = [p for p in points if p.status == "diverged"]
    if diverged:
        lines.append(f"Diverged: {listed(diverged)}. Lower optim.lr.")
    failed = [p for p in points if p.status == "failed"]
    if failed:
        lines.append(f"Failed: {listed(failed)}: see the failed jobs below.")
    for p in points:
        for readout in p.capacity:
            lines.append(
                f"Load curve {name(p)}: {readout['verdict']} (n90 {shown(readout, 'n90')})."
            )
    return [line for line in lines if line]
