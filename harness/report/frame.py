"""A sweep's records as the report reads them: the jobs' rows (`harness.records.sweep.load_sweep`,
one flat row a job), the parameters some (task, model) varied, and the points, one row a
(task, model, varied parameters) of a tidy DataFrame: seeds averaged (mean, sample std), the
learning rate chosen on validation (`groupby(...).idxmax()`), failures and divergences kept
with their reason."""

import json
import math
import statistics
from collections import defaultdict
from functools import cache
from typing import Any

import pandas as pd

from common.checks import is_real
from harness.config.capacity_protocol import DERIVED
from harness.config.settings import PLUMBING, role_of
from harness.records.schema import DIVERGED, DIVERGED_AT_STEP, FAILED, OK

AVERAGED = ("seed", "data.seed")
"""Repeats of one point: their test accuracy is averaged (mean, standard deviation)."""
SELECTED = ("optim.lr",)
"""A grid per point: the value with the best mean validation accuracy is kept."""
PARAMETER_PREFIXES = ("task.", "model.", "backbone.", "optim.", "data.", "trainer.")
PARAMETER_KEYS = ("seed", "early_stop_acc")
NOT_POINT_KEYS = ("task.eval_seq_lens",)
"""Identity that is not a point's: the extra test lengths are read as their own columns."""
STATE_FLOATS = "state_floats"
"""A point's state as an axis: the mixer's floats per layer (softmax's: its KV cache)."""
BASELINE = "baseline."
"""A point's binding-free baselines: `baseline.<name>` (`test/baseline/<name>`, averaged)."""
LENGTH_PREFIX = "test/acc_by/seq_len/"


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def as_key(value: Any) -> str:
    """A hashable, comparable form of any cell (lists included); missing is `null`."""
    return "null" if missing(value) else json.dumps(value, sort_keys=True, default=str)


def sort_key(value: Any) -> tuple:
    """Numbers numerically (128 after 64), then text, then missing."""
    if missing(value):
        return (2, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value))
    return (1, str(value))


def integral(value: Any) -> Any:
    """128.0 -> 128: pandas stores an integer column with gaps as floats."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def clean_rows(frame: pd.DataFrame) -> list[dict]:
    """The DataFrame's rows as dicts, gaps left out, integral floats as ints."""
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return [{k: integral(v) for k, v in row.items() if not missing(v)} for row in rows]


def state_value(row: dict, key: str) -> int | float | None:
    """`state.<key>` of a row (`mixer_floats_per_layer`, `conv_floats_per_layer`,
    `rank_bound_stack`), None where the record has no state."""
    value = row.get(f"state.{key}")
    return integral(float(value)) if is_real(value) and not math.isnan(value) else None


def parameter_columns(rows: list[dict]) -> list[str]:
    keys = dict.fromkeys(k for row in rows for k in row)
    prefixed = [k for k in keys if k.startswith(PARAMETER_PREFIXES) or k in PARAMETER_KEYS]
    return [k for k in prefixed if k not in NOT_POINT_KEYS]


def varied(rows: list[dict], columns: list[str]) -> list[str]:
    """Columns that take more than one value within some (task, model); a setting the capacity
    protocol derived (`harness.config.capacity_protocol.DERIVED`) counts only in the runs
    without the protocol. Plumbing (`harness.config.settings.PLUMBING`) never counts."""
    columns = [c for c in columns if role_of(c) != PLUMBING]
    plain = [r for r in rows if not r.get("capacity.protocol")]
    if len(plain) < len(rows):
        kept = varied(plain, columns) if plain else []
        columns = [c for c in columns if not c.startswith(DERIVED) or c in kept]
    frame = pd.DataFrame(rows).reindex(columns=["task", "model", *columns]).astype(object)
    keyed = frame.map(lambda v: None if missing(v) else as_key(v))
    counts = keyed.groupby([keyed["task"], keyed["model"]], dropna=False)[columns].nunique()
    return [c for c in columns if (counts[c] > 1).any()]


