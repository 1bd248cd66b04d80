"""Validation curves offline: each run's validation accuracy against its step, read from the
record's `train.val_curve`, a figure a cell (task, mixer, setting), its seeds (and learning
rates) overlaid. A run whose training ended still rising (`harness.readouts.convergence`,
judged anew by `harness.report.reread`) is dashed and ends in a hollow marker: its final
accuracy, and any readout, is a lower bound. The grey line is the binding-free floor on the
validation set (`train.floor`)."""

import re
from collections.abc import Iterator

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from harness.readouts.convergence import AT_FLOOR, STILL_RISING
from harness.report import look
from harness.report.budget import budget
from harness.report.frame import as_key, sort_key
from harness.report.load_curve import seeds_of
from harness.report.verdict import name

SEED_COLOURS = plt.cm.Dark2.colors
STATES = {STILL_RISING: "still rising", AT_FLOOR: "not above the floor"}
"""How the legend names a run that did not converge."""


def curve_figure(point: pd.Series, runs: list[dict]) -> Figure:
    """The cell's validation curves: a line a run (its seed, and its rate where the cell has
    several), dashed with a hollow end where it was still rising; the floor in grey."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6), layout="constrained")
    rates = len({as_key(r.get("optim.lr")) for r in runs}) > 1
    for index, run in enumerate(runs):
        steps, accs = zip(*run["train.val_curve"], strict=True)
        accs = [float("nan") if a is None else a for a in accs]
        state = run.get("train.state")
        label = f"seed {run.get('seed')}" + (f", lr {run.get('optim.lr'):g}" * rates)
        label += f" ({STATES[state]})" if state in STATES else ""
        style = dict(color=SEED_COLOURS[index % len(SEED_COLOURS)], linewidth=1.4)
        rising = state == STILL_RISING
        ax.plot(steps, accs, linestyle="--" if rising else "-", label=label,
                gid=f"{'rising' if rising else 'run'}:seed {run.get('seed')}", **style)  # fmt: skip
        if rising:
            ax.plot(steps[-1:], accs[-1:], marker="o", markerfacecolor="white", **style)
    floors = {r["train.floor"] for r in runs if r.get("train.floor") is not None}
    for floor in sorted(floors):
        ax.axhline(floor, color="grey", linewidth=1, linestyle="--", gid="baseline:floor")
    if floors:
        ax.plot([], [], color="grey", linewidth=1, linestyle="--", label="binding-free floor")
    look.accuracy_axis(ax)
    ax.set_ylabel("validation accuracy (scored tokens)")
    ax.set_xlabel("training step")
    ax.legend(fontsize=7, loc="best")
    look.titled(fig, f"Validation accuracy: {name(point)}", [budget(runs)])
    return fig


def curve_figures(frame: pd.DataFrame, rows: list[dict], point_keys: list[str]) -> Iterator:
    """(file stem under `curves/`, figure) of every cell whose runs recorded a curve, drawn one
    at a time (the caller saves and closes each before the next)."""
    drawn = set()
    for _, point in frame.iterrows():
        runs = [
            r for r in seeds_of(point, rows, point_keys, every=True) if r.get("train.val_curve")
        ]
        runs.sort(key=lambda r: (sort_key(r.get("optim.lr")), sort_key(r.get("seed"))))
        stem = re.sub(r"[^\w.=-]+", "_", f"{point.task} {name(point)}")
        if runs and stem not in drawn:
            drawn.add(stem)
            yield stem, curve_figure(point, runs)
