"""The report's figures. Each answers one question with one line per model (fixed colours),
one panel per value of every other varied parameter, reference lines for chance and the
binding-free baselines, and failed or diverged points marked with x and the reason."""

from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.report.points import Point, as_key, covaries, missing, sort_key
from harness.report.style import (
    AXIS_TITLES,
    BASELINE_STYLES,
    accuracy_axis,
    colour,
    describe,
    grid,
    log2_axis,
    marker,
    model_order,
    short,
)
from harness.status import OK


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


def split(points: list[Point], x: str, point_keys: list[str]) -> tuple[list[str], list[str]]:
    """(panel keys, keys swept together with x): every varied parameter other than x makes
    panels unless it is a function of x for every model (then it only annotates points)."""
    others = [k for k in point_keys if k != x]
    together = [k for k in others if covaries(points, k, x)]
    return [k for k in others if k not in together], together


def accuracy_figure(
    points: list[Point], x: str, point_keys: list[str], title: str
) -> Figure | None:
    """Test accuracy against `x` (a parameter or `state_bytes`), log2 axis."""
    drawable = [p for p in points if not missing(p.get(x))]
    if len({as_key(p.get(x)) for p in drawable}) < 2:
        return None  # x was not varied: nothing to draw against
    panel_keys, together = split(drawable, x, point_keys)
    layout = panels(drawable, panel_keys)
    fig, axes = grid(len(layout))
    for ax, (task, values) in zip(axes, layout, strict=True):
        mine = [p for p in drawable if in_panel(p, task, values)]
        ticks = tick_notes(mine, x, together)
        draw_models(ax, mine, lambda p: p.get(x), lambda p: p.test_acc, [] if ticks else together)
        draw_baselines(ax, mine, x)
        log2_axis(ax, [p.get(x) for p in drawable], "bytes" if x == "state_bytes" else "length")
        if ticks:
            ax.xaxis.set_major_formatter(
                lambda v, _, notes=ticks: f"{v:g}\n{notes.get(f'{v:g}', '')}"
            )
        ax.set_xlabel(AXIS_TITLES.get(x, x))
        accuracy_axis(ax)
        ax.set_title(" · ".join(filter(None, [task, describe(values)])), fontsize=10)
    placed = [p for p in drawable if any(in_panel(p, *panel) for panel in layout)]
    unplaced = [p for p in points if p not in placed]
    finish(fig, axes, points, title, unplaced)
    return fig


def tick_notes(points: list[Point], x: str, together: list[str]) -> dict[str, str]:
    """The parameters swept together with `x` as one note per x value ("seq_len=64"), when
    every point at that x shares them (retrieval_gap's length and batch at each number of
    pairs): written once under the tick rather than beside every model's point. Empty when
    they differ between models at one x (the width behind each state size)."""
    if x == "state_bytes" or not together:
        return {}  # state ticks are powers of two, not the points' values (`log2_axis`)
    notes: dict[str, set[str]] = defaultdict(set)
    for p in points:
        notes[f"{float(p.get(x)):g}"].add("\n".join(f"{short(k)}={p.get(k)}" for k in together[:2]))
    if len(notes) > 10 or any(len(texts) > 1 for texts in notes.values()):
        return {}  # ticks at powers of two again, or the notes differ between models
    return {key: texts.pop() for key, texts in notes.items()}


def draw_models(ax, points: list[Point], get_x, get_y, annotate: list[str] = ()) -> None:
    """One line per model through its ok points (hollow: not converged; error bars: seeds),
    and an x at the bottom for each failed or diverged point, with the reason."""
    by_model: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_model[p.model].append(p)
    for model, mine in sorted(by_model.items(), key=lambda item: model_order(item[0])):
        mine.sort(key=lambda p: sort_key(get_x(p)))
        ok = [p for p in mine if p.status == OK and get_y(p) is not None]
        style = dict(color=colour(model), marker=marker(model), markersize=6, linewidth=1.6)
        if ok:
            xs, ys = [get_x(p) for p in ok], [get_y(p) for p in ok]
            errors = [p.test_acc_std or 0.0 for p in ok]
            drawn = ax.errorbar(xs, ys, yerr=errors if any(errors) else None, capsize=3, **style)
            drawn.lines[0].set_gid(f"model:{model}")
            hollow = [p for p in ok if p.converged is False]
            ax.plot(
                [get_x(p) for p in hollow],
                [get_y(p) for p in hollow],
                linestyle="none",
                marker=marker(model),
                markersize=6,
                markerfacecolor="white",
                markeredgecolor=colour(model),
                zorder=drawn.lines[0].get_zorder() + 0.1,  # above the filled marker it hides
                gid=f"not converged:{model}",
            )
        for p in ok:
            text = ", ".join(f"{short(k)}={p.get(k)}" for k in annotate[:2])
            if text:
                ax.annotate(
                    text,
                    (get_x(p), get_y(p)),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=6,
                    color="dimgrey",
                )
        for p in mine:
            if p.status != OK:
                ax.plot(
                    get_x(p),
                    -0.03,
                    marker="x",
                    color=colour(model),
                    markersize=9,
                    mew=2,
                    gid=f"not ok:{model}",
                )
                ax.annotate(
                    p.note,
                    (get_x(p), -0.03),
                    textcoords="offset points",
                    xytext=(0, 7),
                    fontsize=6,
                    color=colour(model),
                    ha="center",
                )


