"""Plain-text tables and CSV files for the report and the analysis scripts."""

import csv
from collections.abc import Sequence
from pathlib import Path


def format_cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def is_number(value: object) -> bool:
    """Numbers (and blanks) are right-aligned, text left-aligned."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def print_table(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """Print `rows` as an aligned text table (and return the text)."""
    if not rows:
        print("(no rows)")
        return "(no rows)"
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    cells = [[format_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [all(is_number(row.get(c)) for row in rows) for c in columns]

    def line(values: list[str]) -> str:
        padded = [
            v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(padded).rstrip()

    lines = [line(columns), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    text = "\n".join(lines)
    print(text)
    return text


def write_csv(rows: list[dict], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write `rows` to `path` as CSV (columns: the union of the rows' keys, in order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def save_plot(path: str | Path, panels: list[dict], title: str | None = None) -> Path:
    """Save line plots side by side as a PNG (matplotlib, Agg backend).

    Each panel is a dict: `series` {label: (xs, ys)} or {label: (xs, ys, plot_kwargs)} (None /
    NaN points are dropped; kwargs such as `linestyle` go to `Axes.plot`), optional `title`,
    `xlabel`, `ylabel`, `logx`, `logy` (default False), `hline` (a y value drawn dashed, e.g.
    a target or the limit 1). More than 10 series take their colours from tab20.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if len(panel["series"]) > 10:
            ax.set_prop_cycle(color=plt.cm.tab20.colors)
        for label, (xs, ys, *kwargs) in panel["series"].items():
            points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y == y]
            style = {"marker": "o", "markersize": 3, **(kwargs[0] if kwargs else {})}
            if points:
                ax.plot(*zip(*points, strict=True), label=label, **style)
        if panel.get("hline") is not None:
            ax.axhline(panel["hline"], color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log" if panel.get("logx") else "linear")
        ax.set_yscale("log" if panel.get("logy") else "linear")
        ax.set_title(panel.get("title", ""))
        ax.set_xlabel(panel.get("xlabel", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
