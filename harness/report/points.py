"""From a sweep's rows (`harness.records.sweep.load_sweep`) to the points the report draws: one
point per (task, model, varied parameters), seeds averaged, the learning rate selected on
validation accuracy, failures and divergences kept with their reason."""

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
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
LENGTH_PREFIX = "test/acc_by/seq_len/"
BASELINE_PREFIX = "test/baseline/"
DIVERGED_STEP = f"train.{DIVERGED_AT_STEP}"
"""The column of a row (`harness.records.sweep.flat_row`) that holds the step a run diverged at."""


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def as_key(value: Any) -> str:
    """A hashable, comparable form of any cell (lists included); missing is `null`."""
    return "null" if missing(value) else json.dumps(value, sort_keys=True, default=str)


def sort_key(value: Any) -> tuple:
    """Numbers numerically (128 after 64), then text, then missing."""
    if missing(value):
        return (2, "")
    if isinstance(value, bool):
        return (1, str(value))
    if isinstance(value, int | float):
        return (0, float(value))
    return (1, str(value))


@dataclass
class Point:
    """One (task, model, varied parameters) of the sweep, seeds aggregated."""

    task: str
    model: str
    params: dict[str, Any]
    status: str = FAILED
    test_acc: float | None = None
    test_acc_std: float | None = None
    seed_accs: list[float] = field(default_factory=list)
    """Each ok seed's test accuracy (drawn as points where there are three or fewer)."""
    seeds: int = 0
    not_ok: int = 0
    lr: float | None = None
    state_floats: float | None = None
    """The mixer's state per layer in floats (softmax's: its KV cache)."""
    conv_floats: float | None = None
    """The short convolutions' windows per layer in floats, named apart."""
    converged: bool | None = None
    baselines: dict[str, float] = field(default_factory=dict)
    by_length: dict[int, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""
    seq_len: int | None = None
    """The training length (also when it was not varied)."""
    refused: bool = False
    """Every job of the point was refused before it was built."""
    capacity: list[dict] = field(default_factory=list)
    """Each ok seed's load-curve readout (`harness.readouts.capacity.readout`: `n90`, `n50`,
    their censoring and errors, `verdict`, `why`, `training`), in seed order."""

    def get(self, key: str) -> Any:
        """A parameter, or `state_floats`, by name."""
        return self.state_floats if key == STATE_FLOATS else self.params.get(key)


STATE_FLOATS = "state_floats"
"""The point's state as an axis (`Point.get`): the mixer's floats per layer."""


def known(value: object) -> bool:
    """A number, not a gap (None, or NaN where other records have the key)."""
    return is_real(value) and not math.isnan(value)


def state_value(row: dict, key: str) -> int | float | None:
    """`state.<key>` of a row (`mixer_floats_per_layer`, `conv_floats_per_layer`,
    `rank_bound_stack`; older records have them by `harness.records.migration`), None where
    the record has no state."""
    value = row.get(f"state.{key}")
    return integral(float(value)) if known(value) else None


def clean_rows(frame: pd.DataFrame) -> list[dict]:
    """The DataFrame's rows as dicts with NaN turned into None."""
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return [{k: integral(v) for k, v in row.items() if not missing(v)} for row in rows]


def integral(value: Any) -> Any:
    """128.0 -> 128: pandas stores an integer column with gaps as floats."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def parameter_columns(rows: list[dict]) -> list[str]:
    keys = dict.fromkeys(k for row in rows for k in row)
    return [
        k
        for k in keys
        if (k.startswith(PARAMETER_PREFIXES) or k in PARAMETER_KEYS) and k not in NOT_POINT_KEYS
    ]


def is_refused_row(row: dict) -> bool:
    """A run refused before it was built (its parameters are the mistake, not a setting)."""
    return row.get("status") == FAILED and "state.floats_per_layer" not in row


def derived(column: str) -> bool:
    """A task setting the capacity protocol derives from the cell's rank bound."""
    return column.startswith(DERIVED)


def varied(rows: list[dict], columns: list[str]) -> list[str]:
    """Columns that take more than one value within some (task, model); a setting the
    capacity protocol derived (`harness.config.capacity_protocol.DERIVED`) counts only in the
    runs without the protocol. Plumbing (`harness.config.settings.PLUMBING`: threads,
    devices, a mixer's mode) never counts: every value gives the same outcome."""
    columns = [c for c in columns if role_of(c) != PLUMBING]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row.get("task"), row.get("model"))].append(row)
    plain = [r for r in rows if not r.get("capacity.protocol")]
    if len(plain) < len(rows):
        kept = varied(plain, columns) if plain else []
        columns = [c for c in columns if not derived(c) or c in kept]

    def varies(column: str) -> bool:
        return any(
            len({as_key(r[column]) for r in group if column in r}) > 1 for group in groups.values()
        )

    return [c for c in columns if varies(c)]


