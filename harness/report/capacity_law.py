"""Capacity against state (docs/background.md, section 17): each load-curve run's n90 against
its mixer's state per layer (`state.mixer_floats_per_layer`: the short convolution's window,
which holds no earlier binding, left out; `mixer_floats`), both on log axes, a power law
n90 = a * floats^b fitted per mixer (`harness.readouts.power_law`), and each mixer's rank bound (H x
D: the bindings a linear read-out of its state recovers exactly) as a dashed line.

Only readouts that measure the state are fitted: a `training_limited` run (drawn hollow) has
not learned to retrieve where its state has room, and an n90 at the largest tested load (drawn
with an upward arrow) is a lower bound; both are drawn and left out of the fit."""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.markers import CARETUP

from common.checks import is_real
from harness.readouts.capacity import TRAINING_LIMITED
from harness.readouts.power_law import PowerLaw, fit_power_law
from harness.records.schema import OK
from harness.report.budget import budget
from harness.report.load_curve import seeds_of
from harness.report.points import Point
from harness.report.style import AXIS_TITLES, colour, marker, model_order, powers_of_two

SPREAD = 0.09
"""How far apart (in log2 x) markers that would coincide are drawn, each cluster centred on
its true state size."""


@dataclass(frozen=True)
class CapacityRun:
    """One ok run's readout: its mixer (variant name), state floats per layer, n90 (None when
    no tested load reached 0.9), verdict, whether n90 is a lower bound, and its rank bound."""

    mixer: str
    floats: float
    n90: float | None
    verdict: str | None
    lower_bound: bool
    rank_bound: float | None
    load: str | None = None

    @property
    def fitted(self) -> bool:
        """A readout that measures the state: a finite n90, not training_limited, not
        censored at the largest tested load."""
        return (
            self.n90 is not None
            and self.n90 > 0
            and self.floats > 0
            and self.verdict != TRAINING_LIMITED
            and not self.lower_bound
        )


def known(value: object) -> bool:
    """A number, not a gap (None, or NaN where other records have the key)."""
    return is_real(value) and not math.isnan(value)


def mixer_floats(row: dict) -> float | None:
    """The mixer's state per layer: `state.mixer_floats_per_layer`, or (records without it)
    `state.floats_per_layer` less the short convolution's window, (kernel - 1) x d_model."""
    if known(row.get("state.mixer_floats_per_layer")):
        return float(row["state.mixer_floats_per_layer"])
    floats = row.get("state.floats_per_layer")
    if not known(floats):
        return None
    kernel, width = row.get("backbone.short_conv") or 0, row.get("backbone.d_model") or 0
    return float(floats - max(kernel - 1, 0) * width)


def capacity_runs(
    points: list[Point], point_keys: list[str], rows: list[dict], names: Sequence[str] | None = None
) -> list[CapacityRun]:
    """Every ok seed with a load-curve readout (record key `capacity`) behind `points` (the
    learning rate chosen per point); `names`, aligned with `points`, name the mixers (a
    model's variants, "linear taylor"), default each point's model."""
    runs = []
    for point, name in zip(points, names or [p.model for p in points], strict=True):
        if point.status != OK or not point.capacity:
            continue
        for seed in seeds_of(point, rows, point_keys):
            floats = mixer_floats(seed)
            if seed.get("capacity.verdict") is None and seed.get("capacity.n90") is None:
                continue
            if floats is None:
                continue
            runs.append(
                CapacityRun(
                    mixer=name,
                    floats=float(floats),
                    n90=seed.get("capacity.n90"),
                    verdict=seed.get("capacity.verdict"),
                    lower_bound="n90" in (seed.get("capacity.censored") or []),
                    rank_bound=seed.get("state.rank_bound_per_layer"),
                    load=seed.get("capacity.load"),
                )
            )
    return runs


def capacity_laws(runs: list[CapacityRun]) -> dict[str, PowerLaw]:
    """Each mixer's power law over its fitted runs (`CapacityRun.fitted`), where one exists
    (3 or more runs over 2 or more state sizes)."""
    by_mixer: dict[str, list[CapacityRun]] = defaultdict(list)
    for run in runs:
        by_mixer[run.mixer].append(run)
    laws = {}
    for mixer, mine in by_mixer.items():
        law = fit_power_law([(r.floats, r.n90) for r in mine if r.fitted])
        if law is not None:
            laws[mixer] = law
    return laws


