"""The memory probe's heatmap (`studies.memory_probe`): n90 over key dim x value dim, one
panel per rule and key kind."""

from pathlib import Path

import numpy as np


def save_heatmaps(path: Path, rows: list[dict], V: int, readout: str) -> Path:
    """n90 over D (rows) x d_v (columns): one panel per rule, one row of panels per key
    kind, at vocabulary V, for one read-out; the number in each cell (">=" when censored)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    sel = [r for r in rows if r["V"] == V and r["readout"] == readout]
    kinds = list(dict.fromkeys(r["keys"] for r in sel))
    rules = list(dict.fromkeys(r["rule"] for r in sel))
    Ds, dvs = sorted({r["D"] for r in sel}), sorted({r["d_v"] for r in sel})
    top = max(max(r["n90"] for r in sel), 2)
    norm = LogNorm(vmin=1, vmax=top)
    fig, axes = plt.subplots(
        len(kinds), len(rules), figsize=(2.7 * len(rules) + 1, 2.5 * len(kinds) + 0.8),
        squeeze=False, constrained_layout=True,
    )  # fmt: skip
    for i, keys in enumerate(kinds):
        for j, rule in enumerate(rules):
            ax = axes[i][j]
            grid = np.full((len(Ds), len(dvs)), np.nan)
            for r in sel:
                if (r["keys"], r["rule"]) == (keys, rule):
                    grid[Ds.index(r["D"]), dvs.index(r["d_v"])] = max(r["n90"], 1)
                    text = (">=" if r["censored"] else "") + str(r["n90"])
                    dark = r["n90"] > top**0.5
                    x, y = dvs.index(r["d_v"]), Ds.index(r["D"])
                    color = "black" if dark else "white"
                    ax.text(x, y, text, ha="center", va="center", fontsize=10, color=color)
            image = ax.imshow(grid, origin="lower", cmap="viridis", norm=norm, aspect="auto")
            ax.set_xticks(range(len(dvs)), [str(d) for d in dvs])
            ax.set_yticks(range(len(Ds)), [str(d) for d in Ds])
            ax.set_title(f"{rule}, {keys} keys", fontsize=10)
            if i == len(kinds) - 1:
                ax.set_xlabel("value dim d_v")
            if j == 0:
                ax.set_ylabel("key dim D")
    bar = fig.colorbar(image, ax=axes, shrink=0.8, label="n90 (bindings per head)")
    ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256) if t <= top]
    bar.set_ticks(ticks, labels=[str(t) for t in ticks])
    bar.minorticks_off()
    fig.suptitle(f"memory probe: n90 per head, {readout} read-out, V = {V} values")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
