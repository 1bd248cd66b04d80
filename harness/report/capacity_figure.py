"""Capacity against state (`capacity_vs_state.png`; docs/background.md, section 17 and "The
censored capacity law"): each run's n90 against its mixer's state per layer, log-log; each
mixer's censored power law over the state sizes it read (`harness.report.capacity_law`), and
its stack's rank bound (R = layers x H x D: the bindings a linear read-out of its states
recovers exactly) dashed; for a KV cache (softmax, sliding_window) that bound is the tokens it
keeps, and the legend names it so.

A figure is fit, points and legend: `draw_fits`, `draw_runs`, `capacity_legend`. Every run the
fit keeps is drawn: a filled marker where n90 is read between two tested loads, an arrow up
from a lower bound (every tested load held, or a run still rising), an arrow down from the
judging load where the state ran out of room below it; hollow where the run had not converged
(`look.HOLLOW`). training_limited runs are left out of the fit and of the figure (the
verdict section lists them)."""

import math
import textwrap
from collections import Counter, defaultdict

import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.markers import CARETDOWN, CARETUP

from harness.readouts.capacity import INTERVAL, LEFT, RIGHT, level_name
from harness.readouts.cell_law import CellLaw
from harness.readouts.convergence import CONVERGED
from harness.records.record import KV_CACHES
from harness.report import look
from harness.report.budget import budget
from harness.report.capacity_runs import CapacityRun
from models.stack import HYBRID_JOIN

SPREAD = 0.09
"""How far apart (in log2 x) markers that would coincide are drawn, each cluster centred on
its true state size."""
ARROW = 0.6
"""An arrow's length, as a fraction of its readout."""


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
    axis.set_major_locator(ticker.FixedLocator(look.powers_of_two(low, high)))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: label(v)))