def split_settings(fixed: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the settings that define the experiment, the plumbing), each in `fixed`'s order."""
    plumbing = {k: v for k, v in fixed.items() if role_of(k) == PLUMBING or k.endswith("_dir")}
    return {k: v for k, v in fixed.items() if k not in plumbing}, plumbing


def fixed_settings(rows: list[dict], columns: list[str]) -> dict[str, Any]:
    """Settings no job varied, shown once: one value for every job, or, where models differ
    (a mixer's own parameters, a rate per model), each model's value."""
    fixed: dict[str, Any] = {}
    for column in columns:
        by_model: dict[str, set[str]] = defaultdict(set)
        for row in (r for r in rows if column in r):
            by_model[row.get("model")].add(as_key(row[column]))
        values = set().union(*by_model.values()) if by_model else set()
        if len(values) == 1:
            fixed[column] = json.loads(values.pop())
        elif values and all(len(v) == 1 for v in by_model.values()):
            fixed[column] = ", ".join(f"{m}: {next(iter(v))}" for m, v in sorted(by_model.items()))
    return fixed


def mean_std(values: list) -> tuple[float | None, float | None]:
    """The mean and the sample standard deviation (n - 1; None for one value)."""
    values = [v for v in values if not missing(v)]
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def why_not_ok(rows: list[dict]) -> str:
    """One phrase for the failed and diverged rows of a point: `diverged at step 42`, or the
    first line of the first error."""
    steps = [r.get(f"train.{DIVERGED_AT_STEP}") for r in rows if r.get("status") == DIVERGED]
    known = sorted(s for s in steps if s is not None)
    if steps:
        at = f" at step{'s' * (len(known) > 1)} {', '.join(map(str, known))}"
        return "diverged" + (at if known else "")
    text = (rows[0].get("error") or "no error message").strip().splitlines()[0] if rows else ""
    return text and "failed: " + (text if len(text) <= 90 else text[:87] + "...")


def points(rows: list[dict], point_keys: list[str]) -> pd.DataFrame:
    """One row per (task, model, `point_keys`) of `rows`, in order of first appearance: of its
    learning rates the one whose ok seeds have the best mean validation accuracy (`idxmax`;
    every attempt where no seed is ok), that rate's jobs aggregated (`point_of`)."""
    if not rows:
        return pd.DataFrame(columns=["task", "model", *point_keys])
    frame = pd.DataFrame(rows)
    keyed = frame.reindex(columns=["task", "model", *point_keys, "optim.lr"]).map(as_key)
    cell = keyed.drop(columns="optim.lr").agg("|".join, axis=1)
    ok_val = frame.reindex(columns=["val/acc"])["val/acc"].astype(float)
    ok_val = ok_val.where(frame.reindex(columns=["status"])["status"] == OK)
    score = ok_val.groupby([cell, keyed["optim.lr"]], sort=False).mean().dropna()
    best = dict(score.groupby(level=0, sort=False).idxmax().tolist())
    chosen = [best.get(c, lr) == lr for c, lr in zip(cell, keyed["optim.lr"], strict=True)]
    groups = frame[chosen].groupby(cell[chosen], sort=False).groups
    made = [point_of([rows[i] for i in groups[c]], point_keys) for c in dict.fromkeys(cell)]
    return pd.DataFrame(made, dtype=object)


