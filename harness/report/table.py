"""The report's tables: one row per point (sorted numerically), the frontier (accuracy and
state per job), and the jobs that did not finish with their error."""

from collections.abc import Mapping
from typing import Any

import pandas as pd

from harness.readouts.capacity import level_name, shown
from harness.readouts.cell_law import CellLaw
from harness.readouts.restarts import ESTIMANDS
from harness.records.schema import OK
from harness.report.capacity_law import CELL, capacity_shown, cell_key
from harness.report.frame import baselines, by_length, missing, sort_key, state_value


def point_rows(
    frame: pd.DataFrame,
    point_keys: list[str],
    lr_grid: bool,
    threshold: float,
    laws: Mapping[tuple[str, str], CellLaw] | None = None,
    cells: pd.DataFrame | None = None,
) -> list[dict]:
    """One row per point: parameters, state (the mixer's floats per layer, the convolutions'
    windows apart), accuracy (mean, std over seeds:
    blank for one seed), counts, convergence, baselines, accuracy at each test length, the
    load-curve readouts, and the note when not ok; numbers at full precision (`table.csv`;
    printing rounds). The readouts are per seed, at `threshold` (the column is named for it:
    `n90`, `n80`). With `cells` (`harness.report.capacity_law.cells_and_laws`) the point's
    cell gives `capacity_n90` (its best restart's readout), `learnability` and `restarts`;
    with `laws` (keyed by (mixer, estimand), the mixers named as the points' `name` column,
    default each point's model) the columns `b n90 in R [90%]` on each estimand give the
    mixer's exponents on each of its rows."""
    points = [
        {k: None if missing(v) else v for k, v in p.items()} for p in frame.to_dict("records")
    ]
    lengths = sorted({n for p in points for n in by_length(p) if len(by_length(p)) > 1})
    names = sorted({name for p in points for name in baselines(p)})
    capacity = any(p["capacity"] for p in points)
    rows = []
    for p in sorted(
        points, key=lambda p: (p["task"], p["model"], *(sort_key(p[k]) for k in point_keys))
    ):
        row: dict[str, Any] = {"task": p["task"], "model": p["model"]}
        row.update({k: p[k] for k in point_keys})
        row["state_floats_per_layer"] = p["state_floats"]
        row["conv_floats_per_layer"] = p["conv_floats"]
        row.update({k: p[k] for k in ("test_acc", "std", "seeds", "not_ok")})
        row["converged"] = {True: "yes", False: "no", None: ""}[p["converged"]]
        if lr_grid:
            row["best_lr"] = p["lr"]
        row.update({f"baseline.{b}": baselines(p).get(b) for b in names})
        row.update({f"acc@T={n}": by_length(p).get(n) for n in lengths})
        if capacity:
            row.update(capacity_columns(p["capacity"], threshold))
        mixer = p.get("name") or p["model"]
        if cells is not None and not cells.empty:
            row.update(cell_columns(cells, mixer, cell_key(p, point_keys)))
        if laws:
            row.update(law_columns(laws, mixer, threshold))
        row.update(status=p["status"], note=p["note"])
        rows.append(row)
    return rows


def capacity_columns(readouts: list[dict], threshold: float) -> dict[str, str]:
    """Per seed, in seed order: `read_seeds`, the ids of the seeds read (`0, 1, 2`, the order
    of every other column's values; `seeds` counts the seeds that finished); the readout at
    the threshold (named `n90`, `n80`, ...) and `n50` with their sampling errors (`>=`: a
    lower bound; `<`: below the judging load); `verdict` with its reason; and `training`, how
    the training ended."""

    def values(name: str) -> str:
        return "; ".join(shown(r, name, with_error=True) for r in readouts)

    verdicts = "; ".join(f"{r.get('verdict')} ({r.get('why')})" for r in readouts)
    return {
        "read_seeds": ", ".join(str(r.get("seed")) for r in readouts),
        level_name(threshold): values("n90"),
        "n50": values("n50"),
        "verdict": verdicts,
        "training": ", ".join(str(r.get("training")) for r in readouts),
    }


def cell_columns(cells: pd.DataFrame, mixer: str, key: str) -> dict[str, Any]:
    """The point's cell: `capacity_n90` (its best restart's readout, as `shown`),
    `learnability` (k of n) and `restarts` (n, then the extra restarts outside the design)."""
    found = cells[(cells["mixer"] == mixer) & (cells[CELL] == key)]
    if found.empty:
        return {"capacity_n90": None, "learnability": None, "restarts": None}
    cell, extra = found.iloc[0], int(found.iloc[0]["extra"])
    restarts = f"{cell['restarts']}" + (f" (+{extra} outside the design)" if extra else "")
    return {
        "capacity_n90": capacity_shown(cell),
        "learnability": cell["learnability"],
        "restarts": restarts,
    }


def law_columns(
    laws: Mapping[tuple[str, str], CellLaw], mixer: str, threshold: float
) -> dict[str, str | None]:
    """The mixer's exponent in the stack's rank bound R with its interval, on each estimand
    (`b n90 in R [90%] capacity`, `... typical`)."""
    found = {e: laws.get((mixer, e)) for e in ESTIMANDS}
    name = level_name(threshold)
    return {
        f"b {name} in R [90%] {e}": law.rank.shown() if law else None for e, law in found.items()
    }


def frontier_rows(rows: list[dict]) -> list[dict]:
    """Every ok job's accuracy against its state (for W&B's scatter plot)."""
    keep = ("task", "model", "task.seq_len", "backbone.d_model", "seed", "optim.lr", "test/acc")
    return [
        {
            **{k.replace("/", "_"): r.get(k) for k in keep},
            "state_floats_per_layer": state_value(r, "mixer_floats_per_layer"),
            "test_acc": r.get("test/acc"),
        }
        for r in rows
        if r.get("status") == OK
    ]


def problem_rows(rows: list[dict], swept: list[str]) -> list[dict]:
    """Each failed or diverged job: what it ran (its swept values) and its error."""
    shown = ("task", "model", "task.seq_len", *swept)
    job = lambda r: " ".join(f"{k}={v}" for k, v in {k: r.get(k) for k in shown if k in r}.items())  # noqa: E731
    return [
        {"status": r.get("status"), "job": job(r), "error": r.get("error") or "",
         "run_dir": r.get("run_dir") or ""}
        for r in rows if r.get("status") != OK
    ]  # fmt: skip
