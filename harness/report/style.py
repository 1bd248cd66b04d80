"""How the report's figures look: one fixed colour and marker per model in every figure,
readable log2 axes, axis titles with units, panels laid out in a grid."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from harness.config.short_names import in_figure as short  # noqa: E402
from models import MIXERS  # noqa: E402
from models.registry import REFERENCE  # noqa: E402

KNOWN_MODELS = (REFERENCE, *(name for name in MIXERS.names() if name != REFERENCE))
"""The registry's mixers in a fixed order, softmax (the reference) first, then by name: the
order of legends, whatever the sweep holds."""
STYLE_ORDER = (
    *("softmax", "based", "deltanet", "favor", "gated_deltanet", "gla", "identity", "linear"),
    *("mamba2", "retnet", "rff", "rwkv", "sliding_window", "gated_deltaproduct", "kda", "rwkv7"),
    *("log_linear_mamba2", "gdn2", "forgetting_attention"),
)
"""The order in which mixers were given their colour and marker: a mixer registered later is
appended (here, else after these by name), so that no mixer's style moves when one is added."""
STYLED = (*STYLE_ORDER, *(name for name in KNOWN_MODELS if name not in STYLE_ORDER))
MARKERS = "osDpX*^Phd>v<8HspXh"
"""One marker per registered mixer in `STYLED` order: matplotlib's 15 filled markers, then
some of them again for mixers rarely drawn beside the first to have them (rwkv7 shares based's
square, log_linear_mamba2 favor's pentagon, gdn2 gated_deltanet's cross, forgetting_attention
mamba2's hexagon; their colours differ). Every marker has a face, so
that a hollow one can mark a run that had not converged. The four triangles go to the mixers
least often in a capacity law (identity, rff, rwkv, sliding_window), since the capacity figure
draws its censored readouts as arrows with triangle heads."""
GREYS = (plt.cm.tab10.colors[7],)
LATER = (
    *plt.cm.tab20b.colors[16:7:-4],
    (0.0, 0.5, 0.5),
    plt.cm.tab20b.colors[0],
    plt.cm.tab20b.colors[4],
    (0.78, 0.08, 0.52),
    (0.5, 0.0, 0.0),
    (0.6, 0.4, 0.8),
)
PALETTE = (*(c for c in plt.cm.tab10.colors if c not in GREYS), *LATER)
"""The registered mixers' colours (softmax is black): tab10, its grey left out (grey is the
binding-free baselines'), then dark colours unlike tab10's for the mixers styled later
(`LATER`, in `STYLED` order from rff: tab20b's dark purple, red and ochre; teal, navy, olive,
violet-red, maroon, lavender), so that the gated family's new members are told apart on one
figure."""
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
ACCURACY = "test accuracy (scored tokens)"
BASELINE_STYLES = {"chance": ":", "in_context": "--", "elimination": "-."}

VARIANT_PALETTE = (
    *plt.cm.Dark2.colors[:7],
    *(c for i, c in enumerate(plt.cm.Set1.colors[:8]) if i != 5),
    *plt.cm.tab20b.colors[::4],
)
"""Colours for names outside the registry: Dark2's strong colours, then Set1's and tab20b's
darkest, greys and yellow left out (grey is the baselines'): 19 distinct colours."""
VARIANT_COLOURS: dict[str, Any] = {}
"""Colours handed to names outside the registry (a model's variants, "linear elu"; a hybrid,
"gdn+softmax") in the order they are first drawn, from `VARIANT_PALETTE`."""


def colour(model: str) -> Any:
    """The model's colour: softmax black, the others `PALETTE` in `STYLED` order, variants and
    unknown names Dark2 in order of appearance."""
    if model == REFERENCE:
        return "black"
    if model in KNOWN_MODELS:
        return PALETTE[(STYLED.index(model) - 1) % len(PALETTE)]
    return in_order_of_appearance(model, VARIANT_COLOURS, VARIANT_PALETTE)


