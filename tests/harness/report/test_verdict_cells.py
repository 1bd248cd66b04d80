"""The report's verdict section: one line per cell (mixer x state) with its seeds' readouts,
their errors and verdicts, and what to change; a run still rising reads as a lower bound."""

import pandas as pd

from harness.records.sweep import flat_row
from harness.report.frame import clean_rows, points
from harness.report.reread import reread
from harness.report.verdict import verdicts
from tests.harness.report.load_curves import accuracies, curve_record

KEYS = ["backbone.d_model", "seed"]


def lines_of(records: list[dict], threshold: float = 0.9) -> list[str]:
    rows = reread(clean_rows(pd.DataFrame([flat_row(r) for r in records])), threshold)
    return verdicts(points(rows, [k for k in KEYS if k != "seed"]), rows, threshold)


def test_one_line_per_cell_with_every_seed() -> None:
    records = [curve_record("linear", 32, s, accuracies(5.0 + s)) for s in (0, 1, 2)]
    records += [curve_record("linear", 64, s, accuracies(100.0)) for s in (0, 1)]
    cells = [line for line in lines_of(records) if line.startswith("Cell ")]
    assert len(cells) == 2
    assert cells[0].startswith("Cell linear d_model=32, 3 seeds (0, 1, 2): n90 5 ± ")
    assert "(seed 0), 6 ± " in cells[0] and "(seed 1), 7 ± " in cells[0]
    assert "(seed 2); verdicts: 3 seeds capacity_limited (falls below the threshold" in cells[0]
    assert cells[1].startswith(
        "Cell linear d_model=64, 2 seeds (0, 1): n90 >=64 (seed 0), >=64 (seed 1); verdicts: "
        "2 seeds not_limited (holds every tested load)."
    )
    assert "up to 64: test larger loads" in cells[1]


def test_a_run_still_rising_reads_as_a_lower_bound_everywhere() -> None:
    records = [curve_record("linear", 32, 0, accuracies(4.99), "still_rising")]
    lines = lines_of(records)
    (cell,) = [line for line in lines if line.startswith("Cell ")]
    assert cell.startswith(
        "Cell linear d_model=32, 1 seed (0): n90 >=4.99 ± 0.4; verdict: training_limited (still "
        "rising"
    )
    assert "lower bounds" in cell
    rising = next(line for line in lines if line.startswith("Still improving"))
    assert "their n90 are lower bounds (>=)" in rising


def test_one_seed_reads_plainly() -> None:
    records = [curve_record("softmax", 64, 0, accuracies(100.0))]
    (cell,) = [line for line in lines_of(records) if line.startswith("Cell ")]
    assert cell == (
        "Cell softmax d_model=64, 1 seed (0): n90 >=64; verdict: not_limited (holds every tested "
        "load). "
        "Holds every tested load, up to 64: test larger loads."
    )


def test_a_cell_that_did_not_learn_says_what_to_change() -> None:
    floor = {n: 1 / n + 0.005 for n in accuracies(1.0)}
    records = [curve_record("linear", 16, s, floor, "at_floor") for s in (0, 1)]
    (cell,) = [line for line in lines_of(records) if line.startswith("Cell ")]
    assert (
        "2 seeds training_limited (not clearly above the binding-free floor at the judging "
        "load)" in cell
    )
    assert "Not learned" in cell and "optim.lr" in cell and "still rising" not in cell


def test_the_cell_line_names_the_threshold_it_read() -> None:
    records = [curve_record("linear", 32, 0, accuracies(5.0))]
    (cell,) = [line for line in lines_of(records, 0.8) if line.startswith("Cell ")]
    assert ": n80 " in cell and "n90" not in cell
