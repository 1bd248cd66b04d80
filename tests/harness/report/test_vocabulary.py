"""One vocabulary: the floor is the binding-free baseline's accuracy on the examples measured
(no second meaning); softmax is the black line, grey lines the baselines; a verdict reads as
the README defines it; a list of seeds' readouts names each seed."""

from pathlib import Path

from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.report.test_verdict_cells import lines_of

ROOT = Path(__file__).resolve().parents[3]
RETIRED = (
    "wide grey band",
    "wide light band",
    "a wide band under",
    "Subtitles state the budget",
    "The subtitle gives the budget",
    "at the binding-free floor at the judging load",
    "the judging floor",
    "every seed at the binding-free floor",
    "learned, then fell\n  below 90% as the load grew",
)
"""Phrases the code, templates and README no longer use: each said one thing where the
report meant another."""


def test_no_retired_phrase_is_left_in_the_code_templates_or_readme() -> None:
    files = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("harness/report/page/*"), ROOT / "README.md"]
    files += [ROOT / "docs" / "background.md"]
    found = [
        (path.relative_to(ROOT), phrase)
        for path in files
        if path.is_file()
        for phrase in RETIRED
        if phrase in path.read_text()
    ]
    assert found == []


def test_a_cell_below_the_threshold_at_the_judging_load_reads_as_the_readme_defines_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "or was below 90% already there, `n90 <2`" in readme  # capacity_limited covers it
    learned = {n: 0.7 if n <= 2 else 1 / n + 0.02 for n in accuracies(1.0)}  # bound, below 0.9
    (cell,) = [line for line in lines_of([curve_record("linear", 8, 0, learned)]) if "Cell" in line]
    assert (
        "n90 <2; verdict: capacity_limited (converged above the floor, below the threshold" in cell
    )


def test_seeds_readouts_each_name_their_seed_and_the_verdict_count_its_seeds() -> None:
    floor = {n: 1 / n + 0.005 for n in accuracies(1.0)}
    records = [curve_record("linear", 16, s, floor, "at_floor") for s in (0, 1)]
    records.append(curve_record("linear", 16, 2, accuracies(4.0)))
    (cell,) = [line for line in lines_of(records) if line.startswith("Cell ")]
    assert ": n90 <2 (seed 0), <2 (seed 1), 4 ± " in cell and " (seed 2); verdicts: " in cell
    assert (
        "2 seeds training_limited (not clearly above the binding-free floor at the judging" in cell
    )
    assert "1 seed capacity_limited (falls below" in cell
