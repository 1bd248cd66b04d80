"""How every figure of the report looks: each mixer's colour and marker from its place in the
registry (`models.MIXERS`, sorted: a mixer registered later gets the next colour without a
hand-kept table), softmax (the reference) a black line, the binding-free baselines grey lines
(coinciding ones drawn once), log2 axes, axis titles with units, panels in a grid, one legend
entry per mark, a short title naming the question with the budget in a small caption line
under the figure, and the file formats a paper takes (`save`)."""

import io
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from harness.config.short_names import in_figure as short  # noqa: E402
from harness.report import DPI  # noqa: E402
from models import MIXERS  # noqa: E402
from models.registry import REFERENCE  # noqa: E402

KNOWN_MODELS = (REFERENCE, *(name for name in MIXERS.names() if name != REFERENCE))
"""The registry's mixers, softmax first, then by name: the order of legends and of styles."""
GREY = plt.cm.tab10.colors[7]
PALETTE = (
    *(c for c in plt.cm.tab10.colors if c != GREY),
    *plt.cm.tab20b.colors[::4],
    *(c for i, c in enumerate(plt.cm.Dark2.colors) if i not in (5, 7)),
)
"""The first 20 mixers' colours by their place in `KNOWN_MODELS` (softmax's black aside): tab10
without its grey (grey is the baselines'), then tab20b's and Dark2's dark colours."""


def mixer_colour(at: int) -> Any:
    """The colour of the mixer at `at` in `KNOWN_MODELS` (softmax aside), however many are
    registered: the palette's, then hues evenly spaced round the colour wheel for the mixers
    past its 20."""
    if at < len(PALETTE):
        return PALETTE[at]
    extra = len(KNOWN_MODELS) - 1 - len(PALETTE)
    return plt.cm.hsv((at - len(PALETTE) + 0.5) / extra)[:3]


MARKERS = "osDp*hHXdP8"
"""Filled markers (a hollow one marks a run that had not converged), no triangles: the
capacity figure's censored readouts are arrows with triangle heads. The circle is softmax's;
the other mixers take the rest in turn, the octagon (nearest the circle) last."""
VARIANT_PALETTE = (*plt.cm.Dark2.colors[:7], *plt.cm.Set1.colors[:5], *plt.cm.tab20b.colors[::4])
"""Colours of names outside the registry (a variant, `linear elu`; a hybrid, `gdn+softmax`), in
the order they are first drawn: one figure's variants differ."""
HANDED: dict[str, tuple[Any, str]] = {}
BASELINE_STYLES = {"chance": ":", "in_context": "--", "elimination": "-."}
PRECISION = 0.005
"""Two baselines closer than this everywhere print alike and share one line."""
LINE = dict(linewidth=1.6, markersize=6, zorder=3)
REFERENCE_LINE = dict(linewidth=2.2, markersize=7, zorder=2.5)
"""Softmax, the reference: black, a little wider, under the other mixers' lines."""
SEED_POINTS = 3
"""Up to this many seeds each is drawn as a point; beyond, error bars (one std)."""
HOLLOW = "hollow: not converged (still rising, or not above the floor, when the budget ran out)"
AXIS_TITLES = {
    "task.seq_len": "sequence length (tokens)",
    "task.num_kv_pairs": "key-value pairs per example",
    "task.num_distractors": "distractor pairs per example",
    "task.num_tokens": "tokens to copy",
    "task.copy_len": "string length (tokens)",
    "state_floats": "state per layer (floats; softmax: its KV cache; conv windows apart)",
    "test_length": "test sequence length (tokens)",
    "copy_len": "string length (tokens)",
    "depth_bin": "needle depth (fraction of the context)",
}


def style(model: str) -> tuple[Any, str]:
    """(colour, marker): softmax black and round; a registered mixer's by its place in
    `KNOWN_MODELS`; any other name the next unused pair, in the order names are first drawn."""
    if model == REFERENCE:
        return "black", MARKERS[0]
    if model in KNOWN_MODELS:
        at = KNOWN_MODELS.index(model) - 1
        return mixer_colour(at), MARKERS[1 + at % (len(MARKERS) - 1)]
    if model not in HANDED:
        at = len(HANDED)
        shape = MARKERS[1 + at % (len(MARKERS) - 1)]
        HANDED[model] = (VARIANT_PALETTE[at % len(VARIANT_PALETTE)], shape)
    return HANDED[model]


def colour(model: str) -> Any:
    return style(model)[0]


def marker(model: str) -> str:
    return style(model)[1]


def model_order(model: str) -> tuple:
    """Legends list models in the registry's order (softmax first), other names last."""
    return (KNOWN_MODELS.index(model) if model in KNOWN_MODELS else len(KNOWN_MODELS), model)


def describe(params: dict[str, Any]) -> str:
    """`kv pairs=8, d_model=64` (a parameter the model does not have, None, left out)."""
    return ", ".join(f"{short(k)}={v}" for k, v in params.items() if v is not None)