def point_of(group: list[dict], point_keys: list[str]) -> dict[str, Any]:
    """One point: its parameters, state, the ok seeds' test accuracy (mean, std, each seed's),
    counts, convergence (every ok seed converged), their metrics' means, every job's
    baselines' means, whether every job was refused before it was built, each ok seed's
    load-curve readout (`capacity`, in seed order) and the reason the others are not ok."""
    ok = [r for r in group if r.get("status") == OK]
    first = group[0]
    accs = [r["test/acc"] for r in ok if not missing(r.get("test/acc"))]
    flags = [r["train.converged"] for r in ok if "train.converged" in r]
    states = [r for r in group if state_value(r, "mixer_floats_per_layer") is not None]
    point = {"task": first.get("task"), "model": first.get("model")}
    point.update({k: first.get(k) for k in point_keys})
    point["params"] = {k: first.get(k) for k in point_keys}
    point.update(
        status=OK if ok else DIVERGED if any(r.get("status") == DIVERGED for r in group) else FAILED
    )
    point.update(zip(("test_acc", "std"), mean_std(accs), strict=True))
    point.update(seed_accs=accs, seeds=len(ok), not_ok=len(group) - len(ok))
    point.update(lr=first.get("optim.lr") if ok else None, converged=all(flags) if flags else None)
    point["seq_len"] = first.get("task.seq_len", first.get("seq_len"))
    point[STATE_FLOATS] = state_value(states[0], "mixer_floats_per_layer") if states else None
    point["conv_floats"] = state_value(states[0], "conv_floats_per_layer") if states else None
    point["refused"] = all(
        r.get("status") == FAILED and "state.floats_per_layer" not in r for r in group
    )
    point["capacity"] = [
        {"seed": r.get("seed"), **{k[9:]: v for k, v in r.items() if k.startswith("capacity.")}}
        for r in sorted(ok, key=lambda r: sort_key(r.get("seed")))
        if r.get("capacity.verdict") is not None
    ]
    note = why_not_ok([r for r in group if r.get("status") != OK])
    point["note"] = f"{point['not_ok']} of {len(group)} seeds {note}" if ok and note else note
    baselines = prefixed(mean_metrics(group), "test/baseline/") or fallback_baselines(first)
    point.update({f"{BASELINE}{k}": v for k, v in baselines.items()})
    return point | mean_metrics(ok)


def mean_metrics(rows: list[dict]) -> dict[str, float]:
    keys = dict.fromkeys(k for r in rows for k in r if k.startswith(("test/", "val/")))
    means = {k: mean_std([r.get(k) for r in rows])[0] for k in keys}
    return {k: v for k, v in means.items() if v is not None}


def prefixed(point: pd.Series | dict, prefix: str) -> dict[str, Any]:
    """A point's values whose key starts with `prefix`, keyed by the rest, gaps left out."""
    return {
        k[len(prefix) :]: v for k, v in point.items() if k.startswith(prefix) and not missing(v)
    }


def metrics(point: pd.Series | dict) -> dict[str, float]:
    """A point's metrics (`test/...`, `val/...`: its ok seeds' means), gaps left out."""
    return {k: v for k, v in point.items() if k.startswith(("test/", "val/")) and not missing(v)}


def baselines(point: pd.Series | dict) -> dict[str, float]:
    """A point's baselines by name (`BASELINE` columns), gaps left out."""
    return prefixed(point, BASELINE)


def by_length(point: pd.Series | dict) -> dict[int, float]:
    """A point's accuracy at each test length (`task.eval_seq_lens`)."""
    return {int(k): v for k, v in prefixed(point, LENGTH_PREFIX).items()}


def fallback_baselines(row: dict) -> dict[str, float]:
    """Chance for a record without baselines: the task rebuilt from its parameters, scored by
    its own `baselines` (if it has them) on a generated set."""
    params = {k: v for k, v in prefixed(row, "task.").items() if k != "eval_seq_lens"}
    chance = task_chance(row.get("task"), json.dumps(params, sort_keys=True))
    return {} if chance is None else {"chance": chance}


@cache
def task_chance(task: str | None, params_json: str) -> float | None:
    from tasks import build_task

    try:
        built = build_task(task, **json.loads(params_json))
        found = getattr(built, "baselines", None)
        return None if found is None else float(found(built.generate(500, 0))["chance"])
    except Exception:  # noqa: BLE001 - a report is drawn without the line rather than not at all
        return None


def covaries(points: pd.DataFrame, column: str, x: str) -> bool:
    """Whether `column` is a function of `x` within every (task, model): swept together with
    the x axis (seq_len = 8 x pairs; d_model and the state), it must not split lines."""
    if x not in points or points.empty:
        return True
    frame = points.reindex(columns=["task", "model", x, column]).astype(object)
    frame = frame[frame[x].map(lambda v: not missing(v))].map(as_key)
    return bool((frame.groupby(["task", "model", x])[column].nunique() <= 1).all())