def split_settings(fixed: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the settings that define the experiment, the plumbing), each in `fixed`'s order."""
    plumbing = {k: v for k, v in fixed.items() if role_of(k) == PLUMBING or k.endswith("_dir")}
    return {k: v for k, v in fixed.items() if k not in plumbing}, plumbing


def fixed_settings(rows: list[dict], columns: list[str]) -> dict[str, Any]:
    """Settings no job varied, to show once: one value for every job, or, where models
    differ (a mixer's own parameters, a learning rate per model), each model's value."""
    fixed: dict[str, Any] = {}
    for column in columns:
        by_model: dict[str, set[str]] = defaultdict(set)
        for row in rows:
            if column in row:
                by_model[row.get("model")].add(as_key(row[column]))
        values = set().union(*by_model.values()) if by_model else set()
        if len(values) == 1:
            fixed[column] = json.loads(values.pop())
        elif values and all(len(v) == 1 for v in by_model.values()):
            fixed[column] = ", ".join(f"{m}: {next(iter(v))}" for m, v in sorted(by_model.items()))
    return fixed


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if not missing(v)]
    if not values:
        return None, None
    # the sample standard deviation (n - 1), none for one value
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def short_error(error: str | None) -> str:
    """`diverged at step 42` / the first line of an error, for tables and figures."""
    text = (error or "no error message").strip().splitlines()[0]
    return text if len(text) <= 90 else text[:87] + "..."


def why_not_ok(rows: list[dict]) -> str:
    """One phrase for the failed and diverged rows of a point."""
    diverged = [r for r in rows if r.get("status") == DIVERGED]
    if diverged:
        steps = sorted(r[DIVERGED_STEP] for r in diverged if r.get(DIVERGED_STEP) is not None)
        where = f" at step {steps[0]}" if len(steps) == 1 else ""
        if len(steps) > 1:
            where = f" at steps {', '.join(map(str, steps))}"
        return f"diverged{where}"
    return f"failed: {short_error(rows[0].get('error'))}" if rows else ""


def aggregate(rows: list[dict], point_keys: list[str]) -> list[Point]:
    """Points: rows grouped by task, model and `point_keys` (pandas `groupby` on the cells'
    `as_key` forms, lists included); of a point's learning rates, the one whose ok seeds
    have the best mean validation accuracy (`idxmax`; every attempt where no seed is ok);
    test accuracy averaged over that rate's ok seeds (`make_point`)."""
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    keys = ["task", "model", *point_keys]
    cells = frame.reindex(columns=[*keys, "optim.lr"]).map(as_key)
    frame["_point"] = cells[keys].agg("|".join, axis=1)
    frame["_lr"] = cells["optim.lr"]
    validation = frame.reindex(columns=["val/acc"])["val/acc"].astype(float)
    frame["_ok_val"] = validation.where(frame.reindex(columns=["status"])["status"] == OK)
    score = frame.groupby(["_point", "_lr"], sort=False)["_ok_val"].mean()
    points = []
    for point, group in frame.groupby("_point", sort=False):
        scores = score.loc[point]
        if scores.notna().any():
            group = group[group["_lr"] == scores.idxmax()]
        points.append(make_point([rows[i] for i in group.index], point_keys))
    return points


