"""The report's figures. Each answers one question with one line per model (fixed colours;
softmax, the reference, a wide band under the others so that it shows where they lie on it),
one panel per value of every other parameter the reader swept, reference lines for chance and
the binding-free baselines (coinciding ones drawn once), each seed a point where there are
three or fewer, and failed or diverged points marked with x and the reason."""

import math
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from matplotlib import patheffects
from matplotlib.figure import Figure

from harness.config.figure_specs import STATE, FigureSpec
from harness.records.schema import OK
from harness.report.baselines import coinciding
from harness.report.figure_legend import (
    LINE,
    REFERENCE_LINE,
    SEED_POINTS,
    baseline_curves,
    draw_baselines,
    finish,
)
from harness.report.points import STATE_FLOATS, Point, as_key, missing, sort_key
from harness.report.style import (
    AXIS_TITLES,
    REFERENCE,
    accuracy_axis,
    colour,
    describe,
    grid,
    log2_axis,
    marker,
    model_order,
    short,
)

HALO = [patheffects.Stroke(linewidth=3.2, foreground="white"), patheffects.Normal()]
MARKED = 12
"""Most markers on one line (beyond the ends of each converged or not-converged stretch): a
marker at each of 45 string lengths hides the line's shape under them."""


def marker_indices(hollow: list[bool], xs: list[float], log_x: bool = True) -> list[int]:
    """The indices of a line's points (x ascending) that get a marker: all of them up to
    `MARKED`; else the nearest point to each of `MARKED` places spread evenly along the x axis
    (in log x on a log axis) from the first point to the last, and the first and last point of
    every stretch of equal `hollow` (not converged), so that each stretch shows what it is."""
    n = len(hollow)
    if n <= MARKED:
        return list(range(n))
    if not all(isinstance(x, int | float) for x in xs):
        at = [float(i) for i in range(n)]  # not numbers: spread over the points' order
    else:
        at = [math.log(x) for x in xs] if log_x and min(xs) > 0 else [float(x) for x in xs]
    places = [at[0] + (at[-1] - at[0]) * i / (MARKED - 1) for i in range(MARKED)]
    even = {min(range(n), key=lambda i, t=t: abs(at[i] - t)) for t in places}
    edges = {j for i in range(1, n) if hollow[i] != hollow[i - 1] for j in (i - 1, i)}
    return sorted(even | edges)


def points_by_slice(points: list[Point], key: str, accuracies) -> list[Point]:
    """Each ok point once per value of one slice of its test set (`accuracies(point)`:
    {value: accuracy}, the seeds' mean), that accuracy as its test accuracy and the value as
    parameter `key`. The seeds' own accuracies at each value are not in a point, so only
    their mean is drawn (no seed points or bars)."""
    return [
        replace(
            p,
            test_acc=acc,
            test_acc_std=None,
            seed_accs=[],
            seeds=min(p.seeds, 1),
            params={**p.params, key: value},
        )
        for p in points
        if p.status == OK
        for value, acc in sorted(accuracies(p).items())
    ]


