"""Curves offline: a figure a cell of its runs' validation curves (`train.val_curve`), a line
a seed, a still-rising run dashed and named, the floor grey."""

from pathlib import Path

from harness.report.curves import curve_figures
from harness.report.frame import AVERAGED, SELECTED
from harness.report.sweep_report import read
from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.synthetic import write_sweep


def test_a_figure_a_cell_with_a_line_a_seed_and_the_rising_run_marked(tmp_path: Path) -> None:
    records = [curve_record("linear", 32, s, accuracies(4.0)) for s in (0, 1)]
    records.append(curve_record("linear", 32, 2, accuracies(3.0), "still_rising"))
    records += [curve_record("softmax", 64, s, accuracies(100.0)) for s in (0, 1)]
    rows, _, swept, frame, _ = read(write_sweep(tmp_path / "sweep", records))
    figures = dict(curve_figures(frame, rows, [c for c in swept if c not in AVERAGED + SELECTED]))
    assert sorted(figures) == ["assoc_recall_linear", "assoc_recall_softmax"]
    linear = figures["assoc_recall_linear"].axes[0]
    gids = sorted(str(line.get_gid()) for line in linear.lines if line.get_gid())
    assert gids == ["baseline:floor", "rising:seed 2", "run:seed 0", "run:seed 1"]
    rising = next(line for line in linear.lines if line.get_gid() == "rising:seed 2")
    assert rising.get_linestyle() == "--" and list(rising.get_ydata()) == [0.2, 0.8]
    labels = [t.get_text() for t in linear.get_legend().get_texts()]
    assert labels == ["seed 0", "seed 1", "seed 2 (still rising)", "binding-free floor"]
    softmax = figures["assoc_recall_softmax"].axes[0]
    assert sum(str(line.get_gid()).startswith("run:") for line in softmax.lines) == 2
