"""Turn a sweep folder into a comparison: `python -m harness.report multirun/<date>/<time>`.

Reads every job's record (`summary.jsonl`, plus any `*/results.json` it lacks), aggregates
repeated seeds (mean, standard deviation, count), picks the best learning rate per point by
validation accuracy where a learning-rate grid was swept, and writes into `<sweep>/report/`:
`table.csv`, `acc_vs_seq_len.png`, `acc_vs_state.png` (Zoology's recall-memory frontier),
`needle_heatmap.png` and `copy_vs_length.png` when those tasks are present, and
`report.html` (plots and table in one self-contained page). The table is also printed, and
logged with its line plots to one W&B summary run (offline unless `--wandb online`).
"""

import argparse
import base64
import html
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from harness.results import read_summary  # noqa: E402
from harness.tables import print_table, write_csv  # noqa: E402

SWEPT_AWAY = ("seed", "lr")
"""What a point aggregates over: seeds are averaged, learning rates are selected."""


def load_records(sweep: Path) -> list[dict]:
    """The latest record of every config in the sweep: `summary.jsonl` in order (a rerun's
    record replaces a failed one), plus job folders' `results.json` that it lacks."""
    records: dict[str, dict] = {}
    for record in read_summary(sweep):
        records[record.get("config_hash") or str(len(records))] = record
    for path in sorted(sweep.glob("*/results.json")):
        record = json.loads(path.read_text())
        records.setdefault(record.get("config_hash") or str(path), record)
    return list(records.values())


def flatten(record: dict) -> dict:
    """One row: identity columns, swept columns, outcome columns."""
    config = record.get("config") or {}
    row = {"task": record["task"], "model": record["model"]}
    row.update({f"task.{k}": v for k, v in (record.get("task_params") or {}).items()})
    row.update({f"model.{k}": v for k, v in (record.get("model_params") or {}).items()})
    row.update({f"backbone.{k}": v for k, v in (config.get("backbone") or {}).items()})
    row["seed"] = record.get("seed")
    row["lr"] = (config.get("optim") or {}).get("lr")
    state = record.get("state") or {}
    metrics = record.get("metrics") or {}
    row.update(
        status=record.get("status"),
        state_bytes=state.get("bytes_per_layer"),
        state_floats=state.get("floats_per_layer"),
        test_acc=metrics.get("test/acc"),
        val_acc=metrics.get("val/acc"),
        metrics=metrics,
    )
    return row


def varying(rows: list[dict]) -> list[str]:
    """Parameter columns that the sweep varied for some (task, model), plus the length."""
    keys = sorted({k for r in rows for k in r if k.startswith(("task.", "model.", "backbone."))})
    groups = defaultdict(list)
    for row in rows:
        groups[(row["task"], row["model"])].append(row)

    def varied(key: str) -> bool:
        return any(len({json.dumps(r.get(key)) for r in g}) > 1 for g in groups.values())

    return ["task.seq_len", *(k for k in keys if k != "task.seq_len" and varied(k))]


def mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def aggregate(rows: list[dict]) -> tuple[list[dict], list[str], bool]:
    """Points: rows grouped by everything but seed and lr; seeds averaged, best lr by val acc.

    Returns the points, the varied parameter columns, and whether an lr grid was selected."""
    columns = [c for c in varying(rows) if c not in SWEPT_AWAY]
    by_point: dict[tuple, dict[object, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        key = (row["task"], row["model"], *(json.dumps(row.get(c)) for c in columns))
        by_point[key][row["lr"]].append(row)
    lr_grid = any(len(by_lr) > 1 for by_lr in by_point.values())
    points = []
    for by_lr in by_point.values():
        candidates = []
        for lr, group in by_lr.items():
            ok = [r for r in group if r["status"] == "ok"]
            val, _ = mean_std([r["val_acc"] for r in ok])
            candidates.append((val if not math.isnan(val) else -1.0, lr, group, ok))
        _, lr, group, ok = max(candidates, key=lambda c: c[0])
        test, spread = mean_std([r["test_acc"] for r in ok])
        first = group[0]
        point = {"task": first["task"], "model": first["model"]}
        point.update({c: first.get(c) for c in columns})
        point.update(
            state_bytes=first["state_bytes"],
            test_acc=test,
            test_acc_std=spread,
            seeds=len(ok),
            failed=len(group) - len(ok),
            lr=lr,
            metrics=mean_metrics(ok),
        )
        points.append(point)
    points.sort(key=lambda p: (p["task"], p["model"], *(json.dumps(p.get(c)) for c in columns)))
    return points, columns, lr_grid


def mean_metrics(rows: list[dict]) -> dict[str, float]:
    keys = {k for r in rows for k in r["metrics"]}
    return {k: mean_std([r["metrics"].get(k) for r in rows])[0] for k in keys}


def label(point: dict, columns: list[str], exclude: tuple[str, ...]) -> str:
    extra = [f"{c.split('.', 1)[1]}={point[c]}" for c in columns if c not in exclude]
    return " ".join([point["model"], *extra])


def determined_by(points: list[dict], x_key: str, columns: list[str]) -> list[str]:
    """Columns whose value follows from `x_key` (swept together, e.g. seq_len = 8 x pairs):
    they do not split a line into one-point lines."""
    out = []
    for column in columns:
        values: dict[str, set[str]] = defaultdict(set)
        for p in points:
            values[json.dumps(p.get(x_key))].add(json.dumps(p.get(column)))
        if all(len(v) == 1 for v in values.values()):
            out.append(column)
    return out


def plot_lines(points, columns, x_key, title, path, logx=False, note="") -> Path | None:
    """Test accuracy against `x_key`, one line per model (and other varied parameters)."""
    points = [p for p in points if p.get(x_key) is not None]
    if not points:
        return None
    tasks = sorted({p["task"] for p in points})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        mine = [p for p in points if p["task"] == task]
        lines: dict[str, list[dict]] = defaultdict(list)
        for p in mine:
            lines[label(p, columns, (x_key, *determined_by(mine, x_key, columns)))].append(p)
        for name, line in sorted(lines.items()):
            line.sort(key=lambda p: p[x_key])
            xs = [p[x_key] for p in line]
            ys = [p["test_acc"] for p in line]
            errs = [p["test_acc_std"] for p in line]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=name)
        ax.set(title=f"{task}: {title}", xlabel=x_key, ylabel="test accuracy", ylim=(-0.02, 1.02))
        if logx:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def slice_values(metrics: dict, name: str) -> dict[int, float]:
    prefix = f"test/acc_by/{name}/"
    return {int(k[len(prefix) :]): v for k, v in metrics.items() if k.startswith(prefix)}


def plot_needle(points: list[dict], path: Path) -> Path | None:
    """Depth x length heatmap of needle retrieval, one panel per model."""
    needle = [p for p in points if p["task"] == "needle"]
    if not needle:
        return None
    models = sorted({p["model"] for p in needle})
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        cells = defaultdict(list)
        for p in needle:
            if p["model"] == model:
                for depth, acc in slice_values(p["metrics"], "depth_bin").items():
                    cells[(depth, p.get("task.seq_len"))].append(acc)
        depths = sorted({d for d, _ in cells})
        lengths = sorted({n for _, n in cells}, key=lambda n: (n is None, n))
        grid = [[mean_std(cells.get((d, n), []))[0] for n in lengths] for d in depths]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d / 10:.1f}" for d in depths])
        ax.set(title=model, xlabel="seq_len", ylabel="needle depth")
    fig.colorbar(image, ax=axes[0].tolist(), label="accuracy")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_copy(points: list[dict], path: Path) -> Path | None:
    """Copy accuracy against string length (per-example `copy_len` slice)."""
    copy = [p for p in points if p["task"] == "copy"]
    if not copy:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.2))
    lines: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in copy:
        for length, acc in slice_values(p["metrics"], "copy_len").items():
            lines[p["model"]][length].append(acc)
    for model, by_length in sorted(lines.items()):
        xs = sorted(by_length)
        ax.plot(xs, [mean_std(by_length[x])[0] for x in xs], marker="o", label=model)
    ax.set(title="copy: accuracy vs string length", xlabel="string length", ylabel="accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table_rows(points: list[dict], columns: list[str], lr_grid: bool) -> list[dict]:
    rows = []
    for p in points:
        row = {"task": p["task"], "model": p["model"]}
        row.update({c: p[c] for c in columns})
        row.update(
            state_bytes=p["state_bytes"],
            test_acc=round(p["test_acc"], 4),
            std=round(p["test_acc_std"], 4),
            seeds=p["seeds"],
            failed=p["failed"],
        )
        if lr_grid:
            row["best_lr"] = p["lr"]
        rows.append(row)
    return rows


def write_html(path: Path, title: str, notes: list[str], images: list[Path], rows: list[dict]):
    """One self-contained page: images inlined as base64, the table as HTML."""
    parts = [f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"]
    parts.append(f"<body><h1>{html.escape(title)}</h1>")
    parts += [f"<p>{html.escape(n)}</p>" for n in notes]
    for image in images:
        data = base64.b64encode(image.read_bytes()).decode()
        parts.append(f"<h2>{image.stem}</h2><img src='data:image/png;base64,{data}'/>")
    if rows:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
            for r in rows
        )
        parts.append(f"<h2>table</h2><table border=1><tr>{head}</tr>{body}</table>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))


def log_to_wandb(sweep: Path, rows: list[dict], points: list[dict], mode: str) -> None:
    """One summary run in the sweep's group: the table and accuracy-vs-length line plots."""
    import wandb

    run = wandb.init(
        project="recall-harness",
        group=sweep.name,
        job_type="report",
        name=f"report-{sweep.name}",
        dir=str(sweep),
        mode=mode,
        settings=wandb.Settings(init_timeout=15),
    )
    columns = list(rows[0])
    run.log({"report/table": wandb.Table(columns=columns, data=[list(r.values()) for r in rows])})
    for task in sorted({p["task"] for p in points}):
        data = [
            [p["model"], p.get("task.seq_len"), p["test_acc"]]
            for p in points
            if p["task"] == task and p.get("task.seq_len") is not None
        ]
        if data:
            table = wandb.Table(columns=["model", "seq_len", "test_acc"], data=data)
            plot = wandb.plot.line(table, "seq_len", "test_acc", stroke="model", title=task)
            run.log({f"report/{task}/acc_vs_seq_len": plot})
    wandb.finish()


def report(sweep: Path, out: Path | None = None, wandb_mode: str = "offline") -> list[dict]:
    """Write the report of `sweep` into `out` (default `<sweep>/report`); return the table."""
    sweep = Path(sweep)
    records = load_records(sweep)
    if not records:
        raise SystemExit(f"error: no results.json or summary.jsonl records under {sweep}")
    out = Path(out or sweep / "report")
    out.mkdir(parents=True, exist_ok=True)
    rows = [flatten(r) for r in records]
    points, columns, lr_grid = aggregate(rows)
    table = table_rows(points, columns, lr_grid)
    notes = [f"{len(records)} jobs, {sum(r['status'] != 'ok' for r in rows)} not ok."]
    if lr_grid:
        lrs = sorted({r["lr"] for r in rows if r["lr"] is not None})
        notes.append(f"Best learning rate of {lrs} selected per point by validation accuracy.")
    notes.append("Accuracy: mean over seeds; error bars: standard deviation.")
    note = " ".join(notes)
    by_length = plot_lines(
        points, columns, "task.seq_len", "accuracy vs length", out / "acc_vs_seq_len.png", note=note
    )
    by_state = plot_lines(
        points, columns, "state_bytes", "accuracy vs state bytes per layer",
        out / "acc_vs_state.png", logx=True, note=note,
    )  # fmt: skip
    needle = plot_needle(points, out / "needle_heatmap.png")
    images = [by_length, by_state, needle, plot_copy(points, out / "copy_vs_length.png")]
    images = [i for i in images if i is not None]
    write_csv(table, out / "table.csv")
    write_html(out / "report.html", f"recall-harness report: {sweep}", notes, images, table)
    print_table(table)
    for line in notes:
        print(line)
    print(f"report written to {out}")
    if wandb_mode != "disabled":
        log_to_wandb(sweep, table, points, wandb_mode)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a multirun folder (holds summary.jsonl)")
    parser.add_argument("--out", type=Path, default=None, help="default: <sweep>/report")
    parser.add_argument("--wandb", default="offline", choices=["offline", "online", "disabled"])
    args = parser.parse_args()
    report(args.sweep, args.out, args.wandb)


if __name__ == "__main__":
    main()
