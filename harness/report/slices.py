"""Figures of sliced accuracy over the points' DataFrame (`harness.report.frame.points`): the
needle's depth x length heatmap, and copy accuracy against string length (the
`test/acc_by/<slice>/<value>` metrics of each point)."""

from functools import partial

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.records.schema import OK
from harness.report import look
from harness.report.figures import in_panel, panels, sliced_figure
from harness.report.frame import baselines, prefixed, sort_key


def slice_values(point: pd.Series | dict, name: str) -> dict[int, float]:
    return {int(k): v for k, v in prefixed(point, f"test/acc_by/{name}/").items()}


def draw_cells(ax, ok: list[pd.Series], lengths: list):
    """Depth x length cells of the ok points, each with its accuracy written in; the image."""
    table = pd.DataFrame({p.seq_len: slice_values(p, "depth_bin") for p in ok})
    table = table.reindex(columns=lengths).sort_index().astype(float)
    image = ax.imshow(table.values, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    for (row, column), value in np.ndenumerate(table.values):
        text = "n/a" if np.isnan(value) else f"{value:.2f}".lstrip("0")
        shade = "black" if not np.isnan(value) and value > 0.6 else "white"
        ax.text(column, row, text, ha="center", va="center", fontsize=CELL_FONT, color=shade)
    ax.set_yticks(range(len(table)), [f"{d / 10:.1f}" for d in table.index])
    ax.set_ylabel(look.AXIS_TITLES["depth_bin"])
    return image


def needle_panel(ax, mine: list[pd.Series], title: str):
    """One model's panel: lengths as columns (`not converged` under a column whose run had
    not converged), the cells, or where it has no ok job why, per length; the image, or None."""
    lengths = sorted({p.seq_len for p in mine}, key=sort_key)
    ok = [p for p in mine if p.status == OK and slice_values(p, "depth_bin")]
    ax.set_title(title, fontsize=10)
    unfinished = {p.seq_len for p in mine if p.converged is False}
    labels = [f"{n}\nnot converged" if n in unfinished else str(n) for n in lengths]
    ax.set_xticks(range(len(lengths)), labels)
    ax.set_xlabel(look.AXIS_TITLES["task.seq_len"])
    if ok:
        return draw_cells(ax, ok, lengths)
    ordered = sorted(mine, key=lambda p: sort_key(p.seq_len))  # no ok job: why, per length
    reasons = "\n".join(f"T={p.seq_len}: {p.note or 'no depth slice'}" for p in ordered)
    ax.text(0.5, 0.5, f"no ok job\n{reasons}", ha="center", va="center", fontsize=8,
            transform=ax.transAxes)  # fmt: skip
    ax.set_xlim(-0.5, len(lengths) - 0.5)
    ax.set_yticks([])
    return None


def needle_heatmap(frame: pd.DataFrame, keys: list[str], subtitle: str = "") -> Figure | None:
    """Depth x length accuracy, one panel per model (and per value of any other varied
    parameter); a model with no ok job shows why instead of cells; a length whose run had
    not converged says so under its column (a dark column may be budget, not capacity)."""
    table = frame[frame["task"] == "needle"]
    if table.empty:
        return None
    needle = [p for _, p in table.iterrows()]
    others = [k for k in keys if k != "task.seq_len"]
    layout = [
        (model, values)
        for _, values in panels(table, others)
        for model in sorted({p.model for p in needle}, key=look.model_order)
    ]
    columns = len({p.seq_len for p in needle})
    rows = len({d for p in needle for d in slice_values(p, "depth_bin")})
    # cells large enough for 8 pt numbers at the page's size: ~0.75 x 0.3 inch each
    fig, axes = look.grid(
        len(layout), width=max(3.8, 0.75 * columns + 1.6), height=max(3.4, 0.3 * rows + 1.6)
    )
    images = []
    for ax, (model, values) in zip(axes, layout, strict=True):
        inside = table[in_panel(table, "needle", values) & (table["model"] == model)]
        mine = [p for _, p in inside.iterrows()]
        title = " · ".join(filter(None, [model, look.describe(values)]))
        images.append(needle_panel(ax, mine, title))
    drawn = [image for image in images if image is not None]
    if drawn:
        bar = fig.colorbar(drawn[-1], ax=axes, label="accuracy", shrink=0.8)
        mark_floors(bar, [p for p in needle if p.status == OK and slice_values(p, "depth_bin")])
    look.titled(fig, "Needle retrieval by depth and length", [subtitle])
    return fig


CELL_FONT = 8
"""Points: the heatmap's numbers stay readable where the page shows the figure at its size."""


def mark_floors(bar, points: list[pd.Series]) -> None:
    """A line across the colour scale at each binding-free floor (each point's strongest
    baseline, two decimals), labelled `floor`: cells at or below it retrieve nothing a
    binding-free strategy could not."""
    for value in sorted({round(max(baselines(p).values()), 2) for p in points if baselines(p)}):
        bar.ax.axhline(value, color="red", linewidth=2, gid=f"floor:{value:g}")
        bar.ax.text(-0.1, value, f"floor {value:.2f}", color="red", fontsize=8, ha="right",
                    va="center", transform=bar.ax.get_yaxis_transform())  # fmt: skip


def copy_figure(frame: pd.DataFrame, keys: list[str], subtitle: str = "") -> Figure | None:
    """Copy accuracy against the example's string length, one line per model; a failed or
    diverged job has no string lengths and is listed under the figure."""
    copy = frame[frame["task"] == "copy"]
    lengths = partial(slice_values, name="copy_len")
    if not any(len(lengths(p)) > 1 for _, p in copy.iterrows()):
        return None
    title = "Copying: accuracy against string length"
    return sliced_figure(copy, keys, "copy_len", lengths, title, subtitle)
