"""Rank or floats: a trained key dim x value dim grid beside the memory probe.
`python -m studies.state_grid <sweep> --out <dir>`.

Reads a capacity-protocol sweep over `conf/state_size/<family>_{d,k}<D>_v<d_v>` (one layer, 2
heads), every readout read anew at the sweep's threshold (`harness.report.reread`) and kept or
left out by the law's weak-run rule (`harness.report.capacity_runs`). Per family it fits the
three models of `studies.grid_law` (rank, floats, both exponents; docs/background.md,
"Rank or floats: the state grid") and sets each cell's trained n90 beside the memory probe's
n90 per head at the same D and d_v (`studies.memory_probe`, V = 128 values, argmax read-out;
the sum rule for linear attention, the delta rule for DeltaNet). Writes `runs.csv` (one line
per run), `cells.csv`, `models.csv` (the last two also as Markdown in `tables.md`) and
`state_grid.png` (trained n90 and the probe's, same axes and colours), and prints the
tables."""

import argparse
import json
import math
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
import numpy as np

from harness.readouts.capacity import FLOOR_AT_JUDGING_LOAD
from harness.readouts.censored_law import INTERVAL, LEFT, RIGHT
from harness.records.schema import OK
from harness.records.sweep import load_sweep
from harness.report.capacity_runs import CapacityRun, run_of
from harness.report.frame import clean_rows
from harness.report.plain_table import print_table, write_csv
from harness.report.reread import reread, threshold_of
from studies.grid_law import GridLaws, GridRun, fit_grid_laws

PROBE = Path(__file__).resolve().parent.parent / "docs/results/memory_probe/memory_probe.json"
PROBE_RULE = {"linear": "sum", "deltanet": "delta", "gated_deltanet": "gated_delta"}
"""Each family's update rule in the probe."""
PROBE_VALUES = 128
MODELS = ("rank", "floats", "both")
KEY_DIM_KEYS = ("model.head_k_dim", "model.feature_dim", "model.d_state")


def key_dim_of(row: dict) -> int | None:
    """The key dim per head (`head_k_dim`, linear attention's `feature_dim`, `d_state`)."""
    for key in KEY_DIM_KEYS:
        value = row.get(key)
        if isinstance(value, int | float) and not math.isnan(value):
            return int(value)
    return None


class Found(NamedTuple):
    """One ok run of the grid: its cell, its readouts and its training minutes."""

    key_dim: int
    value_dim: int
    run: CapacityRun
    minutes: float


def runs_of(sweep: Path) -> list[Found]:
    """Every ok run with a readout and a value dim."""
    rows = clean_rows(load_sweep(sweep))
    rows = reread(rows, threshold_of(rows))
    rates: dict[str, set] = defaultdict(set)
    for row in rows:
        rates[row["model"]].add(row.get("optim.lr"))
    several = {family: sorted(r) for family, r in rates.items() if len(r) > 1}
    if several:
        raise SystemExit(
            f"error: {sweep} holds several learning rates for a family ({several}): the grid "
            "reads one rate per family; give it the records of one"
        )
    out = []
    for row in rows:
        value_dim = row.get("model.head_v_dim")
        if row.get("status") != OK or not isinstance(value_dim, int | float):
            continue
        run = run_of(row["model"], row)
        key_dim = key_dim_of(row)
        if run is not None and key_dim is not None and not math.isnan(value_dim):
            minutes = (row.get("train.wall_s") or math.nan) / 60
            out.append(Found(key_dim, int(value_dim), run, minutes))
    return out


def n90_shown(run: CapacityRun) -> str:
    """A run's n90 as read: `5.2`, `< 2`, `>= 9.1`, `>= 9.1 rising`, `[48, 64)` (between two
    tested loads near the ceiling), `floor`, `rising < 2`."""
    if not run.fitted:
        return "floor" if run.why == FLOOR_AT_JUDGING_LOAD else "rising < 2"
    if run.n90_censoring == LEFT:
        return f"< {run.n90:g}"
    if run.n90_censoring == RIGHT:
        return f">= {run.n90:.3g}" + (" rising" if run.training == "still_rising" else "")
    if run.n90_censoring == INTERVAL:
        return f"[{run.n90_low:g}, {run.n90_high:g})"
    return f"{run.n90:.3g}"


def grid_run(key_dim: int, value_dim: int, run: CapacityRun) -> GridRun | None:
    """The run as the grid models' observation on the rank bound, its cell `DxV`."""
    observation = run.observation("n90", "rank_bound")
    if observation is None:
        return None
    cell = replace(observation, cell=f"{key_dim}x{value_dim}")
    return GridRun(cell, float(value_dim), run.floats)


def probe_n90(rows: list[dict], rule: str | None, keys: str, key_dim: int, value_dim: int):
    """The probe's n90 per head (`>=` when censored) at one cell, or None."""
    for r in rows:
        if (r["rule"], r["keys"], r["readout"], r["D"], r["d_v"], r["V"]) == (
            rule, keys, "argmax", key_dim, value_dim, PROBE_VALUES,
        ):  # fmt: skip
            return r
    return None


