"""Capacity against state (`capacity_vs_state.png`; docs/background.md, section 17 and "The
censored capacity law"): each run's n90 against its mixer's state per layer, log-log; each
mixer's censored power law over the state sizes it read (`harness.report.capacity_law`), and
its stack's rank bound (R = layers x H x D: the bindings a linear read-out of its states
recovers exactly) dashed; for a KV cache (softmax, sliding_window) that bound is the tokens it
keeps, and the legend names it so.

Every run the fit keeps is drawn: a filled marker where n90 is read between two tested loads,
an arrow up from a lower bound (every tested load held, or a run still rising), an arrow down
from the judging load where the state ran out of room below it, a bar over the two tested
loads an interval-censored readout fell between; large for each width's best restart, hollow
where the run had not converged (`look.HOLLOW`). training_limited runs are left out of the fit
and of the figure (the verdict section lists them)."""

import math
from collections import Counter, defaultdict

import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.figure import Figure
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
"""How far apart (in log2 x) markers that would coincide are drawn, centred on their x."""
ARROW = 0.6
"""An arrow's length, as a fraction of its readout."""
LINE_WIDTHS = 3
"""A law is drawn as a line only where its runs were read at this many state sizes or more:
a line through two is fitted exactly by its two parameters, and nothing tests its shape."""
SHARED_REASON = 3
"""Where this many mixers or more share a reason for no fit, every mixer's reason is written
in the caption line (`no_fit_note`) and its legend entry gives its name alone."""
DASH = 4.0
CENSORING_MARKS = {
    RIGHT: ("arrow up: a lower bound (right-censored)", {"marker": CARETUP}),
    LEFT: ("arrow down: below the judging load (left-censored)", {"marker": CARETDOWN}),
    INTERVAL: (
        "bar: between the two tested loads it fell between (interval-censored)",
        {"marker": "|"},
    ),
    "hollow": (look.HOLLOW, {"marker": "o", "hollow": True}),
}
"""The legend entry of each kind of readout a figure draws (and of a run not converged)."""


def count_label(value: float) -> str:
    """`512`, `8k`, `1.5M` (floats, in powers of 1024)."""
    unit, scale = next(((u, s) for u, s in (("M", 1024**2), ("k", 1024)) if value >= s), ("", 1))
    return f"{value / scale:.3g}{unit}"


def spread(marks: list[tuple[float, float]]) -> list[float]:
    """Display x of each mark (x, y): marks that would be drawn on one another (within 0.1 in
    log2 x and log2 y) are set side by side, `SPREAD` apart, centred on their x."""
    clusters: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, (x, y) in enumerate(marks):
        clusters[(round(math.log2(x) * 10), round(math.log2(y) * 10))].append(index)
    shown = [x for x, _ in marks]
    for members in clusters.values():
        for rank, index in enumerate(members):
            shown[index] *= 2 ** (SPREAD * (rank - (len(members) - 1) / 2))
    return shown


def bound_groups(curves: dict[str, list[tuple[float, float]]]) -> list[list[str]]:
    """Mixers whose rank-bound curves run together, transitively: one bound at state sizes
    within 0.25 in log2 (DeltaNet's and RetNet's H d^2 floats, linear's H (d^2 + d))."""
    near = lambda a, b: any(y == v and abs(math.log2(x / u)) < 0.25 for x, y in a for u, v in b)  # noqa: E731
    groups: list[list[str]] = []
    for mixer, pairs in curves.items():
        touching = [g for g in groups if any(near(curves[m], pairs) for m in g)]
        groups = [g for g in groups if g not in touching] + [[*sum(touching, []), mixer]]
    return groups


def kv_cache_counts(mixer: str) -> str | None:
    """What a KV cache's dashed line counts (`KV_CACHES`; a variant, `softmax x`, is its
    mixer's); None for any other mixer or a hybrid."""
    return KV_CACHES.get(mixer.split(" ", 1)[0])


def draw_rank_bounds(ax, runs: list[CapacityRun], mixers: list[str]) -> list[str]:
    """Each mixer's rank bound through its state sizes, dashed in its colour (a short segment
    where it has one size); mixers whose bounds run together share one dash pattern at shifted
    phases, so that their colours alternate. The mixers whose bound was drawn."""
    curves: dict[str, list] = {}
    for r in (r for r in runs if r.rank_bound and r.mixer in mixers):
        curves.setdefault(r.mixer, set()).add((r.floats, float(r.rank_bound)))
    curves = {m: sorted(curves[m]) for m in mixers if m in curves}
    for group in bound_groups(curves):
        gap = DASH * (len(group) - 1) if len(group) > 1 else 3.0
        for index, mixer in enumerate(sorted(group, key=look.model_order)):
            (xs, ys) = zip(*curves[mixer], strict=True)
            if len(xs) == 1:
                xs, ys = [xs[0] / 2**0.4, xs[0] * 2**0.4], [ys[0], ys[0]]
            style = dict(color=look.colour(mixer), linewidth=1.3, zorder=1)
            ax.plot(
                xs, ys, linestyle=(DASH * index, (DASH, gap)), gid=f"rank_bound:{mixer}", **style
            )
    return list(curves)