def panels(points: list[Point], keys: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(task, {key: value}) of every panel, sorted numerically; a point without a value for a
    key (a model that lacks that parameter) belongs to every panel. A refused value
    (`model.feature_dim=0`) opens no panel of its own."""
    seen: dict[str, tuple[str, dict]] = {}
    for p in [p for p in points if not p.refused] or points:
        values = {k: p.get(k) for k in keys if not missing(p.get(k))}
        if len(values) == len(keys):
            seen[as_key([p.task, values])] = (p.task, values)
    if not seen:
        seen = {as_key([p.task]): (p.task, {}) for p in points}
    return sorted(seen.values(), key=lambda tv: (tv[0], [sort_key(v) for v in tv[1].values()]))


def in_panel(point: Point, task: str, values: dict[str, Any]) -> bool:
    return point.task == task and all(
        missing(point.get(k)) or as_key(point.get(k)) == as_key(v) for k, v in values.items()
    )


def accuracy_figure(
    points: list[Point], point_keys: list[str], spec: FigureSpec, title: str, subtitle: str = ""
) -> Figure | None:
    """Test accuracy against the spec's x (a parameter, or the state: `STATE_FLOATS`), log2
    axis, a panel per value of its `panels`, its `ticks` under the x values (or beside each
    point where they differ between models); the other varied parameters set points apart on
    their line (`series`). None where x was not varied."""
    x = STATE_FLOATS if spec.x == STATE else spec.x
    drawable = [p for p in points if not missing(p.get(x))]
    if len({as_key(p.get(x)) for p in drawable}) < 2:
        return None  # x was not varied: nothing to draw against
    panel_keys = [k for k in spec.panels if k in point_keys]
    together = [k for k in spec.ticks if k in point_keys]
    apart = [k for k in point_keys if k not in (x, *panel_keys, *together)]
    layout = panels(drawable, panel_keys)
    fig, axes = grid(len(layout))
    for ax, (task, values) in zip(axes, layout, strict=True):
        mine = [p for p in drawable if in_panel(p, task, values)]
        ticks = tick_notes(mine, x, together)
        annotate = [] if ticks else together
        draw_models(ax, mine, lambda p: p.get(x), lambda p: p.test_acc, annotate, apart, dodge=True)
        draw_baselines(ax, mine, x, coinciding(baseline_curves(points, x)))
        log2_axis(ax, [p.get(x) for p in drawable], "floats" if x == STATE_FLOATS else "length")
        if ticks:
            ax.xaxis.set_major_formatter(
                lambda v, _, notes=ticks: f"{v:g}\n{notes.get(f'{v:g}', '')}"
            )
        ax.set_xlabel(AXIS_TITLES.get(x, x) if len(layout) == 1 else "")
        accuracy_axis(ax)
        ax.set_title(" · ".join(filter(None, [task, describe(values)])), fontsize=10)
    if len(layout) > 1:  # once under the panels: a long title repeated under each would overlap
        fig.supxlabel(AXIS_TITLES.get(x, x), fontsize=10)
    placed = [p for p in drawable if any(in_panel(p, *panel) for panel in layout)]
    unplaced = [p for p in points if p not in placed]
    finish(fig, axes, points, title, unplaced, subtitle=subtitle, x=x)
    return fig


def tick_notes(points: list[Point], x: str, together: list[str]) -> dict[str, str]:
    """The parameters swept together with `x` as one note per x value ("seq_len=64"), when
    every point at that x shares them (retrieval_gap's length and batch at each number of
    pairs): written once under the tick rather than beside every model's point. Empty when
    they differ between models at one x (the width behind each state size)."""
    if x == STATE_FLOATS or not together:
        return {}  # state ticks are powers of two, not the points' values (`log2_axis`)
    notes: dict[str, set[str]] = defaultdict(set)
    for p in points:
        notes[f"{float(p.get(x)):g}"].add("\n".join(f"{short(k)}={p.get(k)}" for k in together[:2]))
    if len(notes) > 10 or any(len(texts) > 1 for texts in notes.values()):
        return {}  # ticks at powers of two again, or the notes differ between models
    return {key: texts.pop() for key, texts in notes.items()}


def series(points: list[Point], apart: list[str]) -> list[tuple[str, str, list[Point]]]:
    """(model, note, points) of each line: a model's points, split by the `apart` keys; the
    most common value is the model's line (no note), others are notes (`max_steps=8000`)."""
    by_model: dict[str, dict[str, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        note = ", ".join(f"{short(k)}={p.get(k)}" for k in apart if not missing(p.get(k)))
        by_model[p.model][note].append(p)
    out = []
    for model in sorted(by_model, key=model_order):
        groups = by_model[model]
        common = Counter({note: len(mine) for note, mine in groups.items()}).most_common(1)[0][0]
        for note, mine in sorted(groups.items(), key=lambda item: item[0] != common):
            out.append((model, "" if note == common else note, mine))
    return out


class Labels:
    """Point labels of one panel: a text already written at (nearly) the same place is not
    written again; a different text there is moved down a line."""

    def __init__(self, ax) -> None:
        self.ax, self.placed = ax, []

    def add(self, text: str, x: float, y: float, **style) -> None:
        near = [t for t, px, py in self.placed if px == x and abs(py - y) < 0.06]
        if text in near:
            return
        self.placed.append((text, x, y))
        offset = (4, 7 - 8 * len(near))
        self.ax.annotate(
            text, (x, y), textcoords="offset points", xytext=offset, fontsize=6, zorder=6, **style
        )


class Dodge:
    """Points of different models at one place: each later one moved right by a small factor
    (a log axis: the same distance anywhere), so that none hides another. The reference is
    not moved: the others lying on its band are what it is there to show."""

    STEP = 2**0.06

    def __init__(self) -> None:
        self.placed: list[tuple[float, float]] = []

    def x(self, x: float, y: float, reference: bool) -> float:
        if reference:
            return x
        near = sum(1 for px, py in self.placed if px == x and abs(py - y) < 0.015)
        self.placed.append((x, y))
        return x * self.STEP**near


def draw_line(ax, model: str, note: str, ok: list[Point], at: dict, get_y, log_x: bool) -> None:
    """One model's line through its ok points (error bars of one std beyond `SEED_POINTS`
    seeds), markers at some of them (`marker_indices`), its seeds, and a hollow marker over each
    shown point that had not converged."""
    look = REFERENCE_LINE if model == REFERENCE else LINE
    style = dict(color=colour(model), marker=marker(model), linestyle="--" if note else "-")
    name = f"{model} {note}" if note else model
    xs, ys = [at[id(p)] for p in ok], [get_y(p) for p in ok]
    errors = [(p.test_acc_std or 0.0) if p.seeds > SEED_POINTS else 0.0 for p in ok]
    shown = marker_indices([p.converged is False for p in ok], xs, log_x)
    drawn = ax.errorbar(
        xs, ys, yerr=errors if any(errors) else None, capsize=3, markevery=shown, **style, **look
    )
    drawn.lines[0].set_gid(f"model:{name}")
    if model != REFERENCE:
        drawn.lines[0].set_path_effects(HALO)
    on_top = drawn.lines[0].get_zorder()
    draw_seeds(ax, ok, lambda p: at[id(p)], model, on_top)
    hollow = [ok[i] for i in shown if ok[i].converged is False]
    ax.plot(
        [at[id(p)] for p in hollow],
        [get_y(p) for p in hollow],
        linestyle="none",
        marker=marker(model),
        markersize=look["markersize"],
        markerfacecolor="white",
        markeredgecolor=colour(model),
        zorder=on_top + 0.1,  # above the filled marker it hides
        gid=f"not converged:{name}",
    )


def draw_notes(ax, labels: "Labels", mine, note: str, annotate, get_x, get_y, model: str) -> None:
    """Each ok point's note (its `annotate` values), and an x at the bottom for each failed
    or diverged point, with the reason."""
    name = f"{model} {note}" if note else model
    for p in mine:
        if p.status == OK and get_y(p) is not None:
            values = [f"{short(k)}={p.get(k)}" for k in annotate[:2] if not missing(p.get(k))]
            text = ", ".join(filter(None, [note, *values]))
            if text:
                labels.add(text, get_x(p), get_y(p), color="dimgrey")
        elif p.status != OK:
            style = dict(marker="x", color=colour(model), markersize=9, mew=2)
            ax.plot(get_x(p), -0.03, gid=f"not ok:{name}", **style)
            labels.add(p.note, get_x(p), -0.03, color=colour(model))


def draw_models(
    ax,
    points: list[Point],
    get_x,
    get_y,
    annotate: list[str] = (),
    apart: list[str] = (),
    dodge: bool = False,
    log_x: bool = True,
) -> None:
    """One line per model through its ok points (`draw_line`: hollow where not converged;
    three seeds or fewer: each seed a small point; more: error bars of one std), and an x at
    the bottom for each failed or diverged point, with the reason (`draw_notes`). Softmax is a
    wide band under the others; `dodge` (log x axes) moves coinciding points of other models
    apart (`Dodge`). A line of many points carries markers at some of them only (`marker_indices`;
    `log_x`: spread along a log axis), its line drawn through all."""
    labels, dodged = Labels(ax), Dodge()
    for model, note, mine in series(points, list(apart)):
        mine.sort(key=lambda p: sort_key(get_x(p)))
        ok = [p for p in mine if p.status == OK and get_y(p) is not None]
        at = {id(p): get_x(p) for p in ok}
        if dodge:
            at = {id(p): dodged.x(get_x(p), get_y(p), model == REFERENCE) for p in ok}
        if ok:
            draw_line(ax, model, note, ok, at, get_y, log_x)
        draw_notes(ax, labels, mine, note, list(annotate), get_x, get_y, model)


def draw_seeds(ax, points: list[Point], get_x, model: str, zorder: float) -> None:
    """Each seed's accuracy as a small point, for points of two or three seeds."""
    shown = [p for p in points if 1 < p.seeds <= SEED_POINTS]
    xs = [get_x(p) for p in shown for _ in p.seed_accs]
    ys = [acc for p in shown for acc in p.seed_accs]
    if xs:
        ax.plot(
            xs,
            ys,
            linestyle="none",
            marker=marker(model),
            markersize=3.5,
            color=colour(model),
            alpha=0.7,
            zorder=zorder + 0.2,
            gid=f"seeds:{model}",
        )


def length_figure(points: list[Point], point_keys: list[str], subtitle: str = "") -> Figure | None:
    """Accuracy against test length from one run (`task.eval_seq_lens`), drawn as every
    figure's lines (`draw_models`: the reference's band, hollow where the run had not
    converged), the training length marked; one panel per value of the other varied
    parameters."""
    tested = [p for p in points if len(p.by_length) > 1 or (p.status != OK and p.by_length)]
    if not tested:
        return None
    layout = panels(tested, point_keys)
    fig, axes = grid(len(layout))
    for ax, (task, values) in zip(axes, layout, strict=True):
        mine = [p for p in tested if in_panel(p, task, values)]
        lines = points_by_slice(mine, "test_length", lambda p: p.by_length)
        draw_models(ax, lines, lambda q: q.get("test_length"), lambda q: q.test_acc)
        trained = {p.seq_len for p in mine} - {None}
        for length in trained:
            ax.axvline(length, color="grey", linewidth=1.2, linestyle=":", gid="train length")
        draw_baselines(ax, mine, None, coinciding(baseline_curves(tested, None)))
        log2_axis(ax, [n for p in tested for n in p.by_length], "length")
        ax.set_xlabel(AXIS_TITLES["test_length"])
        accuracy_axis(ax)
        ax.set_title(" · ".join(filter(None, [task, describe(values)])), fontsize=10)
    drawn = points_by_slice(tested, "test_length", lambda p: p.by_length)
    finish(
        fig, axes, drawn, "Accuracy against test length", [], train_length=True, subtitle=subtitle
    )
    return fig