def make_point(group: list[dict], point_keys: list[str]) -> Point:
    """The point of one learning rate's rows (`aggregate`)."""
    ok = [r for r in group if r.get("status") == OK]
    first = group[0]
    point = Point(first.get("task"), first.get("model"), {k: first.get(k) for k in point_keys})
    point.lr = first.get("optim.lr") if ok else None
    point.seq_len = first.get("task.seq_len", first.get("seq_len"))
    point.seeds, point.not_ok = len(ok), len(group) - len(ok)
    point.status = OK if ok else (DIVERGED if any_diverged(group) else FAILED)
    point.test_acc, point.test_acc_std = mean_std([r.get("test/acc") for r in ok])
    point.seed_accs = [r["test/acc"] for r in ok if not missing(r.get("test/acc"))]
    states = [r for r in group if state_value(r, "mixer_floats_per_layer") is not None]
    if states:
        point.state_floats = state_value(states[0], "mixer_floats_per_layer")
        point.conv_floats = state_value(states[0], "conv_floats_per_layer")
    flags = [r["train.converged"] for r in ok if "train.converged" in r]
    point.converged = all(flags) if flags else None
    point.metrics = mean_metrics(ok)
    point.by_length = {
        int(k[len(LENGTH_PREFIX) :]): v
        for k, v in point.metrics.items()
        if k.startswith(LENGTH_PREFIX)
    }
    point.baselines = {
        k[len(BASELINE_PREFIX) :]: v
        for k, v in mean_metrics(group).items()
        if k.startswith(BASELINE_PREFIX)
    } or fallback_baselines(first)
    point.refused = all(is_refused_row(r) for r in group)
    point.capacity = [
        {"seed": r.get("seed"), **{k[9:]: v for k, v in r.items() if k.startswith("capacity.")}}
        for r in sorted(ok, key=lambda r: sort_key(r.get("seed")))
        if r.get("capacity.verdict") is not None
    ]
    point.note = why_not_ok([r for r in group if r.get("status") != OK])
    if ok and point.note:
        point.note = f"{point.not_ok} of {len(group)} seeds {point.note}"
    return point


def any_diverged(rows: list[dict]) -> bool:
    return any(r.get("status") == DIVERGED for r in rows)


def mean_metrics(rows: list[dict]) -> dict[str, float]:
    keys = dict.fromkeys(
        k for r in rows for k in r if k.startswith("test/") or k.startswith("val/")
    )
    means = {k: mean_std([r.get(k) for r in rows])[0] for k in keys}
    return {k: v for k, v in means.items() if v is not None}


def fallback_baselines(row: dict) -> dict[str, float]:
    """Chance for a record without baselines: the task rebuilt from its
    parameters, scored by its own `baselines` (if it has them) on a generated set."""
    params = {k[len("task.") :]: v for k, v in row.items() if k.startswith("task.")}
    params.pop("eval_seq_lens", None)
    chance = task_chance(row.get("task"), json.dumps(params, sort_keys=True))
    return {} if chance is None else {"chance": chance}


@cache
def task_chance(task: str | None, params_json: str) -> float | None:
    from tasks import build_task

    try:
        built = build_task(task, **json.loads(params_json))
        baselines = getattr(built, "baselines", None)
        return None if baselines is None else float(baselines(built.generate(500, 0))["chance"])
    except Exception:  # noqa: BLE001 - a report is drawn without the line rather than not at all
        return None


def covaries(points: list[Point], column: str, x: str) -> bool:
    """Whether `column` is a function of `x` within every (task, model): swept together with
    the x axis (seq_len = 8 x pairs; d_model and the state), it must not split lines."""
    values: dict[tuple, set[str]] = defaultdict(set)
    for p in points:
        if not missing(p.get(x)):
            values[(p.task, p.model, as_key(p.get(x)))].add(as_key(p.get(column)))
    return all(len(v) == 1 for v in values.values())
