"""The report's accuracy figures over the points' DataFrame (`harness.report.frame.points`).
Each answers one question with one line per model (`look`: the registry's colours; softmax,
the reference, black), a panel per value of every other parameter the
reader swept, the binding-free baselines (coinciding ones drawn once), each seed a small point
where there are three or fewer (beyond: error bars of one std), a hollow marker where a run
had not converged, and an x at the bottom with the reason for a failed or diverged point."""

from typing import Any

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.figure import Figure

from harness.config.figure_specs import STATE, FigureSpec
from harness.records.schema import OK
from harness.report import look
from harness.report.frame import (
    BASELINE,
    STATE_FLOATS,
    as_key,
    baselines,
    by_length,
    missing,
    sort_key,
)

HALO = [patheffects.Stroke(linewidth=3.2, foreground="white"), patheffects.Normal()]
MARKED = 12
"""Most markers on one line: a longer line marks this many points spread evenly along it."""
DODGE = 2**0.06
"""A point of another model at the same place is drawn this factor right (a log axis)."""


def panels(frame: pd.DataFrame, keys: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(task, {key: value}) of every panel, sorted numerically; a point without a value for a
    key belongs to every panel; a refused value opens no panel of its own."""
    shown = frame[~frame["refused"].astype(bool)]
    seen = {}
    for _, p in (shown if len(shown) else frame).iterrows():
        values = {k: p[k] for k in keys if not missing(p.get(k))}
        if len(values) == len(keys):
            seen[as_key([p["task"], values])] = (p["task"], values)
    seen = seen or {as_key([t]): (t, {}) for t in frame["task"]}
    return sorted(seen.values(), key=lambda tv: (tv[0], [sort_key(v) for v in tv[1].values()]))


def in_panel(frame: pd.DataFrame, task: str, values: dict[str, Any]) -> pd.Series:
    mask = frame["task"] == task
    for k, v in values.items():
        mask &= frame[k].map(lambda w, v=v: missing(w) or as_key(w) == as_key(v))
    return mask


def sliced(frame: pd.DataFrame, key: str, accuracies) -> pd.DataFrame:
    """Each ok point once per value of one slice of its test set (`accuracies(point)`: {value:
    its seeds' mean}), that accuracy as `test_acc` and the value as column `key`; the seeds'
    own accuracies per value are not recorded, so only the mean is drawn."""
    ok = frame[frame["status"] == OK].to_dict("records")
    mean = dict(std=None, seed_accs=[])
    rows = [
        {**p, **mean, key: value, "test_acc": acc, "seeds": min(p["seeds"], 1)}
        for p in ok
        for value, acc in sorted(accuracies(p).items())
    ]
    return pd.DataFrame(rows, columns=[*frame.columns, key], dtype=object)


def tick_notes(frame: pd.DataFrame, x: str, together: list[str]) -> dict[str, str]:
    """The parameters swept together with `x` as one note under each x tick (`seq_len=64`),
    when every point at that x shares them and there are at most 10; else none."""
    if x == STATE_FLOATS or not together or frame.empty:
        return {}
    text = frame.apply(lambda p: "\n".join(f"{look.short(k)}={p[k]}" for k in together[:2]), 1)
    notes = text.groupby(frame[x].map(lambda v: f"{float(v):g}")).unique()
    shared = len(notes) <= 10 and (notes.map(len) == 1).all()
    return notes.map(lambda t: t[0]).to_dict() if shared else {}


def series(frame: pd.DataFrame, apart: list[str]) -> list[tuple[str, str, pd.DataFrame]]:
    """(model, note, points) of each line: a model's points split by the `apart` values; its
    most common value is the model's line (no note), the others dashed with a note."""
    note = lambda p: ", ".join(f"{look.short(k)}={p[k]}" for k in apart if not missing(p.get(k)))  # noqa: E731
    notes = frame.apply(note, axis=1) if len(frame) else pd.Series(dtype=object)
    out = []
    for model in sorted(set(frame["model"]), key=look.model_order):
        mine = notes[frame["model"] == model]
        common = mine.value_counts().index[0]
        for text in sorted(dict.fromkeys(mine), key=lambda n: n != common):
            out.append((model, "" if text == common else text, frame.loc[mine.index[mine == text]]))
    return out


def draw_line(ax, model: str, name: str, ok: pd.DataFrame, xs: list) -> None:
    """A model's line through its ok points: error bars beyond `SEED_POINTS` seeds, at most
    `MARKED` markers spread along it, the seeds as small points, hollow where not converged."""
    kind, ys, n = look.line_look(model), list(ok["test_acc"].astype(float)), len(xs)
    errors = ok["std"].where(ok["seeds"] > look.SEED_POINTS, 0.0).fillna(0.0).astype(float)
    shown = sorted(set(np.linspace(0, n - 1, min(n, MARKED)).round().astype(int).tolist()))
    mark = dict(color=look.colour(model), marker=look.marker(model))
    bars = list(errors) if errors.any() else None
    dash = "--" if name != model else "-"
    line = ax.errorbar(xs, ys, bars, capsize=3, markevery=shown, linestyle=dash, **mark, **kind)
    line.lines[0].set_gid(f"model:{name}")
    line.lines[0].set_path_effects(HALO)
    top, dots = line.lines[0].get_zorder(), dict(linestyle="none", **mark)
    few = ok["seeds"].between(2, look.SEED_POINTS)
    seeds = [(x, a) for x, f, accs in zip(xs, few, ok["seed_accs"], strict=True) if f for a in accs]
    if seeds:
        xy = zip(*seeds, strict=True)
        ax.plot(*xy, markersize=3.5, alpha=0.7, zorder=top + 0.2, gid=f"seeds:{model}", **dots)
    out = [i for i in shown if ok["converged"].iloc[i] is False]
    dots.update(markersize=kind["markersize"], markerfacecolor="white", zorder=top + 0.1)
    dots.update(markeredgecolor=mark["color"], gid=f"not converged:{name}")
    ax.plot([xs[i] for i in out], [ys[i] for i in out], **dots)


def draw_models(ax, frame: pd.DataFrame, x: str, annotate=(), apart=(), dodge=False) -> None:
    """One line per model and `apart` value (`series`, `draw_line`), each ok point's note (its
    `annotate` values; one text at one place written once, another a line lower), an x at the
    bottom with the reason for each point not ok. `dodge` (log x): a point at the place of one
    drawn before (softmax's first) is moved right (`DODGE`), so that softmax's line shows."""
    placed, dodged = [], []
    for model, note, mine in series(frame, list(apart)):
        mine = mine.iloc[sorted(range(len(mine)), key=lambda i: sort_key(mine.iloc[i][x]))]
        name = f"{model} {note}" if note else model
        good = (mine["status"] == OK) & mine["test_acc"].map(lambda v: not missing(v))
        ok, xs = mine[good], list(mine[good][x])
        if dodge:
            for i, (px, py) in enumerate(zip(ok[x], ok["test_acc"], strict=True)):
                xs[i] = px * DODGE ** sum(q == px and abs(r - py) < 0.015 for q, r in dodged)
                dodged.append((px, py))
        if len(ok):
            draw_line(ax, model, name, ok, xs)
        for _, p in mine[good | (mine["status"] != OK)].iterrows():
            values = [f"{look.short(k)}={p[k]}" for k in annotate[:2] if not missing(p.get(k))]
            text = ", ".join(filter(None, [note, *values])) if p["status"] == OK else p["note"]
            y, colour = (
                (p["test_acc"], "dimgrey") if p["status"] == OK else (-0.03, look.colour(model))
            )
            if p["status"] != OK:
                ax.plot(
                    p[x], y, marker="x", color=colour, markersize=9, mew=2, gid=f"not ok:{name}"
                )
            near = [t for t, px, py in placed if px == p[x] and abs(py - y) < 0.06]
            if text and text not in near:  # another text at one place: a line lower
                placed.append((text, p[x], y))
                offset = (4, 7 - 8 * len(near))
                ax.annotate(text, (p[x], y), textcoords="offset points", xytext=offset,
                            fontsize=6, zorder=6, color=colour)  # fmt: skip


def baseline_curves(frame: pd.DataFrame, x: str | None) -> dict[str, dict]:
    """Each baseline's value at every (task, x, point) of the figure: what `coinciding` compares."""
    curves: dict[str, dict] = {}
    for _, p in frame.iterrows():
        at = as_key([p["task"], p[x] if x else 0, p.get("params")])
        for name, value in baselines(p).items():
            curves.setdefault(name, {})[at] = value
    return curves


def draw_baselines(ax, frame: pd.DataFrame, x: str | None, drawn: dict[str, str]) -> None:
    """The baselines in `drawn`: flat where the panel's points agree (or x is the state), else
    along x (the mean of their distinct values at each x)."""
    for name in sorted(drawn):
        style = dict(color="grey", linewidth=1, linestyle=look.BASELINE_STYLES.get(name, "-"))
        at = frame[x] if x else pd.Series(0, index=frame.index)
        values = frame.get(f"{BASELINE}{name}", pd.Series(None, index=frame.index, dtype=object))
        pairs = pd.DataFrame({"x": at, "y": values}).dropna().astype({"y": float}).drop_duplicates()
        if pairs.empty:
            continue
        if pairs["y"].max() - pairs["y"].min() < 1e-9 or x in (None, STATE_FLOATS):
            ax.axhline(pairs["y"].mean(), gid=f"baseline:{name}", **style)
            continue
        mean = pairs.groupby("x")["y"].mean()
        ax.plot(mean.index, mean.values, gid=f"baseline:{name}", **style)


def finish(fig, frame: pd.DataFrame, title: str, unplaced: pd.DataFrame, subtitle: str, x=None,
           train_length=False) -> None:  # fmt: skip
    """The title, one legend (below one panel, beside several) naming every mark the figure
    has, and a caption line: the budget and the points with no place on the x axis."""
    ok, entry = frame[frame["status"] == OK], look.legend_entry
    handles = [look.model_entry(m) for m in sorted(set(frame["model"]), key=look.model_order)]
    for name, text in look.coinciding(baseline_curves(frame, x)).items():
        handles.append(entry(f"baseline: {text}", linestyle=look.BASELINE_STYLES.get(name, "-")))
    many = "/".join(map(str, sorted(set(ok["seeds"][ok["seeds"] > look.SEED_POINTS]))))
    marks = {
        "small points: seeds; line: their mean": (
            ok["seeds"].between(2, look.SEED_POINTS).any(),
            dict(marker="o", markersize=3.5, alpha=0.7),
        ),
        f"bars: ±1 std over {many} seeds": (bool(many), dict(marker="|", markersize=10)),
        "failed / diverged": ((frame["status"] != OK).any(), dict(marker="x", mew=2)),
        look.HOLLOW: (any(c is False for c in frame["converged"]), dict(marker="o", hollow=True)),
        "training length": (train_length, dict(linestyle=":")),
    }
    handles += [entry(text, **style) for text, (shown, style) in marks.items() if shown]
    one = sum(ax.get_visible() for ax in fig.axes) == 1  # beside one panel it would squeeze it
    where = dict(loc="outside lower center", ncols=2) if one else dict(loc="outside right center")
    fig.legend(handles=handles, fontsize=8, **where)
    notes = [
        f"{p['model']} {look.describe(p['params'])}: {p['note']}" for _, p in unplaced.iterrows()
    ]
    more = f" (+{len(notes) - 6} more)" if len(notes) > 6 else ""
    unplaced_note = "not drawn: " + "; ".join(notes[:6]) + more if notes else ""
    look.titled(fig, title, [subtitle, unplaced_note])


def panel_axes(ax, task: str, values: dict, x: str, single: bool) -> None:
    """A panel's accuracy axis, its title (task, panel values) and, alone, its x title."""
    ax.set_xlabel(look.AXIS_TITLES.get(x, x) if single else "")
    look.accuracy_axis(ax)
    ax.set_title(" · ".join(filter(None, [task, look.describe(values)])), fontsize=10)


def accuracy_figure(
    frame: pd.DataFrame, keys: list[str], spec: FigureSpec, subtitle: str = ""
) -> Figure | None:
    """Test accuracy against the spec's x (a parameter, or the state), log2, a panel per value
    of its `panels`, its `ticks` under the x values (or beside each point where they differ
    between models); the other varied parameters set points apart on their line (`series`).
    None where x was not varied."""
    x = STATE_FLOATS if spec.x == STATE else spec.x
    data = frame[frame[x].map(lambda v: not missing(v))] if x in frame else frame.iloc[:0]
    if data.empty or data[x].map(as_key).nunique() < 2:
        return None
    panel_keys, together = (
        [k for k in spec.panels if k in keys],
        [k for k in spec.ticks if k in keys],
    )
    apart = [k for k in keys if k not in (x, *panel_keys, *together)]
    layout = panels(data, panel_keys)
    fig, axes = look.grid(len(layout))
    placed = pd.Series(False, index=frame.index)
    for ax, (task, values) in zip(axes, layout, strict=True):
        inside = in_panel(data, task, values)
        placed |= inside.reindex(frame.index, fill_value=False)
        notes = tick_notes(data[inside], x, together)
        draw_models(ax, data[inside], x, [] if notes else together, apart, dodge=True)
        draw_baselines(ax, data[inside], x, look.coinciding(baseline_curves(frame, x)))
        look.log2_axis(ax, list(data[x]), "floats" if x == STATE_FLOATS else "length")
        if notes:
            ax.xaxis.set_major_formatter(lambda v, _, n=notes: f"{v:g}\n{n.get(f'{v:g}', '')}")
        panel_axes(ax, task, values, x, len(layout) == 1)
    if len(layout) > 1:
        fig.supxlabel(look.AXIS_TITLES.get(x, x), fontsize=10)
    title = "state size" if x == STATE_FLOATS else look.AXIS_TITLES.get(x, look.short(x))
    title = title.split(" (")[0]  # the axis names the unit
    finish(fig, frame, f"Accuracy against {title}", frame[~placed], subtitle, x=x)
    return fig


def sliced_figure(frame: pd.DataFrame, keys: list[str], key: str, values, title: str,
                  subtitle: str) -> Figure:  # fmt: skip
    """Accuracy against one slice of each ok point's test set (`values(point)`: {value: its
    seeds' mean}, the x `key`), a panel per value of `keys`. Test lengths (`test_length`) on a
    log2 axis with the training length dotted; else a linear axis, the points not ok listed
    under the figure."""
    layout, lengths = panels(frame, keys), key == "test_length"
    fig, axes = look.grid(len(layout))
    for ax, (task, panel) in zip(axes, layout, strict=True):
        mine = frame[in_panel(frame, task, panel)]
        draw_models(ax, sliced(mine, key, values), key)
        draw_baselines(ax, mine, None, look.coinciding(baseline_curves(frame, None)))
        if lengths:
            for length in {n for n in mine["seq_len"] if not missing(n)}:
                ax.axvline(length, color="grey", linewidth=1.2, linestyle=":", gid="train length")
            look.log2_axis(ax, [n for _, p in frame.iterrows() for n in values(p)], "length")
        panel_axes(ax, task, panel, key, True)
    unplaced = frame.iloc[:0] if lengths else frame[frame["status"] != OK]
    drawn = pd.concat([sliced(frame, key, values), unplaced])
    finish(fig, drawn, title, unplaced, subtitle, train_length=lengths)
    return fig


def length_figure(frame: pd.DataFrame, keys: list[str], subtitle: str = "") -> Figure | None:
    """Accuracy against test length from one run (`task.eval_seq_lens`), the training length
    dotted; one panel per value of the other varied parameters."""
    lengths = frame.apply(lambda p: len(by_length(p)), axis=1) if len(frame) else frame.index
    tested = (
        frame[(lengths > 1) | ((lengths > 0) & (frame["status"] != OK))] if len(frame) else frame
    )
    if tested.empty:
        return None
    return sliced_figure(
        tested, keys, "test_length", by_length, "Accuracy against test length", subtitle
    )
