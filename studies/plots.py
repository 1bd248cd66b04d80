"""Line plots side by side in one PNG, for the studies' figures."""

from pathlib import Path


def save_plot(path: str | Path, panels: list[dict], title: str | None = None) -> Path:
    """Save line plots side by side as a PNG (matplotlib, Agg backend).

    Each panel is a dict: `series` {label: (xs, ys)} or {label: (xs, ys, plot_kwargs)} (None /
    NaN points are dropped; kwargs such as `linestyle` go to `Axes.plot`), optional `title`,
    `xlabel`, `ylabel`, `logx`, `logy` (default False), `hline` (a y value drawn dashed, e.g.
    a target or the limit 1), `marks` {label: [(x, y), ...]} (points drawn as black bars, e.g.
    targets). More than 10 series take their colours from tab20. A log axis spanning less than
    ~1.5 decades (ratios, a few lengths) is labelled in plain numbers at 1, 2, 3, 5 x 10^k.
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
        for label, points in panel.get("marks", {}).items():
            if points:
                style = {"color": "black", "marker": "_", "markersize": 16, "markeredgewidth": 2}
                ax.plot(*zip(*points, strict=True), label=label, linestyle="none", **style)
        if panel.get("hline") is not None:
            ax.axhline(panel["hline"], color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log" if panel.get("logx") else "linear")
        ax.set_yscale("log" if panel.get("logy") else "linear")
        if panel.get("logx"):
            plain_log_ticks(ax.xaxis, *ax.get_xlim())
        if panel.get("logy"):
            plain_log_ticks(ax.yaxis, *ax.get_ylim())
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


def plain_log_ticks(axis, low: float, high: float) -> None:
    """Label a log axis spanning less than ~1.5 decades in plain numbers (0.5, 1, 2, 3, 5)
    instead of powers of ten; wider axes keep matplotlib's labels."""
    from matplotlib.ticker import FuncFormatter

    if not 0 < low < high < 30 * low:
        return

    def label(value: float, _position: int) -> str:
        leading = f"{value:.0e}"[0]
        return f"{value:g}" if leading in "1235" else ""

    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(FuncFormatter(label))