def centre(runs: list[CapacityRun]) -> float | None:
    """The geometric mean of the cell's read (exact) n90, or None."""
    read = [r.n90 for r in runs if r.fitted and r.n90_censoring is None]
    return math.exp(sum(map(math.log, read)) / len(read)) if read else None


def median_reading(runs: list[CapacityRun]) -> tuple[str, float]:
    """The middle seed's n90 as (mark, value): `<` below the judging load (left-censored, at
    the floor, or rising below it), `>=` a lower bound (an interval's low end), `` a reading;
    seeds ordered by value."""

    def reading(run: CapacityRun) -> tuple[str, float]:
        if not run.fitted or run.n90_censoring == LEFT:
            return "<", float(run.n90 or 2.0) if run.fitted else 2.0
        if run.n90_censoring == INTERVAL:
            return ">=", float(run.n90_low)
        return (">=" if run.n90_censoring == RIGHT else ""), float(run.n90)

    ordered = sorted((reading(r) for r in runs), key=lambda mv: (mv[1], mv[0] != "<"))
    return ordered[(len(ordered) - 1) // 2]


def cell_rows(found: list[Found], probe: list[dict]) -> list[dict]:
    """One line per (family, D, d_v): the seeds' n90, their read mean, the rank bound, the
    floats, the probe's n90 per head with random and orthogonal keys, and the middle seed's
    n90 over the probe's random-key n90 (`<` or `>=` where the seed's is a bound)."""
    cells: dict[tuple, list[Found]] = defaultdict(list)
    for one in found:
        cells[(one.run.mixer, one.key_dim, one.value_dim)].append(one)
    out = []
    for (family, key_dim, value_dim), members in sorted(cells.items()):
        members.sort(key=lambda f: f.run.seed if f.run.seed is not None else -1)
        runs = [f.run for f in members]
        minutes = [f.minutes for f in members if not math.isnan(f.minutes)]
        mean, (middle, value) = centre(runs), median_reading(runs)
        line = {
            "family": family,
            "D": key_dim,
            "d_v": value_dim,
            "R": f"{runs[0].rank_bound:g}",
            "floats": f"{runs[0].floats:g}",
            "n90 by seed": ", ".join(n90_shown(r) for r in runs),
            "read mean": f"{mean:.3g}" if mean else "",
            "middle seed": f"< {value:g}" if middle == "<" else f"{middle}{value:.3g}",
            "train min": f"{min(minutes):.1f}-{max(minutes):.1f}" if minutes else "",
        }
        probed = {
            keys: probe_n90(probe, PROBE_RULE.get(family), keys, key_dim, value_dim)
            for keys in ("random", "orthogonal")
        }
        for keys, row in probed.items():
            mark = ">=" if row and row["censored"] else ""
            line[f"probe {keys}"] = f"{mark}{row['n90']}" if row else ""
        row = probed["random"]
        if row is not None:
            if row["censored"] and middle == ">=":  # both lower bounds: no ratio
                middle, value = "?", math.nan
            line["middle seed / probe random"] = f"{middle}{value / row['n90']:.2g}x"
        out.append(line)
    return out


def model_rows(laws: dict[str, GridLaws]) -> list[dict]:
    """One line per family: each model's AIC, the chosen one, the value exponent with its
    interval and drop-one-cell range, the key exponent, the likelihood ratio's p."""
    out = []
    for family, law in sorted(laws.items()):
        both = law.both
        spread = law.b_range
        close = law.close()
        fitted = " and ".join(law.aics) or "none"
        chosen = law.chosen or f"no choice: {fitted} identified"
        if close:
            chosen += f" ({' and '.join(close)} within 2)"
        line = {"family": family, "chosen (AIC)": chosen}
        aics = law.aics
        line.update({f"AIC {m}": f"{aics[m]:.1f}" if m in aics else "" for m in MODELS})
        line["b (value dim) [90%]"] = both.shown() if both else "not identified"
        line["b without one cell"] = f"{spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
        line["a (rank)"] = f"{both.a:.2f}" if both else ""
        line["p (b = 0)"] = f"{law.p_value:.2g}" if law.p_value is not None else ""
        line["runs fitted"] = str(both.n) if both else ""
        if both:
            lack = both.lack_of_fit
            line["lack of fit"] = (
                f"F = {lack.f:.2g}, p = {lack.p:.2g}"
                if lack
                else "not testable (at most 3 cells read, or no cell read twice)"
            )
        out.append(line)
    return out


def panel(ax, grid: np.ndarray, texts: dict, axes: tuple[list, list], title: str, norm) -> Any:
    """One heatmap over D (rows) x d_v (columns): `grid` the colours (NaN grey), `texts` the
    words written in each cell ({(row, column): text})."""
    key_dims, value_dims = axes
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
    image = ax.imshow(grid, origin="lower", cmap=cmap, norm=norm, aspect="auto")
    for (y, x), text in texts.items():
        ax.text(x, y, text, ha="center", va="center", fontsize=7.5, color="black",
                bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0})  # fmt: skip
    ax.set_xticks(range(len(value_dims)), [str(d) for d in value_dims])
    ax.set_yticks(range(len(key_dims)), [str(d) for d in key_dims])
    ax.set_xlabel("value dim per head d_v")
    ax.set_ylabel("key dim per head D")
    ax.set_title(title, fontsize=9.5)
    return image