def law_notes(laws: dict[str, PowerLaw]) -> list[str]:
    """`capacity law: linear b = 0.52 [0.41, 0.63] from 8 runs` per mixer (90% interval)."""
    return [
        f"capacity law: {mixer} b = {laws[mixer].shown()} from {laws[mixer].n} runs"
        for mixer in sorted(laws, key=model_order)
    ]


def law_label(mixer: str, mine: list[CapacityRun], law: PowerLaw | None) -> str:
    """The mixer's legend entry: its fit, or why there is none."""
    if law is not None:
        return f"{mixer}: b = {law.shown()} (n={law.n})"
    fitted = [r for r in mine if r.fitted]
    if not fitted and all(r.lower_bound for r in mine if r.n90 is not None):
        why = "n90 lower bounds only"
    elif len({r.floats for r in fitted}) < 2:
        why = "one state size fitted" if fitted else "no fitted runs"
    else:
        why = "fewer than 3 fitted runs"
    return f"{mixer}: no fit ({why})"


def count_label(value: float) -> str:
    """`512`, `8k`, `1.5M` (floats, in powers of 1024)."""
    for unit, scale in (("M", 1024**2), ("k", 1024)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def spread(marks: list[tuple[str, float, float]]) -> list[float]:
    """Display x of each mark (mixer, x, y): marks that would be drawn on one another (within
    0.1 in log2 x and log2 y) are set side by side, `SPREAD` apart, centred on their x."""
    clusters: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, (_, x, y) in enumerate(marks):
        clusters[(round(math.log2(x) * 10), round(math.log2(y) * 10))].append(index)
    shown = [x for _, x, _ in marks]
    for members in clusters.values():
        for rank, index in enumerate(members):
            shown[index] *= 2 ** (SPREAD * (rank - (len(members) - 1) / 2))
    return shown


def log2_ticks(axis, low: float, high: float, label) -> None:
    axis.set_major_locator(ticker.FixedLocator(powers_of_two(low, high)))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: label(v)))