def pinned(law: CellLaw) -> bool:
    """Whether the law's b in floats is pinned: its 90% interval lies above 0. A line drawn
    for an exponent that could be 0 or negative would show a law the runs do not give."""
    return law.floats is not None and law.floats.b_low > 0  # NaN (no interval): False


def lined(law: CellLaw) -> bool:
    """Whether the law is drawn as a line: `pinned`, and read at `LINE_WIDTHS` state sizes."""
    return pinned(law) and law.read >= LINE_WIDTHS


def draw_run(ax, run: CapacityRun, x: float) -> None:
    """One run: its marker at its readout, an arrow up (a lower bound) or down (below the
    judging load) where it is censored, a bar over the two tested loads it fell between
    where it is interval-censored, hollow where it had not converged."""
    face = look.colour(run.mixer) if run.training == CONVERGED else "white"
    style = dict(color=look.colour(run.mixer), fmt=look.marker(run.mixer), zorder=3)
    style.update(markersize=9.5 if run.best else 5.0, markerfacecolor=face, markeredgewidth=1.2)
    style.update(elinewidth=1.0, capsize=3)
    kind, y = run.n90_censoring, run.n90
    if kind in (None, INTERVAL):
        yerr = [[y - run.n90_low], [run.n90_high - y]] if kind else None
        ax.errorbar(
            [x], [y], yerr=yerr, gid=f"{'interval' if kind else 'run'}:{run.mixer}", **style
        )
        return
    length = ARROW * y if kind == RIGHT else y * ARROW / (1 + ARROW)
    yerr = [[0.0], [length]] if kind == RIGHT else [[length], [0.0]]
    gid = f"{'lower' if kind == RIGHT else 'upper'}_bound:{run.mixer}"
    ax.errorbar([x], [y], yerr=yerr, lolims=kind == RIGHT, uplims=kind == LEFT, gid=gid, **style)


def no_fit_reason(mine: list[CapacityRun]) -> str:
    """Why a mixer's runs give no law."""
    read = {r.floats for r in mine if r.fitted and r.n90_censoring is None}
    if not any(r.fitted for r in mine):
        return "every run training_limited"
    if not read:
        return "censored readouts only"
    return "uncensored readouts at one state size" if len(read) < 2 else "too few runs"


def law_label(mixer: str, law: CellLaw | None, why: str) -> str:
    """The mixer's legend entry: its fit (b, interval, runs, censored runs), or why none (`why`;
    empty where the caption line says it)."""
    if law is None or law.floats is None:
        return f"{mixer}: no fit ({why})" if why else mixer
    fit = law.floats
    drawn = "" if pinned(law) else "; not pinned (the interval reaches 0): no line"
    if math.isnan(fit.b_low):
        drawn = f"; read at {law.read} widths: not pinned, no line"
    if pinned(law) and not lined(law):
        drawn = f"; read at {law.read} state sizes: no line"
    censored = fit.counts[LEFT] + fit.counts[RIGHT]
    return f"{mixer}: b = {fit.shown()} ({fit.n} readouts, {censored} censored{drawn})"


def no_fit_note(reasons: dict[str, str]) -> str:
    """Every mixer's reason for no fit, in one line for the caption, when `SHARED_REASON` or
    more share one (`no fit for the mixers named alone: censored readouts only; gdn+gdn: ...`);
    empty otherwise, each legend entry then giving its own."""
    counts = Counter(reasons.values()).most_common()
    if not counts or counts[0][1] < SHARED_REASON:
        return ""
    others = [f"{m}: {why}" for m, why in reasons.items() if why != counts[0][0]]
    return "; ".join([f"no fit for the mixers named alone: {counts[0][0]}", *others])


