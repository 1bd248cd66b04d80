"""Overwrite curves: accuracy on re-bound and on once-bound keys against the number of
re-bindings and the distance between a key's first and last binding, per mixer
(`experiment=overwrite_curve`; docs/results/overwrite_curve/).
`python -m studies.overwrite_curves <sweep folder>... [--out DIR]`.

Reads every `results.json` and `summary.jsonl` under the folders (a run counts once, by
config hash: the newest record), one row per run: the mixer, its state floats per layer,
the seed, accuracy on once-bound keys (`rebinds/0`), on keys re-bound 1, 2, ... times and by
distance bucket, the task's baselines (`stale`: the key's first value, right on once-bound
keys only; `current`: a guess among the values still bound) and whether the run converged.
A mixer's cell is the mean over its seeds; a run whose re-bound accuracy is at or below
`current` has not learned to replace (`learned` false): its numbers are lower bounds, not a
limit. Writes `runs.csv`, `cells.csv`, `overwrite_by_rebinds.png` and
`overwrite_by_distance.png`, and prints the cells."""

import argparse
import json
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.report import look  # noqa: E402

SLICES = ("rebinds", "distance")


def load_runs(folders: list[Path]) -> pd.DataFrame:
    """One row per finished run under `folders` (the newest record of a config hash)."""
    records = [json.loads(p.read_text()) for f in folders for p in f.rglob("results.json")]
    for summary in (p for f in folders for p in f.rglob("summary.jsonl")):
        records += [json.loads(line) for line in summary.read_text().splitlines() if line]
    runs = [r for r in records if r.get("status") == "ok" and r["task"] == "overwrite_recall"]
    rows = []
    for r in runs:
        m = r["metrics"]
        row = {
            "model": r["model"],
            "floats": r["state"]["mixer_floats_per_layer"],
            "rank": r["state"]["rank_bound_per_layer"],
            "seed": r["seed"],
            "hash": r["config_hash"],
            "finished": r.get("finished_at", ""),
            "converged": bool(r["train"].get("converged")),
            "acc": m["test/acc"],
            "stale": m["test/baseline/stale"],
            "current": m["test/baseline/current"],
        }
        for key, value in m.items():
            parts = key.split("/")
            if key.startswith("test/acc_by/") and parts[2] in ("rebound", *SLICES):
                row[f"{parts[2]}/{parts[3]}"] = value
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.sort_values("finished").drop_duplicates("hash", keep="last")


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    """Per mixer: seeds, mean accuracy on once-bound and re-bound keys and by re-bindings,
    the baselines, and `learned`: every seed's re-bound accuracy above `current`."""
    runs = runs.assign(learned=runs["rebound/1"] > runs["current"])
    columns = ["rebound/0", "rebound/1", *sorted(c for c in runs if c.startswith("rebinds/"))]
    grouped = runs.groupby(["model", "floats", "rank"])
    out = grouped[columns + ["stale", "current"]].mean().round(3)
    out.insert(0, "seeds", grouped.size())
    out["learned"] = grouped["learned"].all()
    out["converged"] = grouped["converged"].sum().astype(str) + "/" + out["seeds"].astype(str)
    return out.reset_index().sort_values("rebound/1", ascending=False)


def slice_frame(runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """Long form of one slice: model, seed, value (the slice's number), accuracy."""
    cols = [c for c in runs if c.startswith(f"{name}/")]
    ids = ["model", "floats", "rank", "seed"]
    long = runs.melt(ids, cols, var_name="slice", value_name="accuracy")
    long["value"] = long["slice"].str.split("/").str[1].astype(int)
    return long.dropna(subset=["accuracy"])


def draw(runs: pd.DataFrame, name: str, path: Path) -> None:
    """Accuracy against the slice `name` per mixer: seeds as dots (hollow: not converged),
    their mean as a line; `current` (a guess among the values still bound) as a grey line and,
    by re-bindings, `stale` (the key's first value: right on once-bound keys, never on
    re-bound ones) as grey crosses."""
    long = slice_frame(runs, name).merge(runs[["model", "seed", "converged"]])
    if name == "distance":
        long = long[long["value"] > 0]  # 0: bound once, no distance
    fig, ax = plt.subplots(figsize=(7.5, 4.6), constrained_layout=True)
    order = long.groupby("model")["accuracy"].mean().sort_values(ascending=False).index
    for i, model in enumerate(order):
        one = long[long["model"] == model].copy()
        colour, mark = look.style(model)
        shift = 0.04 * (i - (len(order) - 1) / 2)  # coinciding lines set apart
        one["value"] = one["value"] * 2**shift if name == "distance" else one["value"] + shift
        mean = one.groupby("value")["accuracy"].mean()
        floats, rank = int(one["floats"].iloc[0]), int(one["rank"].iloc[0])
        label = f"{model} ({floats:,} floats, R = {rank})"
        ax.plot(mean.index, mean.values, "-", color=colour, marker=mark, ms=4, label=label)
        for converged, face in ((True, colour), (False, "none")):
            dots = one[one["converged"] == converged]
            ax.scatter(dots["value"], dots["accuracy"], s=18, facecolors=face, edgecolors=colour)
    ax.axhline(runs["current"].mean(), color="grey", ls=":", lw=1, label="current (guess)")
    values = sorted(long["value"].unique())
    if name == "rebinds":
        stale = [1.0 if v == 0 else 0.0 for v in values]
        ax.plot(values, stale, "x", color="grey", ms=8, label="stale (first value)")
        ax.set_xticks(values)
        ax.set_xlabel("re-bindings of the queried key (0: bound once)")
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel("tokens between a re-bound key's first and last binding (bucket)")
    ax.set_ylabel("test accuracy (hollow: run not converged)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(
        f"Recall of a key's latest value, by {'re-bindings' if name == 'rebinds' else 'distance'}"
    )
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m studies.overwrite_curves")
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="folder for the csv files and figures")
    args = parser.parse_args(argv)
    runs = load_runs(args.folders)
    if runs.empty:
        parser.error(f"no finished overwrite_recall run under {', '.join(map(str, args.folders))}")
    table = cells(runs)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(table.to_string(index=False))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        runs.drop(columns=["hash"]).to_csv(args.out / "runs.csv", index=False)
        table.to_csv(args.out / "cells.csv", index=False)
        for name in SLICES:
            draw(runs, name, args.out / f"overwrite_by_{name}.png")
    return table


if __name__ == "__main__":
    main()
