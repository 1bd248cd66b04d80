"""What every accuracy figure shares around its lines: the models' look (softmax, the
reference, a wide light band under the others), the baselines (coinciding ones drawn once),
one legend that says what each mark means, the title, and the points with no place on the
x axis."""

from collections import defaultdict
from typing import Any

from matplotlib.lines import Line2D

from harness.records.schema import OK
from harness.report.baselines import coinciding
from harness.report.points import STATE_FLOATS, Point, as_key, sort_key
from harness.report.style import (
    BASELINE_STYLES,
    HOLLOW,
    REFERENCE,
    colour,
    describe,
    legend_entry,
    marker,
    model_order,
)

SEED_POINTS = 3
"""Up to this many seeds, each seed is drawn as a point; beyond, error bars (one std)."""
LINE = dict(linewidth=1.6, markersize=6, zorder=3)
REFERENCE_LINE = dict(linewidth=6, markersize=12, zorder=2, alpha=0.4)
"""Softmax under the others, wider and lighter: a coloured line lying on it stays visible,
and so does the band around it."""


def baseline_curves(points: list[Point], x: str | None) -> dict[str, dict]:
    """Each baseline's value at every (task, x) of the figure: what `coinciding` compares."""
    curves: dict[str, dict] = defaultdict(dict)
    for p in points:
        for name, value in p.baselines.items():
            curves[name][as_key([p.task, p.get(x) if x else 0, p.params])] = value
    return curves


def draw_baselines(
    ax, points: list[Point], x: str | None, drawn: dict[str, str] | None = None
) -> None:
    """Chance and the other baselines: flat where the panel's points agree, else along x;
    only those in `drawn` (`coinciding`: the others lie on one of them)."""
    names = sorted({name for p in points for name in p.baselines})
    for name in [n for n in names if drawn is None or n in drawn]:
        pairs = sorted(
            {(p.get(x) if x else 0, p.baselines[name]) for p in points if name in p.baselines},
            key=lambda xy: sort_key(xy[0]),
        )
        style = dict(color="grey", linewidth=1, linestyle=BASELINE_STYLES.get(name, "-"))
        values = [v for _, v in pairs]
        if max(values) - min(values) < 1e-9 or x in (None, STATE_FLOATS):
            ax.axhline(sum(values) / len(values), gid=f"baseline:{name}", **style)
        else:
            means: dict[Any, list[float]] = defaultdict(list)
            for xv, v in pairs:
                means[xv].append(v)
            xs = sorted(means, key=sort_key)
            ax.plot(
                xs, [sum(means[v]) / len(means[v]) for v in xs], gid=f"baseline:{name}", **style
            )


def model_entry(model: str) -> Line2D:
    """A model's legend entry, in its look (softmax's band wider and lighter)."""
    look = REFERENCE_LINE if model == REFERENCE else LINE
    style = {k: v for k, v in look.items() if k != "zorder"}
    return legend_entry(model, colour(model), marker(model), "-", **style)


def legend_handles(points: list[Point], x: str | None = None) -> list[Line2D]:
    """Models (in the figure), baselines (coinciding ones in one entry), what the seeds'
    points or the bars are, and what x and hollow markers mean."""
    handles = [model_entry(m) for m in sorted({p.model for p in points}, key=model_order)]
    for name, label in coinciding(baseline_curves(points, x)).items():
        style = BASELINE_STYLES.get(name, "-")
        handles.append(legend_entry(f"baseline: {label}", linestyle=style))
    ok = [p for p in points if p.status == OK]
    if any(1 < p.seeds <= SEED_POINTS for p in ok):
        label = "small points: seeds; line: their mean"
        handles.append(legend_entry(label, marker="o", markersize=3.5, alpha=0.7))
    if any(p.seeds > SEED_POINTS for p in ok):
        counts = "/".join(str(n) for n in sorted({p.seeds for p in ok if p.seeds > SEED_POINTS}))
        label = f"bars: ±1 std over {counts} seeds"
        handles.append(legend_entry(label, marker="|", markersize=10))
    if any(p.status != OK for p in points):
        handles.append(legend_entry("failed / diverged", marker="x", mew=2))
    if any(p.converged is False for p in points):
        handles.append(legend_entry(HOLLOW, marker="o", hollow=True))
    return handles


def finish(
    fig,
    axes,
    points: list[Point],
    title: str,
    unplaced: list[Point],
    train_length: bool = False,
    subtitle: str = "",
    x: str | None = None,
) -> None:
    """Title and budget, one legend outside the panels (below a single panel, beside several),
    and the points that have no place on the x axis."""
    fig.suptitle("\n".join(filter(None, [title, subtitle])), fontsize=11)
    handles = legend_handles(points, x)
    if train_length:
        handles.append(legend_entry("training length", linestyle=":"))
    panels = [ax for ax in fig.axes if ax.get_visible()]
    if len(panels) == 1:  # beside one panel, the legend would take most of its width
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    else:
        fig.legend(handles=handles, loc="outside right center", fontsize=8)
    if unplaced:
        lines = [f"{p.model} {describe(p.params)}: {p.note}" for p in unplaced[:6]]
        more = f" (+{len(unplaced) - 6} more)" if len(unplaced) > 6 else ""
        fig.text(0, -0.02, "not drawn: " + "; ".join(lines) + more, fontsize=7, va="top")