def crossing(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> bool:
    """Two bound curves that would be drawn on one another somewhere: one bound at state sizes
    within 0.25 in log2 (DeltaNet's and RetNet's H d^2 floats, linear's H (d^2 + d))."""
    return any(y1 == y2 and abs(math.log2(x1 / x2)) < 0.25 for x1, y1 in first for x2, y2 in second)


def bound_groups(curves: dict[str, list[tuple[float, float]]]) -> list[list[str]]:
    """Mixers whose rank-bound curves run together (`crossing`, transitively)."""
    groups: list[list[str]] = []
    for mixer, pairs in curves.items():
        touching = [g for g in groups if any(crossing(curves[m], pairs) for m in g)]
        groups = [g for g in groups if g not in touching] + [[*sum(touching, []), mixer]]
    return groups


def any_hybrid(mixers) -> bool:
    """Whether some of `mixers` is a hybrid (`models.stack.hybrid_label`: `gdn+softmax`), whose
    state and rank bound per layer are its layers' mean (`state.*_per_layer`)."""
    return any(HYBRID_JOIN in mixer for mixer in mixers)


def kv_cache_counts(mixer: str) -> str | None:
    """What a KV cache's dashed line counts (`KV_CACHES`; a variant, `softmax x`, is its
    mixer's); None for any other mixer or a hybrid."""
    return KV_CACHES.get(mixer.split(" ", 1)[0])


def draw_rank_bounds(ax, runs: list[CapacityRun], mixers: list[str]) -> list[str]:
    """Each mixer's rank bound through its state sizes, dashed in its look.colour (a short segment
    where it has one size); mixers whose bounds run together share one dash pattern at shifted
    phases, so that their colours alternate. The mixers whose bound was drawn."""
    curves = {}
    for mixer in mixers:
        mine = [r for r in runs if r.mixer == mixer and r.rank_bound]
        if mine:
            curves[mixer] = sorted({(r.floats, float(r.rank_bound)) for r in mine})
    dash = 4.0
    for group in bound_groups(curves):
        gap = dash * (len(group) - 1) if len(group) > 1 else 3.0
        for index, mixer in enumerate(sorted(group, key=look.model_order)):
            xs, ys = [p[0] for p in curves[mixer]], [p[1] for p in curves[mixer]]
            if len(xs) == 1:
                xs, ys = [xs[0] / 2**0.4, xs[0] * 2**0.4], [ys[0], ys[0]]
            style = dict(color=look.colour(mixer), linewidth=1.3, zorder=1)
            ax.plot(
                xs, ys, linestyle=(dash * index, (dash, gap)), gid=f"rank_bound:{mixer}", **style
            )
    return list(curves)


def pinned(law: CellLaw) -> bool:
    """Whether the law's b in floats is pinned: its 90% interval lies above 0. A line drawn
    for an exponent that could be 0 or negative would show a law the runs do not give."""
    return law.floats is not None and law.floats.b_low > 0  # NaN (no interval): False


LINE_WIDTHS = 3
"""A law is drawn as a line only where its runs were read at this many state sizes or more:
a line through two is fitted exactly by its two parameters, and nothing tests its shape (no
lack of fit)."""


def read_sizes(runs: list[CapacityRun]) -> set[float]:
    """The state sizes at which some run the fit keeps was read (not censored)."""
    return {r.floats for r in runs if r.fitted and r.n90_censoring is None}


def read_widths(law: CellLaw) -> int:
    """How many widths the law's observations were read at (not censored on one side)."""
    return law.read


def lined(law: CellLaw) -> bool:
    """Whether the law is drawn as a line: `pinned`, and read at `LINE_WIDTHS` state sizes."""
    return pinned(law) and read_widths(law) >= LINE_WIDTHS


def draw_fits(ax, laws: dict[str, CellLaw]) -> None:
    """Each mixer's n90 law over the state sizes it read, where it is `lined`."""
    for mixer, law in laws.items():
        if not lined(law):
            continue
        low, high = law.floats.floats_range
        xs = [low * (high / low) ** (i / 50) for i in range(51)]
        ax.plot(
            xs,
            [law.floats(x) for x in xs],
            color=look.colour(mixer),
            linewidth=1.8,
            gid=f"fit:{mixer}",
        )


def draw_run(ax, run: CapacityRun, x: float) -> None:
    """One run: a look.marker at its readout, an arrow up (a lower bound) or down (below the
    judging load) where it is censored, a bar over the two tested loads it fell between
    where it is interval-censored, hollow where it had not converged."""
    face = look.colour(run.mixer) if run.training == CONVERGED else "white"
    size = 9.5 if run.best else 5.0
    style = dict(color=look.colour(run.mixer), fmt=look.marker(run.mixer), markersize=size)
    style.update(markerfacecolor=face, markeredgewidth=1.2, zorder=3, elinewidth=1.0, capsize=3)
    kind = run.n90_censoring
    if kind is None:
        ax.errorbar([x], [run.n90], gid=f"run:{run.mixer}", **style)
        return
    if kind == INTERVAL:  # a bar over the two tested loads it fell between
        yerr = [[run.n90 - run.n90_low], [run.n90_high - run.n90]]
        ax.errorbar([x], [run.n90], yerr=yerr, gid=f"interval:{run.mixer}", **style)
        return
    length = ARROW * run.n90 if kind == RIGHT else run.n90 * ARROW / (1 + ARROW)
    yerr = [[0.0], [length]] if kind == RIGHT else [[length], [0.0]]
    gid = f"{'lower' if kind == RIGHT else 'upper'}_bound:{run.mixer}"
    ax.errorbar(
        [x], [run.n90], yerr=yerr, lolims=kind == RIGHT, uplims=kind == LEFT, gid=gid, **style
    )


def draw_runs(ax, runs: list[CapacityRun]) -> None:
    """Every run the fit keeps (`CapacityRun.fitted`), coinciding ones side by side."""
    for run, x in zip(runs, spread([(r.mixer, r.floats, r.n90) for r in runs]), strict=True):
        draw_run(ax, run, x)


def no_fit_reason(mine: list[CapacityRun]) -> str:
    """Why a mixer's runs give no law."""
    fitted = [r for r in mine if r.fitted]
    read = read_sizes(mine)
    if not fitted:
        return "every run training_limited"
    if not read:
        return "censored readouts only"
    return "uncensored readouts at one state size" if len(read) < 2 else "too few runs"


SHARED_REASON = 3
"""Where this many mixers or more share a reason for no fit, every mixer's reason is written
under the title (`no_fit_note`) and its legend entry gives its name alone."""


def law_label(mixer: str, law: CellLaw | None, why: str) -> str:
    """The mixer's legend entry: its fit (b, interval, runs, censored runs), or why none (`why`;
    empty where the subtitle says it)."""
    if law is not None and law.floats is not None:
        fit = law.floats
        censored = fit.counts[LEFT] + fit.counts[RIGHT]
        drawn = "" if pinned(law) else "; not pinned (the interval reaches 0): no line"
        if math.isnan(fit.b_low):
            drawn = f"; read at {read_widths(law)} widths: not pinned, no line"
        if pinned(law) and not lined(law):
            drawn = f"; read at {read_widths(law)} state sizes: no line"
        return f"{mixer}: b = {fit.shown()} ({fit.n} readouts, {censored} censored{drawn})"
    return f"{mixer}: no fit ({why})" if why else mixer


def no_fit_reasons(runs: list[CapacityRun], laws: dict[str, CellLaw], mixers: list[str]) -> dict:
    """{mixer: why it has no law} of the mixers without one."""
    return {m: no_fit_reason([r for r in runs if r.mixer == m]) for m in mixers if m not in laws}


def no_fit_note(reasons: dict[str, str]) -> str:
    """Every mixer's reason for no fit, in one line for the subtitle, when `SHARED_REASON` or
    more share one (`no fit for the mixers named alone: censored readouts only; gdn+gdn: ...`);
    empty otherwise, each legend entry then giving its own."""
    counts = Counter(reasons.values()).most_common()
    if not counts or counts[0][1] < SHARED_REASON:
        return ""
    others = [f"{m}: {why}" for m, why in reasons.items() if why != counts[0][0]]
    return "; ".join([f"no fit for the mixers named alone: {counts[0][0]}", *others])


def legend_columns(handles: list[Line2D]) -> int:
    """3 where the entries of the first two columns (filled down, the mixers first) are short
    enough for a third beside them; else 2."""
    rows = -(-len(handles) // 3)
    first_two = [h.get_label() for h in handles[: 2 * rows]]
    return 3 if len(handles) > 9 and max(map(len, first_two)) <= 32 else 2


def capacity_legend(
    fig,
    runs: list[CapacityRun],
    laws: dict[str, CellLaw],
    mixers: list[str],
    bounds: list[str],
    reasons: dict[str, str],
) -> None:
    """A mixer's entry each (its law, or its reason for none from `reasons`; a mixer not in
    `reasons` and without a law is named alone, its reason under the title), then what the
    dashes (`bounds`: the mixers whose rank bound is drawn; a KV cache's, in its look.colour, as
    the tokens it keeps), arrows and hollow markers mean."""
    shown = [r for r in runs if r.fitted]
    handles: list[Line2D] = []
    for mixer in mixers:
        line = "-" if mixer in laws and lined(laws[mixer]) else "none"
        label = law_label(mixer, laws.get(mixer), reasons.get(mixer, ""))
        handles.append(look.legend_entry(label, look.colour(mixer), look.marker(mixer), line))
    if any(kv_cache_counts(mixer) is None for mixer in bounds):
        mean = "; a hybrid's: its layers' mean" if any_hybrid(mixers) else ""
        if any(m.startswith("log_linear") for m in bounds):
            mean += "; log-linear: x its levels at T"
        label = f"the stack's rank bound R = layers x H x D (dashed){mean}"
        handles.append(look.legend_entry(label, linestyle=(0, (4, 3))))
    for mixer in bounds:
        if kv_cache_counts(mixer) is not None:
            label = f"{mixer}'s KV cache: R = {kv_cache_counts(mixer)} (dashed)"
            handles.append(look.legend_entry(label, look.colour(mixer), linestyle=(0, (4, 3))))
    if any(r.n90_censoring == RIGHT for r in shown):
        handles.append(
            look.legend_entry("arrow up: a lower bound (right-censored)", marker=CARETUP)
        )
    if any(r.n90_censoring == LEFT for r in shown):
        label = "arrow down: below the judging load (left-censored)"
        handles.append(look.legend_entry(label, marker=CARETDOWN))
    if any(r.n90_censoring == INTERVAL for r in shown):
        label = "bar: between the two tested loads it fell between (interval-censored)"
        handles.append(look.legend_entry(label, marker="|"))
    if any(r.training != CONVERGED for r in shown):
        handles.append(look.legend_entry(look.HOLLOW, marker="o", hollow=True))
    columns = legend_columns(handles)
    fig.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize=8)


def capacity_axes(ax, runs: list[CapacityRun], threshold: float) -> None:
    """Log2 axes spanning the runs and their rank bounds, titled with the threshold's level."""
    xs = [r.floats for r in runs]
    ys = [r.n90 for r in runs if r.fitted] + [float(r.rank_bound) for r in runs if r.rank_bound]
    ax.set_xlim(min(xs) / 2**0.6, max(xs) * 2**0.6)
    ax.set_ylim(min(ys) / 2**1.0, max(ys) * 2**1.0)
    log2_ticks(ax.xaxis, min(xs), max(xs), count_label)
    log2_ticks(ax.yaxis, min(ys), max(ys), lambda v: f"{v:g}")
    ax.grid(alpha=0.3)
    mean = "; a hybrid: its layers' mean" if any_hybrid({r.mixer for r in runs}) else ""
    ax.set_xlabel(
        f"the mixer's state per layer (floats; the short conv's window not counted{mean})"
    )
    load = next((r.load for r in runs if r.load), None)
    what = look.AXIS_TITLES.get(f"task.{load}", load or "load")
    name = level_name(threshold)
    ax.set_ylabel(f"{name}: largest load at accuracy >= {threshold:g}\n({what})")


SUBTITLE_WIDTH = 120
"""Characters a line of the subtitle holds: the axes' width at its font size."""


def capacity_figure(
    runs: list[CapacityRun], rows: list[dict], laws: dict[str, CellLaw], threshold: float
) -> Figure | None:
    """n90 (at `threshold`) against state floats per layer: the module docstring's figure.
    None unless the runs the fit keeps sit at 2 or more state sizes (of one mixer: its law;
    of several, each at one: where each mixer or hybrid sits, no law)."""
    mixers = sorted({r.mixer for r in runs}, key=look.model_order)
    kept = [r for r in runs if r.fitted]
    if len({r.floats for r in kept}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(8.0, 5.8), layout="constrained")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    draw_fits(ax, laws)
    draw_runs(ax, kept)
    bounds = draw_rank_bounds(ax, runs, mixers)
    capacity_axes(ax, runs, threshold)
    reasons = no_fit_reasons(runs, laws, mixers)
    no_fit = no_fit_note(reasons)
    capacity_legend(fig, runs, laws, mixers, bounds, {} if no_fit else reasons)
    name = level_name(threshold)
    left_out = len(runs) - len(kept)
    note = (
        f"; {left_out} training_limited run(s) at the floor or below the judging load not drawn"
        if left_out
        else ""
    )
    if laws:
        title = (
            f"Capacity against state: {name} per restart, the law on capacity {name} = a floats^b"
        )
        subtitle = (
            f"{budget(rows)}; large markers: each width's best restart (its capacity); "
            "b with its 90% interval (t on the readouts' effective degrees of freedom)"
        )
    else:
        title = f"Capacity against state: {name} per run (no law fitted)"
        subtitle = budget(rows)
    subtitle = textwrap.fill("; ".join(filter(None, [subtitle + note, no_fit])), SUBTITLE_WIDTH)
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
    return fig
