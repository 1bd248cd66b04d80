"""Line plots side by side in one PNG, for the studies' figures."""

from pathlib import Path


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