def capacity_legend(fig, runs, laws, mixers, bounds, reasons: dict[str, str]) -> None:
    """A mixer's entry each (its law, or its reason for none from `reasons`), then what the
    dashes (`bounds`: the mixers whose rank bound is drawn; a KV cache's, in its colour, as
    the tokens it keeps), arrows, bars and hollow markers mean; 3 columns where the first
    two's entries are short enough, else 2."""
    shown, entry = [r for r in runs if r.fitted], look.legend_entry
    labels = {m: law_label(m, laws.get(m), reasons.get(m, "")) for m in mixers}
    lines = {m: "-" if m in laws and lined(laws[m]) else "none" for m in mixers}
    handles = [entry(labels[m], look.colour(m), look.marker(m), lines[m]) for m in mixers]
    if any(kv_cache_counts(m) is None for m in bounds):
        mean = "; a hybrid's: its layers' mean" if any(HYBRID_JOIN in m for m in mixers) else ""
        if any(m.startswith("log_linear") for m in bounds):
            mean += "; log-linear: x its levels at T"
        label = f"the stack's rank bound R = layers x H x D (dashed){mean}"
        handles.append(entry(label, linestyle=(0, (4, 3))))
    caches = [(m, kv_cache_counts(m)) for m in bounds if kv_cache_counts(m) is not None]
    handles += [entry(f"{m}'s KV cache: R = {c} (dashed)", look.colour(m), linestyle=(0, (4, 3)))
                for m, c in caches]  # fmt: skip
    kinds = {r.n90_censoring if r.training == CONVERGED else "hollow" for r in shown}
    kinds |= {r.n90_censoring for r in shown}
    handles += [
        entry(label, **style) for k, (label, style) in CENSORING_MARKS.items() if k in kinds
    ]
    rows = -(-len(handles) // 3)
    short = len(handles) > 9 and max(len(h.get_label()) for h in handles[: 2 * rows]) <= 32
    fig.legend(handles=handles, loc="outside lower center", ncols=3 if short else 2, fontsize=8)


def capacity_axes(ax, runs: list[CapacityRun], threshold: float) -> None:
    """Log2 axes spanning the runs and their rank bounds, titled with the threshold's level."""
    xs = [r.floats for r in runs]
    ys = [r.n90 for r in runs if r.fitted] + [float(r.rank_bound) for r in runs if r.rank_bound]
    ax.set_xlim(min(xs) / 2**0.5, max(xs) * 2**0.5)
    ax.set_ylim(min(ys) / 2**0.75, max(ys) * 2**0.75)  # room for the arrows (ARROW)
    for axis, values, text in ((ax.xaxis, xs, count_label), (ax.yaxis, ys, lambda v: f"{v:g}")):
        axis.set_major_locator(ticker.FixedLocator(look.powers_of_two(min(values), max(values))))
        axis.set_minor_locator(ticker.NullLocator())
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _, text=text: text(v)))
    ax.grid(alpha=0.3)
    hybrid = "; a hybrid: its layers' mean" if any(HYBRID_JOIN in r.mixer for r in runs) else ""
    counted = f"the short conv's window not counted{hybrid}"
    ax.set_xlabel(f"the mixer's state per layer (floats; {counted})")
    load = next((r.load for r in runs if r.load), None)
    what = look.AXIS_TITLES.get(f"task.{load}", load or "load")
    ax.set_ylabel(f"{level_name(threshold)}: largest load at accuracy >= {threshold:g}\n({what})")


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
    octaves = math.log2(max(r.floats for r in kept) / min(r.floats for r in kept))
    width = min(8.0, 5.0 + 0.6 * octaves)  # two state sizes: no wide empty plane
    fig, ax = plt.subplots(figsize=(width, 5.0), layout="constrained")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for mixer, law in ((m, law) for m, law in laws.items() if lined(law)):
        low, high = law.floats.floats_range
        xs = [low * (high / low) ** (i / 50) for i in range(51)]
        ys = [law.floats(x) for x in xs]
        ax.plot(xs, ys, color=look.colour(mixer), linewidth=1.8, gid=f"fit:{mixer}")
    for run, x in zip(kept, spread([(r.floats, r.n90) for r in kept]), strict=True):
        draw_run(ax, run, x)
    bounds = draw_rank_bounds(ax, runs, mixers)
    capacity_axes(ax, runs, threshold)
    reasons = {m: no_fit_reason([r for r in runs if r.mixer == m]) for m in mixers if m not in laws}
    no_fit = no_fit_note(reasons)
    capacity_legend(fig, runs, laws, mixers, bounds, {} if no_fit else reasons)
    name, left_out = level_name(threshold), len(runs) - len(kept)
    what = f"{name} per run, no law fitted"
    if laws:
        what = f"{name} per restart, large: each width's best restart (its capacity); the law on "
        what += f"capacity {name} = a floats^b, b with its 90% interval (t on the readouts' "
        what += "effective degrees of freedom)"
    note = f"{left_out} training_limited run(s) (not above the floor at the judging load, or "
    note += "still rising below it): not drawn"
    look.titled(fig, "Capacity against state", [what, budget(rows), note * bool(left_out), no_fit])
    return fig