def crossing(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> bool:
    """Two bound curves that would be drawn on one another somewhere: one bound at state sizes
    within 0.25 in log2 (DeltaNet's and RetNet's H d^2 floats, linear's H (d^2 + d))."""
    return any(y1 == y2 and abs(math.log2(x1 / x2)) < 0.25 for x1, y1 in first for x2, y2 in second)


def draw_rank_bounds(ax, runs: list[CapacityRun], mixers: list[str]) -> bool:
    """Each mixer's rank bound through its state sizes, dashed in its colour (a short segment
    where it has one size); mixers whose bounds run together (`crossing`, transitively) share
    one dash pattern at shifted phases, so that their colours alternate and each stays
    visible. True when any was drawn."""
    curves = {}
    for mixer in mixers:
        mine = [r for r in runs if r.mixer == mixer and r.rank_bound]
        if mine:
            curves[mixer] = sorted({(r.floats, float(r.rank_bound)) for r in mine})
    groups: list[list[str]] = []
    for mixer, pairs in curves.items():
        touching = [g for g in groups if any(crossing(curves[m], pairs) for m in g)]
        merged = [m for g in touching for m in g] + [mixer]
        groups = [g for g in groups if g not in touching] + [merged]
    dash = 4.0
    for group in groups:
        gap = dash * (len(group) - 1) if len(group) > 1 else 3.0
        for index, mixer in enumerate(sorted(group, key=model_order)):
            xs, ys = [p[0] for p in curves[mixer]], [p[1] for p in curves[mixer]]
            if len(xs) == 1:
                xs, ys = [xs[0] / 2**0.4, xs[0] * 2**0.4], [ys[0], ys[0]]
            ax.plot(
                xs,
                ys,
                color=colour(mixer),
                linewidth=1.3,
                linestyle=(dash * index, (dash, gap)),
                gid=f"rank_bound:{mixer}",
                zorder=1,
            )
    return bool(curves)


def capacity_figure(runs: list[CapacityRun], rows: list[dict]) -> Figure | None:
    """n90 against state floats per layer (log-log), a colour and marker per mixer, each run a
    point (hollow: training_limited; arrow up: a lower bound), each mixer's fitted power law
    over its fitted range with b and its 90% interval in the legend, and its rank bound
    dashed. None unless some mixer has readouts at 2 or more state sizes."""
    mixers = sorted({r.mixer for r in runs}, key=model_order)
    sizes = {m: {r.floats for r in runs if r.mixer == m} for m in mixers}
    if not any(len(s) >= 2 for s in sizes.values()):
        return None
    laws = capacity_laws(runs)
    fig, ax = plt.subplots(figsize=(8.0, 5.6), layout="constrained")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    handles: list[Line2D] = []
    drawn = [r for r in runs if r.n90 is not None and r.n90 > 0]
    shown_x = spread([(r.mixer, r.floats, r.n90) for r in drawn])
    for mixer in mixers:
        style = dict(color=colour(mixer), marker=marker(mixer))
        law = laws.get(mixer)
        if law is not None:
            low, high = law.floats_range
            xs = [low * (high / low) ** (i / 50) for i in range(51)]
            ax.plot(
                xs, [law(x) for x in xs], color=colour(mixer), linewidth=1.8, gid=f"fit:{mixer}"
            )
        for run, x in zip(drawn, shown_x, strict=True):
            if run.mixer != mixer:
                continue
            hollow = run.verdict == TRAINING_LIMITED
            face = "white" if hollow else colour(mixer)
            kw = dict(markersize=6.5, markerfacecolor=face, markeredgewidth=1.2, zorder=3)
            if run.lower_bound:
                ax.errorbar(
                    [x],
                    [run.n90],
                    yerr=[[0.0], [0.6 * run.n90]],
                    lolims=True,
                    fmt=style["marker"],
                    color=colour(mixer),
                    elinewidth=1.0,
                    capsize=3,
                    gid=f"lower_bound:{mixer}",
                    **kw,
                )
            else:
                ax.plot([x], [run.n90], linestyle="none", gid=f"run:{mixer}", **style, **kw)
        mine = [r for r in runs if r.mixer == mixer]
        handles.append(
            Line2D(
                [],
                [],
                linestyle="-" if law else "none",
                label=law_label(mixer, mine, law),
                **style,
            )
        )
    grey = dict(color="grey", linestyle="none", markersize=6.5)
    if draw_rank_bounds(ax, runs, mixers):
        handles.append(
            Line2D([], [], color="grey", linestyle=(0, (4, 3)), label="rank bound D x H (dashed)")
        )
    if any(r.verdict == TRAINING_LIMITED for r in drawn):
        label = "hollow: training_limited (not fitted)"
        handles.append(Line2D([], [], marker="o", markerfacecolor="white", label=label, **grey))
    if any(r.lower_bound for r in drawn):
        label = "arrow: n90 at the largest tested load, a lower bound (not fitted)"
        handles.append(Line2D([], [], marker=CARETUP, label=label, **grey))
    xs = [r.floats for r in runs]
    ys = [r.n90 for r in drawn] + [float(r.rank_bound) for r in runs if r.rank_bound]
    ax.set_xlim(min(xs) / 2**0.6, max(xs) * 2**0.6)
    ax.set_ylim(min(ys) / 2**0.5, max(ys) * 2**1.0)
    log2_ticks(ax.xaxis, min(xs), max(xs), count_label)
    log2_ticks(ax.yaxis, min(ys), max(ys), lambda v: f"{v:g}")
    ax.grid(alpha=0.3)
    ax.set_xlabel("the mixer's state per layer (floats; the short conv's window not counted)")
    load = next((r.load for r in runs if r.load), None)
    what = AXIS_TITLES.get(f"task.{load}", load or "load")
    ax.set_ylabel(f"n90: largest load at accuracy >= 0.9\n({what})")
    missing = len(runs) - len(drawn)
    note = f"; {missing} run(s) with no load at 0.9 not drawn" if missing else ""
    title = "Capacity against state: n90 per run, power law n90 = a floats^b per mixer"
    subtitle = f"{budget(rows)}; b with its 90% interval; fit over filled points{note}"
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    return fig