def coinciding(curves: dict[str, dict]) -> dict[str, str]:
    """{drawn baseline: its legend label}: each baseline equal (within `PRECISION` at the same
    x values) to one drawn before it (chance, in_context, elimination, then others) joins that
    one's label (`in_context = elimination`, equal in Zoology's MQAR layout)."""
    order = list(BASELINE_STYLES)
    drawn: dict[str, str] = {}
    for name in sorted(curves, key=lambda n: (order.index(n) if n in order else len(order), n)):
        a = curves[name]
        same = [o for o in drawn if curves[o].keys() == a.keys()]
        same = [o for o in same if all(abs(curves[o][n] - a[n]) < PRECISION for n in a)]
        if same:
            drawn[same[0]] += f" = {name}"
        else:
            drawn[name] = name
    return drawn


def grid(count: int, width: float = 4.6, height: float = 3.6) -> tuple[plt.Figure, list]:
    """A figure with `count` panels, at most three per row (constrained layout: no clipping)."""
    columns = min(count, 3)
    rows = math.ceil(count / columns)
    size = (width * columns + 2.2, height * rows + 0.9)
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, layout="constrained")
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:count]


def powers_of_two(low: float, high: float, most: int = 8) -> list[float]:
    """Powers of two spanning [low, high], every k-th so that at most `most` remain."""
    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    step = max(1, math.ceil((last - first + 1) / most))
    return [2.0**e for e in range(first, last + 1, step)]


def log2_axis(ax, values: Sequence[float], kind: str) -> None:
    """A log2 x axis, labelled at the values themselves for lengths (up to 10 of them), else at
    powers of two; counts of floats labelled `4,096`."""
    values = sorted({float(v) for v in values if v and v > 0})
    if not values:
        return
    ax.set_xscale("log", base=2)
    many = kind == "floats" or len(values) > 10
    ticks = powers_of_two(values[0], values[-1]) if many else values
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    text = "{:,.0f}" if kind == "floats" else "{:g}"
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: text.format(v)))
    low, high = min(values[0], ticks[0]), max(values[-1], ticks[-1])
    ax.set_xlim(low / 2**0.3, high * 2**0.3)


def accuracy_axis(ax) -> None:
    ax.set_ylim(-0.06, 1.04)
    ax.set_ylabel("test accuracy (scored tokens)")
    ax.yaxis.set_major_locator(ticker.MultipleLocator(0.2))
    ax.grid(alpha=0.3)


CAPTION = "caption"
"""The gid of a figure's caption line (`titled`): the page repeats its text."""


def titled(fig: plt.Figure, title: str, details: Sequence[str] = ()) -> None:
    """`title` (the question, short) over the figure; `details` (the budget, what was left
    out) in a small caption line under it, wrapped between phrases (`; `), never inside one."""
    fig.suptitle(title, fontsize=12)
    width, lines = int(fig.get_figwidth() * 15), []
    for phrase in (p for d in details if d for p in d.split("; ")):
        if lines and len(f"{lines[-1]}; {phrase}") <= width:
            lines[-1] = f"{lines[-1]}; {phrase}"
        else:
            lines[-1:] = [f"{lines[-1]};"] if lines else []
            lines += textwrap.wrap(phrase, width)
    if lines:
        fig.text(0.5, 0, "\n".join(lines), ha="center", va="top", fontsize=8, gid=CAPTION)


def caption_of(fig: plt.Figure) -> str:
    """The text of the figure's caption line (`titled`), on one line; empty without one."""
    texts = [t.get_text() for t in fig.texts if t.get_gid() == CAPTION]
    return " ".join(" ".join(texts).split())


def save(
    fig: plt.Figure, stem: Path, formats: Sequence[str] = ("png",), dpi: int = DPI
) -> tuple[list[Path], bytes]:
    """Write `fig` as `stem.<format>` for each of `formats` (at `dpi` for the raster; trimmed to
    what is drawn, the caption line included), close it; the paths, and the PNG (the page's
    image, drawn in memory where PNG is not among `formats`)."""
    paths = [stem.with_suffix(f".{kind}") for kind in formats]
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.draw_without_rendering()  # laid out once; trimming moves nothing, legends included:
    fig.set_layout_engine("none")  # a legend pinned to where the layout put it
    for legend in fig.legends:
        box = legend.get_window_extent().transformed(fig.transFigure.inverted())
        legend.set_bbox_to_anchor(box, transform=fig.transFigure)
        legend.set_loc("center")
    for path in paths:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    png = stem.with_suffix(".png")
    if png not in paths:
        fig.savefig(buffer := io.BytesIO(), format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return paths, png.read_bytes() if png in paths else buffer.getvalue()


def legend_entry(
    label: str,
    color: Any = "grey",
    marker: str | None = None,
    linestyle: Any = "none",
    hollow: bool = False,
    **more: Any,
) -> Line2D:
    """One legend entry: a line and/or a marker (`hollow`: white inside, the one meaning of a
    hollow marker in every figure: the run had not converged)."""
    if hollow:
        more["markerfacecolor"] = "white"
    return Line2D([], [], color=color, marker=marker, linestyle=linestyle, label=label, **more)


def model_entry(model: str) -> Line2D:
    """A model's legend entry in its look (softmax's line black and a little wider)."""
    look = {k: v for k, v in line_look(model).items() if k != "zorder"}
    return legend_entry(model, colour(model), marker(model), "-", **look)


def line_look(model: str) -> dict[str, Any]:
    return REFERENCE_LINE if model == REFERENCE else LINE