def draw_baselines(ax, points: list[Point], x: str | None) -> None:
    """Chance and the other baselines: flat where the panel's points agree, else along x."""
    names = sorted({name for p in points for name in p.baselines})
    for name in names:
        pairs = sorted(
            {(p.get(x) if x else 0, p.baselines[name]) for p in points if name in p.baselines},
            key=lambda xy: sort_key(xy[0]),
        )
        style = dict(color="grey", linewidth=1, linestyle=BASELINE_STYLES.get(name, "-"))
        values = [v for _, v in pairs]
        if max(values) - min(values) < 1e-9 or x in (None, "state_bytes"):
            ax.axhline(sum(values) / len(values), gid=f"baseline:{name}", **style)
        else:
            means: dict[Any, list[float]] = defaultdict(list)
            for xv, v in pairs:
                means[xv].append(v)
            xs = sorted(means, key=sort_key)
            ax.plot(
                xs, [sum(means[v]) / len(means[v]) for v in xs], gid=f"baseline:{name}", **style
            )


def legend_handles(points: list[Point]) -> list[Line2D]:
    """Models (in the figure), baselines, and what x and hollow markers mean."""
    handles = [
        Line2D([], [], color=colour(m), marker=marker(m), label=m)
        for m in sorted({p.model for p in points}, key=model_order)
    ]
    for name in sorted({n for p in points for n in p.baselines}):
        style = BASELINE_STYLES.get(name, "-")
        handles.append(Line2D([], [], color="grey", linestyle=style, label=f"baseline: {name}"))
    if any(p.status != OK for p in points):
        handles.append(
            Line2D(
                [], [], color="grey", marker="x", linestyle="none", mew=2, label="failed / diverged"
            )
        )
    if any(p.converged is False for p in points):
        handles.append(
            Line2D(
                [],
                [],
                color="grey",
                marker="o",
                markerfacecolor="white",
                linestyle="none",
                label="not converged",
            )
        )
    return handles


def finish(
    fig, axes, points: list[Point], title: str, unplaced: list[Point], train_length: bool = False
) -> None:
    """Title, one legend outside the panels, and the points that have no place on the x axis."""
    fig.suptitle(title, fontsize=12)
    handles = legend_handles(points)
    if train_length:
        handles.append(Line2D([], [], color="grey", linestyle=":", label="training length"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    if unplaced:
        lines = [f"{p.model} {describe(p.params)}: {p.note}" for p in unplaced[:6]]
        more = f" (+{len(unplaced) - 6} more)" if len(unplaced) > 6 else ""
        fig.text(0, -0.02, "not drawn: " + "; ".join(lines) + more, fontsize=7, va="top")


def length_figure(points: list[Point], point_keys: list[str]) -> Figure | None:
    """Accuracy against test length from one run (`task.eval_seq_lens`), the training length
    marked; one panel per value of the other varied parameters."""
    tested = [p for p in points if len(p.by_length) > 1 or (p.status != OK and p.by_length)]
    if not tested:
        return None
    layout = panels(tested, point_keys)
    fig, axes = grid(len(layout))
    for ax, (task, values) in zip(axes, layout, strict=True):
        mine = [p for p in tested if in_panel(p, task, values)]
        for p in mine:
            lengths = sorted(p.by_length)
            style = dict(color=colour(p.model), marker=marker(p.model), linewidth=1.6)
            ax.plot(lengths, [p.by_length[n] for n in lengths], gid=f"model:{p.model}", **style)
        trained = {p.seq_len for p in mine} - {None}
        for length in trained:
            ax.axvline(length, color="grey", linewidth=1.2, linestyle=":", gid="train length")
        draw_baselines(ax, mine, None)
        log2_axis(ax, [n for p in tested for n in p.by_length], "length")
        ax.set_xlabel(AXIS_TITLES["test_length"])
        accuracy_axis(ax)
        ax.set_title(" · ".join(filter(None, [task, describe(values)])), fontsize=10)
    finish(fig, axes, tested, "Accuracy against test length", [], train_length=True)
    return fig
