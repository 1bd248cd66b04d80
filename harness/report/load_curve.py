"""Accuracy against load from runs trained on a range of loads (docs/background.md, "Reading a
load curve"): each run's per-load test accuracies (`test/acc_by/<load>/<value>`) beside the
binding-free baselines at every load (`test/baseline_by/<load>/<value>/<name>`), and the
readouts read at the report's threshold (`harness.report.reread`). A hollow marker is a seed
that had not converged (`look.HOLLOW`), as in every figure."""

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.readouts.capacity import accuracy_by_load, baselines_by_load, level_name
from harness.readouts.capacity import load_of as load_param
from harness.readouts.convergence import CONVERGED
from harness.report import look
from harness.report.budget import budget, joined, values_of
from harness.report.frame import as_key, metrics, missing, sort_key
from harness.report.verdict import by_seed

Point = pd.Series
"""A row of the points' DataFrame (`harness.report.frame.points`)."""


def seeds_of(point: Point, rows: list[dict], point_keys: list[str], every: bool = False) -> list:
    """The ok rows behind `point`: its task, model, parameters (those of `point_keys` and
    those a variant's name was made of, `linear elu`) and chosen learning rate; `every`: its
    cell's rows of any status and rate."""
    keys = [*point_keys, *(k for k in point.params if k not in point_keys)]
    lr = None if missing(point.lr) or every else point.lr
    return [
        row
        for row in rows
        if (every or row.get("status") == "ok")
        and row.get("task") == point.task
        and row.get("model") == point.model.split(" ")[0]
        and all(as_key(row.get(k)) == as_key(point.params.get(k)) for k in keys)
        and (lr is None or row.get("optim.lr") == lr)
    ]


def readout_label(rows: list[dict]) -> str:
    """`n90 12.3 (capacity_limited)` for one seed; for several, each readout named with its seed
    (`verdict.by_seed`) and the verdict once where they agree, `n90 11.0 (seed 0), >=12.4 (seed
    1): capacity_limited`, else each seed's, `n90 <2 (seed 0, training_limited), 2.16 (seed 1,
    capacity_limited)`; the name at the readouts' threshold (`n80`); `>=` where the readout is
    a lower bound, `<` where it lies below the judging load."""
    readouts = [
        {k.split(".", 1)[1]: v for k, v in r.items() if k.startswith("capacity.")}
        | {"seed": r.get("seed")}
        for r in sorted(rows, key=lambda r: sort_key(r.get("seed")))
    ]
    name = level_name(readouts[0].get("threshold") or 0.9) if readouts else "n90"
    verdicts = {str(r.get("verdict")) for r in readouts}
    text = f"{name} {by_seed(readouts, verdicts=len(verdicts) > 1)}"
    if len(verdicts) > 1:
        return text
    return text + (f": {verdicts.pop()}" if len(readouts) > 1 else f" ({verdicts.pop()})")


def load_figure(
    frame: pd.DataFrame, point_keys: list[str], rows: list[dict], threshold: float
) -> Figure | None:
    """Test accuracy against load (log2), a line per model through the seeds' mean, each seed
    a point (hollow: not converged), the binding-free baselines in grey, the threshold's level
    as a light line. One panel when every model has one line; else one panel per model, one
    line per setting."""
    curves = [p for _, p in frame.iterrows() if p.status == "ok" and load_param(metrics(p))]
    if not curves:
        return None
    load = load_param(metrics(curves[0]))
    models = sorted({p.model for p in curves}, key=look.model_order)
    several = any(sum(p.model == m for p in curves) > 1 for m in models)
    layout = [[p for p in curves if p.model == m] for m in models] if several else [curves]
    fig, axes = look.grid(len(layout))
    handles: dict[str, Line2D] = {}
    for ax, mine in zip(axes, layout, strict=True):
        for index, point in enumerate(
            sorted(mine, key=lambda p: [sort_key(p.params.get(k)) for k in point_keys])
        ):
            seeds = seeds_of(point, rows, point_keys)
            draw_curve(ax, point, seeds, load, index if several else 0, point_keys, handles)
        draw_load_baselines(ax, mine, load, handles)
        look.log2_axis(ax, [n for p in mine for n in accuracy_by_load(metrics(p), load)], "length")
        ax.axhline(threshold, color="lightgrey", linewidth=0.8, zorder=0)
        ax.set_xlabel(look.AXIS_TITLES.get(f"task.{load}", load) + " (tested)")
        look.accuracy_axis(ax)
        ax.set_title(mine[0].model if several else "", fontsize=10)
    if any(r.get("capacity.training") not in (None, CONVERGED) for r in rows):
        handles[look.HOLLOW] = look.legend_entry(look.HOLLOW, marker="o", hollow=True)
    band = any(len(seeds_of(p, rows, point_keys)) > 3 for p in curves)
    look.titled(fig, "Accuracy against load", [load_curve_subtitle(rows, load, threshold, band)])
    where = dict(loc="outside lower center", ncols=2, fontsize=8, handlelength=4)
    fig.legend(handles=list(handles.values()), **where)
    return fig


