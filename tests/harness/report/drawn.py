"""The report's figures of a sweep folder, drawn but not saved, as `report` draws them."""

from pathlib import Path

from matplotlib.figure import Figure

from harness.records.sweep import sweep_description
from harness.report.frame import AVERAGED, SELECTED
from harness.report.sweep_report import draw, figure_specs, read


def figures_of(sweep: Path) -> dict[str, Figure]:
    """The figures by file name (panels by its `sweep.json`'s swept keys when present, the
    figures its preset declares when it names one)."""
    rows, _, swept, points, _ = read(sweep)
    point_keys = [c for c in swept if c not in AVERAGED + SELECTED]
    description = sweep_description(sweep)
    chosen, experiment = description.get("swept"), description.get("experiment")
    figures = draw(points, point_keys, rows, figure_specs(points, point_keys, chosen, experiment))
    for figure in figures.values():
        figure.canvas.draw()
    return figures
