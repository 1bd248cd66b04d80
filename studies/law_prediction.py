"""What a sweep's laws predict at widths it has not run:
`python -m studies.law_prediction <records> --rank-bound 24`.

The sweep is read as the report reads it (`harness.report.capacity_law.cells_and_laws`), and
each mixer's laws in the stack's rank bound R on each estimand (docs/background.md, "Capacity
and learnability"), the primary line n90 = c (R - R0) and the power law a R^b, give at each
asked R their point prediction and the 90% prediction interval of one new restart's n90 at
that new width (`harness.readouts.censored_law.new_width_interval`): on capacity, a restart
that reaches the width's capacity, so that the width's best restart is judged against it; on
the typical estimand, any readable restart.
A prediction is committed before the runs it predicts (the capacity-law page)."""

import argparse
from pathlib import Path

from harness.report.capacity_law import cells_and_laws
from harness.report.frame import AVERAGED, SELECTED
from harness.report.plain_table import print_table
from harness.report.sweep_report import read


def predictions(records: Path, bounds: list[float], threshold: float | None = None) -> list[dict]:
    """One row per mixer, estimand and asked rank bound."""
    rows, _, swept, points, _ = read(records, threshold)
    point_keys = [c for c in swept if c not in AVERAGED + SELECTED]
    _, laws = cells_and_laws(rows, points, point_keys)
    out = []
    for (mixer, estimand), law in laws.items():
        for bound in bounds:
            low, high = law.rank.prediction_interval(bound, 1)
            row = {"model": mixer, "estimand": estimand, "R": f"{bound:g}"}
            row["power law a R^b"] = f"{law.rank(bound):.3g} [{low:.3g}, {high:.3g}]"
            if law.primary is not None:
                low, high = law.primary.prediction_interval(bound, 1)
                row["line c (R - R0)"] = f"{law.primary(bound):.3g} [{low:.3g}, {high:.3g}]"
            row["b in R [90%]"] = law.rank.shown()
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("records", type=Path, help="a sweep folder or a folder of records")
    parser.add_argument("--rank-bound", type=float, nargs="+", required=True)
    parser.add_argument("--threshold", type=float, default=None)
    args = parser.parse_args(argv)
    print_table(predictions(args.records, args.rank_bound, args.threshold))


if __name__ == "__main__":
    main()