LINE_STYLES = ("-", "--", "-.", ":", (0, (6, 1.5, 1, 1.5, 1, 1.5)), (0, (10, 3)), (0, (1, 3)))
"""A distinct dash per line of one panel (seven before they repeat)."""


def load_curve_subtitle(rows: list[dict], load: str, threshold: float, band: bool = False) -> str:
    """What the curves were trained with: the training loads, steps, learning rate, width, and
    what the marks are (`trained on [4, 64] pairs, 3000 steps, lr 0.003, d_model 64`); the
    band of one std is named where one is drawn (`band`: a cell of more than three seeds;
    hollow markers are named in the legend)."""
    mixtures = values_of(rows, "task.mixture")
    if mixtures:
        trained = f"trained on the mixture {' / '.join(mixtures)}"
    else:
        trained = f"trained on {load}={joined(values_of(rows, f'task.{load}')) if rows else '?'}"
    spread = " (beyond three, a band of one std)" if band else ""
    marks = f"line: seed mean, points: seeds{spread}; light line: {threshold:g}"
    return f"{trained}, {budget(rows)}; {marks}"


def draw_curve(
    ax, point: Point, seeds: list[dict], load: str, index: int, point_keys, handles
) -> None:
    """The seeds' mean through every tested load; with three seeds or fewer, each seed's
    accuracies as small markers (hollow where it had not converged); with more, a band of one
    sample std around the mean and hollow markers for the seeds that had not converged."""
    mean = pd.Series(accuracy_by_load(metrics(point), load)).sort_index()
    colour, marker = look.colour(point.model), look.marker(point.model)
    width = look.line_look(point.model)["linewidth"]
    style = dict(color=colour, linewidth=width, linestyle=LINE_STYLES[index % len(LINE_STYLES)])
    params = {k: point.params.get(k) for k in point_keys if k != "seed"}
    label = " ".join(filter(None, [point.model, look.describe(params)]))
    label += f": {readout_label(seeds)}" if seeds else ""
    (line,) = ax.plot(mean.index, mean.values, gid=f"model:{point.model}", **style)
    handles[label] = look.legend_entry(label, marker=marker, **style)
    curves = pd.DataFrame([accuracy_by_load(seed, load) for seed in seeds]).sort_index(axis=1)
    if len(seeds) > 3:  # the seeds' spread: a band of one sample std around their mean
        spread = curves.reindex(columns=mean.index).std().fillna(0.0)
        ax.fill_between(mean.index, mean - spread, mean + spread, color=colour, alpha=0.15, lw=0)
    for seed, (_, curve) in zip(seeds, curves.iterrows(), strict=True):
        hollow = seed.get("capacity.training") not in (None, CONVERGED)
        if len(seeds) <= 3 or hollow:  # beyond three seeds only the unconverged are marked
            curve = curve.dropna()
            ax.plot(curve.index, curve.values, linestyle="none", marker=marker, markersize=5,
                    color=colour, markerfacecolor="white" if hollow else colour, alpha=0.8,
                    zorder=line.get_zorder() + 0.1)  # fmt: skip


def draw_load_baselines(ax, points: list[Point], load: str, handles) -> None:
    """Each baseline along the load axis (the points' mean at each load); baselines equal at
    every load share one line and one legend entry."""
    found = [
        (name, n, value)
        for point in points
        for name, by_load in baselines_by_load(metrics(point), load).items()
        for n, value in by_load.items()
    ]
    means = pd.DataFrame(found, columns=["name", "load", "value"]).groupby(["name", "load"]).mean()
    curves = {name: group.droplevel(0)["value"].to_dict() for name, group in means.groupby(level=0)}
    for name, label in look.coinciding(curves).items():
        style = look.BASELINE_STYLES.get(name, "-")
        loads = sorted(curves[name])
        ax.plot(loads, [curves[name][n] for n in loads], color="grey", linewidth=1,
                linestyle=style, gid=f"baseline:{name}")  # fmt: skip
        handles[f"baseline: {label}"] = look.legend_entry(f"baseline: {label}", linestyle=style)