def in_order_of_appearance(name: str, handed: dict, choices: Sequence) -> Any:
    """What `handed` gave `name`, else the next of `choices` (cycling), handed to it now."""
    if name not in handed:
        handed[name] = choices[len(handed) % len(choices)]
    return handed[name]


def model_order(model: str) -> tuple:
    """Legends list models in the registry's fixed order (softmax first), unknown ones last."""
    return (KNOWN_MODELS.index(model) if model in KNOWN_MODELS else len(KNOWN_MODELS), model)


TRIANGLES = "^>v<"
"""The markers a capacity figure's censoring arrows resemble."""
VARIANT_MARKERS = "".join(dict.fromkeys(m for m in MARKERS if m not in TRIANGLES))
"""The markers of names outside the registry (a hybrid, a model's variant): no triangle, since
any of them may sit in a capacity figure."""


VARIANT_MARKER: dict[str, str] = {}
"""The marker each name outside the registry got, in order of appearance."""


def marker(model: str) -> str:
    """The model's marker: its own (`MARKERS`) for a registered mixer; for any other name the
    next of `VARIANT_MARKERS` in order of appearance (as its colour), so that the variants of
    one figure differ in marker as well as colour."""
    if model in KNOWN_MODELS:
        return MARKERS[STYLED.index(model) % len(MARKERS)]
    return in_order_of_appearance(model, VARIANT_MARKER, VARIANT_MARKERS)


def describe(params: dict[str, Any]) -> str:
    """`kv pairs=8, d_model=64` (a parameter the model does not have, None, left out)."""
    return ", ".join(f"{short(k)}={v}" for k, v in params.items() if v is not None)


def grid(count: int, width: float = 4.6, height: float = 3.6) -> tuple[plt.Figure, list]:
    """A figure with `count` panels, at most three per row (constrained layout: no clipping)."""
    columns = min(count, 3)
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(width * columns + 2.2, height * rows + 0.9),
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def powers_of_two(low: float, high: float, most: int = 8) -> list[float]:
    """Powers of two spanning [low, high], every k-th so that at most `most` remain."""
    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    step = max(1, math.ceil((last - first + 1) / most))
    return [2.0**e for e in range(first, last + 1, step)]


def log2_axis(ax, values: Sequence[float], kind: str) -> None:
    """A log2 x axis with labelled major ticks only: at the values themselves for lengths (up
    to 10 of them), else at powers of two; counts of floats labelled `4,096`."""
    values = sorted({float(v) for v in values if v and v > 0})
    if not values:
        return
    ax.set_xscale("log", base=2)
    if kind == "floats" or len(values) > 10:
        ticks = powers_of_two(values[0], values[-1])
    else:
        ticks = values
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    if kind == "floats":
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    else:
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    margin = 2**0.3
    low, high = min(values[0], ticks[0]), max(values[-1], ticks[-1])
    ax.set_xlim(low / margin, high * margin)


def accuracy_axis(ax) -> None:
    ax.set_ylim(-0.06, 1.04)
    ax.set_ylabel(ACCURACY)
    ax.yaxis.set_major_locator(ticker.MultipleLocator(0.2))
    ax.grid(alpha=0.3)


def save(fig: plt.Figure, path: Path) -> Path:
    """Write `fig` to `path` (PNG, 110 dpi, trimmed), close it, return the path."""
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def legend_entry(
    label: str,
    color: Any = "grey",
    marker: str | None = None,
    linestyle: Any = "none",
    hollow: bool = False,
    **style: Any,
) -> Line2D:
    """One legend entry: a line and/or a marker (`hollow`: white inside, the one meaning of
    a hollow marker in every figure: the run had not converged)."""
    if hollow:
        style["markerfacecolor"] = "white"
    return Line2D([], [], color=color, marker=marker, linestyle=linestyle, label=label, **style)


HOLLOW = "hollow: not converged (still rising or at the floor when the budget ran out)"
"""What a hollow marker means, in every figure."""