def draw_grid(cells: list[dict], probe: list[dict], path: Path) -> Path:
    """Per family: trained n90 (colour: the middle seed's, hatched where it is a lower bound,
    grey where it is below the judging load; every seed's reading written in the cell) and the
    probe's random-key n90 per head, over D x d_v on one colour scale."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    families = list(dict.fromkeys(c["family"] for c in cells))
    axes = (sorted({c["D"] for c in cells}), sorted({c["d_v"] for c in cells}))
    shape = (len(axes[0]), len(axes[1]))
    norm = LogNorm(vmin=1, vmax=64)
    fig, grid_axes = plt.subplots(
        len(families), 2, figsize=(11, 3.6 * len(families) + 0.6), squeeze=False,
        constrained_layout=True,
    )  # fmt: skip
    for i, family in enumerate(families):
        trained, bounds = np.full(shape, np.nan), []
        texts = {(y, x): "not run" for y in range(shape[0]) for x in range(shape[1])}
        for c in (c for c in cells if c["family"] == family):
            at = (axes[0].index(c["D"]), axes[1].index(c["d_v"]))
            middle = c["middle seed"]
            if not middle.startswith("<"):
                trained[at] = float(middle.lstrip(">="))
            if middle.startswith(">="):
                bounds.append(at)
            texts[at] = "\n".join(re.split(r", (?![^\[]*\))", c["n90 by seed"]))
        title = f"{family}: trained n90, 2 heads (colour: the middle seed)"
        image = panel(grid_axes[i][0], trained, texts, axes, title, norm)
        for y, x in bounds:  # a lower bound (or an interval's low end): hatched
            box = Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="//", linewidth=0)
            grid_axes[i][0].add_patch(box)
        rule, probed, probe_texts = PROBE_RULE.get(family), np.full(shape, np.nan), {}
        for y, key_dim in enumerate(axes[0]):
            for x, value_dim in enumerate(axes[1]):
                row = probe_n90(probe, rule, "random", key_dim, value_dim)
                if row is not None:
                    probed[y, x] = row["n90"]
                    probe_texts[(y, x)] = (">=" if row["censored"] else "") + str(row["n90"])
        title = f"memory probe, {rule} rule, random keys: n90 per head, no training"
        panel(grid_axes[i][1], probed, probe_texts, axes, title, norm)
    bar = fig.colorbar(
        image,
        ax=grid_axes,
        shrink=0.7,
        label="n90 (hatched: a lower bound, or [low, high) its low end; grey: below 2 pairs, "
        "at the floor, or not run)",
    )
    ticks = [1, 2, 4, 8, 16, 32, 64]
    bar.set_ticks(ticks, labels=[str(t) for t in ticks])
    bar.minorticks_off()
    fig.suptitle("Rank or floats: trained n90 beside the memory probe, same axes and colours")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(rows: list[dict]) -> str:
    """`rows` as a Markdown table (the page's tables)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, GridLaws]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep", type=Path, help="a sweep folder, or a folder of its records")
    parser.add_argument("--out", type=Path, help="where to write (default <sweep>/state_grid)")
    parser.add_argument("--probe", type=Path, default=PROBE, help="the probe's JSON rows")
    parser.add_argument(
        "--value-dims", type=int, nargs="+", help="keep only these value dims (default: all)"
    )
    args = parser.parse_args(argv)
    out = args.out or args.sweep / "state_grid"
    found = [f for f in runs_of(args.sweep) if f.value_dim in (args.value_dims or [f.value_dim])]
    if not found:
        raise SystemExit(f"error: no ok run with a value dim (model.head_v_dim) in {args.sweep}")
    probe = json.loads(args.probe.read_text())["rows"] if args.probe.exists() else []
    by_family: dict[str, list[GridRun]] = defaultdict(list)
    for one in found:
        observed = grid_run(one.key_dim, one.value_dim, one.run)
        if observed is not None:
            by_family[one.run.mixer].append(observed)
    laws = {family: fit_grid_laws(runs) for family, runs in by_family.items()}
    cells = cell_rows(found, probe)
    models = model_rows(laws)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(
        [
            {
                "family": f.run.mixer,
                "D": f.key_dim,
                "d_v": f.value_dim,
                "seed": f.run.seed,
                "n90": n90_shown(f.run),
                "train min": f"{f.minutes:.1f}",
            }  # fmt: skip
            for f in found
        ],
        out / "runs.csv",
    )
    write_csv(cells, out / "cells.csv")
    write_csv(models, out / "models.csv")
    draw_grid(cells, probe, out / "state_grid.png")
    (out / "tables.md").write_text(markdown(cells) + "\n" + markdown(models))
    print_table(cells)
    print()
    print_table(models)
    print(f"written to {out}: runs.csv, cells.csv, models.csv, tables.md, state_grid.png")
    return laws


if __name__ == "__main__":
    main()
