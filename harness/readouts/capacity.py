"""A load curve's readout: how many bindings a run recalls, and whether its curve measures the
state or only the training (docs/background.md, "Reading a load curve").

A load curve is accuracy against load (MQAR's key-value pairs, a copy's length, ...), measured
on one model's final weights at every tested load. Two readouts come from it, `n(t)` at the
threshold t (`capacity.threshold`: `n90` at 0.9, `n80` at 0.8; the record's key is `n90`
whatever t is, and `level_name` gives the label) and `n50`:

- `n(t)`: the largest load at which accuracy is at least `t`, interpolated linearly in log load
  between the last tested load at or above `t` and the next one (`load_at`);
- the limit verdict, judged at the smallest tested load j whose binding-free floor f_j (the
  best baseline there) is at most 0.5, where a guess without binding cannot pass. With a_j the
  accuracy there and se_j its sampling error (`sampling_error`), the run has *learned to bind*
  when a_j > f_j + max(2 se_j, 0.1 (1 - f_j)) (the floor margin of
  `harness.readouts.convergence.left_floor`, and more than the noise):
    - `not_limited`: a_j >= t and every tested load from j up holds t; n(t) is right-censored
      at the largest tested load ("holds every tested load, up to 16");
    - `capacity_limited`: a converged run with a_j >= t in which some larger load falls below
      t (n(t) read between two tested loads; `near_ceiling` where n(t) lies within a quarter
      of the largest tested load: its readout is then a lower bound, and larger loads would
      read it); or a_j < t in a run that learned to bind and converged: its state ran out of
      room below j, so n(t) < j, a left-censored readout;
    - `training_limited`: a run at the floor (`at_floor`, whatever its validation curve did),
      or a run still rising (`still_rising`) that does not hold every tested load: its
      readout is a lower bound, since more steps can only raise it. A still-rising run is never
      `capacity_limited`.

Each readout carries its censoring: `left` (n < the bound), `right` (n >= the bound: the
readout of a run still rising, which more steps can only raise; one that holds the largest
tested load; or one within a quarter of it, `CEILING`, of a run not judged converged, where
the task and not the state may hold it down), `interval` (a converged run that fell below t
within that quarter, between two tested loads: low <= n < high) or None (read between two
tested loads, below the ceiling). The readouts' sampling error is
`harness.readouts.readout_error`."""

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from harness.readouts.convergence import (
    AT_FLOOR,
    CONVERGED,
    FLOOR_MARGIN,
    MIN_DELTA,
    NOISE_SIGMAS,
    STILL_RISING,
    training_state,
)
from harness.readouts.readout_error import readout_errors

NOT_LIMITED = "not_limited"
CAPACITY_LIMITED = "capacity_limited"
TRAINING_LIMITED = "training_limited"
VERDICTS = (NOT_LIMITED, CAPACITY_LIMITED, TRAINING_LIMITED)

HOLDS_EVERY_LOAD = "holds_every_load"
FALLS_WITHIN = "falls_within_tested_loads"
NEAR_CEILING = "near_ceiling"
BELOW_JUDGING_LOAD = "below_judging_load"
FLOOR_AT_JUDGING_LOAD = "at_floor"
RISING_BELOW_JUDGING_LOAD = "still_rising"
RISING_PAST_JUDGING_LOAD = "still_rising_lower_bound"
WHY = {
    HOLDS_EVERY_LOAD: "holds every tested load",
    FALLS_WITHIN: "falls below the threshold within the tested loads",
    NEAR_CEILING: "falls below the threshold within a quarter of the largest tested load: "
    "read between the two tested loads it fell between where it converged, else a lower "
    "bound; test larger loads",
    BELOW_JUDGING_LOAD: "converged above the floor, below the threshold at the judging load",
    FLOOR_AT_JUDGING_LOAD: "not clearly above the binding-free floor at the judging load",
    RISING_BELOW_JUDGING_LOAD: "still rising, below the threshold at the judging load",
    RISING_PAST_JUDGING_LOAD: "still rising: its readout is a lower bound, not a limit",
}
"""The reason behind each verdict, as the report writes it."""

CEILING = 0.75
"""A readout at or above this fraction of the largest tested load is censored at the ceiling:
within a quarter of it, the next tested loads are too few to read the fall."""

LEFT, RIGHT, INTERVAL = "left", "right", "interval"
"""A censored readout: n < its value (left), n >= its value (right), or low <= n < high
between two tested loads (interval: `n90_low`, `n90_high` beside the interpolated `n90`)."""

JUDGING_FLOOR = 0.5
"""The verdict is judged at the smallest load whose binding-free floor is at most this."""
FLOOR_TOLERANCE = 0.02
"""How far a measured floor may sit above `JUDGING_FLOOR` and still count: a baseline that is
exactly 1/2 (MQAR at 2 pairs) reads up to a point above it on a few hundred test examples."""

ACC_BY = "test/acc_by/"
BASELINE_BY = "test/baseline_by/"
"""The record's per-load metrics: `test/acc_by/<load>/<value>` (the accuracy sliced by the
per-example load) and `test/baseline_by/<load>/<value>/<name>` (each binding-free baseline
on the examples at that load)."""


def level_name(level: float) -> str:
    """The readout's label at `level`: `n90` at 0.9, `n80` at 0.8, `n95` at 0.95."""
    return f"n{100 * level:.3g}"


def baseline_metrics_by_load(load: str, baselines: Mapping[int, Mapping[str, float]]) -> dict:
    """`{load value: {name: accuracy}}` as the record's `test/baseline_by/...` metrics."""
    return {
        f"{BASELINE_BY}{load}/{n}/{name}": value
        for n, by_name in baselines.items()
        for name, value in by_name.items()
    }


def load_of(metrics: Mapping[str, Any]) -> str | None:
    """The load a run was tested over: the slice that carries per-load baselines."""
    names = {k[len(BASELINE_BY) :].split("/", 1)[0] for k in metrics if k.startswith(BASELINE_BY)}
    return min(names) if names else None


def accuracy_by_load(metrics: Mapping[str, Any], load: str) -> dict[int, float]:
    """{load value: test accuracy} from a record's metrics (or a seed mean of them)."""
    prefix = f"{ACC_BY}{load}/"
    return {
        int(key[len(prefix) :]): value
        for key, value in metrics.items()
        if key.startswith(prefix) and value is not None
    }


def baselines_by_load(metrics: Mapping[str, Any], load: str) -> dict[str, dict[int, float]]:
    """{baseline name: {load value: accuracy}} from a record's metrics."""
    prefix = f"{BASELINE_BY}{load}/"
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for key, value in metrics.items():
        if key.startswith(prefix) and value is not None:
            number, name = key[len(prefix) :].split("/", 1)
            out[name][int(number)] = value
    return dict(out)


def floors_by_load(metrics: Mapping[str, Any], load: str) -> dict[int, float]:
    """{load value: the strongest binding-free baseline there}."""
    floors: dict[int, float] = {}
    for by_load in baselines_by_load(metrics, load).values():
        for n, value in by_load.items():
            floors[n] = max(value, floors.get(n, value))
    return floors


def load_at(curve: Mapping[int, float], level: float) -> float | None:
    """The largest load at which accuracy is >= `level`, interpolated in log load.

    With loads n_1 < ... < n_k and accuracies a_i, let i be the largest index with
    a_i >= level. If i = k, the readout is n_k (a lower bound). Otherwise a_{i+1} < level, and

        log n = log n_i + (a_i - level) / (a_i - a_{i+1}) * (log n_{i+1} - log n_i).

    None when no tested load reaches `level`."""
    points = sorted((n, a) for n, a in curve.items() if a is not None and not math.isnan(a))
    passing = [i for i, (_, acc) in enumerate(points) if acc >= level]
    if not passing:
        return None
    i = passing[-1]
    if i == len(points) - 1:
        return float(points[i][0])
    (n_lo, a_lo), (n_hi, a_hi) = points[i], points[i + 1]
    fraction = (a_lo - level) / (a_lo - a_hi)
    return math.exp(math.log(n_lo) + fraction * (math.log(n_hi) - math.log(n_lo)))


def judging_load(floors: Mapping[int, float]) -> int | None:
    """The smallest load whose binding-free floor is at most `JUDGING_FLOOR` (within
    `FLOOR_TOLERANCE`; MQAR: 2 pairs, where in-context guessing scores 1/2); None when every
    tested load can be guessed."""
    eligible = [n for n, floor in floors.items() if floor <= JUDGING_FLOOR + FLOOR_TOLERANCE]
    return min(eligible) if eligible else None


def sampling_error(acc: float, examples: float | None) -> float:
    """sqrt(a (1 - a) / m): the standard error of an accuracy `acc` over `examples` test
    examples (an upper bound: the answers of one example are correlated, so the example is the
    unit; `harness.readouts.convergence.standard_error`); 0 when the count is unknown."""
    if not examples or math.isnan(acc):
        return 0.0
    return math.sqrt(max(acc * (1 - acc), 0.0) / examples)


def bound(acc: float, floor: float, se: float) -> bool:
    """Clearly above the floor: acc > floor + max(2 se, 0.1 (1 - floor)) (module docstring)."""
    return acc > floor + max(NOISE_SIGMAS * se, FLOOR_MARGIN * (1 - floor))


def judged(
    curve: Mapping[int, float],
    floors: Mapping[int, float],
    threshold: float,
    training: str | None = None,
    examples: Mapping[int, float] | None = None,
) -> tuple[str, str] | None:
    """(verdict, why) of the module docstring; `training` is the run's `training_state`
    (`converged`, `still_rising`, `at_floor`; None: unknown, which never reads as converged),
    `examples` the test examples at each load (for the sampling error). None when no tested
    load has a floor at most 0.5, so nothing can be judged."""
    j = judging_load({n: f for n, f in floors.items() if n in curve})
    if j is None:
        return None
    acc = curve[j]
    if acc >= threshold:  # NaN (no answers at that load) counts as below
        if all(a >= threshold for n, a in curve.items() if n >= j):
            return NOT_LIMITED, HOLDS_EVERY_LOAD
        if training == STILL_RISING:
            return TRAINING_LIMITED, RISING_PAST_JUDGING_LOAD
        if load_at(curve, threshold) >= CEILING * max(curve):
            return CAPACITY_LIMITED, NEAR_CEILING
        return CAPACITY_LIMITED, FALLS_WITHIN
    se = sampling_error(acc, (examples or {}).get(j))
    if math.isnan(acc) or not bound(acc, floors[j], se) or training == AT_FLOOR:
        return TRAINING_LIMITED, FLOOR_AT_JUDGING_LOAD
    if training == "converged":
        return CAPACITY_LIMITED, BELOW_JUDGING_LOAD
    return TRAINING_LIMITED, RISING_BELOW_JUDGING_LOAD


def verdict(
    curve: Mapping[int, float],
    floors: Mapping[int, float],
    threshold: float,
    training: str | None = None,
    examples: Mapping[int, float] | None = None,
) -> str | None:
    """The verdict alone (`judged`)."""
    found = judged(curve, floors, threshold, training, examples)
    return found[0] if found else None


def censoring(
    value: float | None, loads: Sequence[int], at: int | None, training: str | None
) -> tuple[float | None, str | None, tuple[int, int] | None]:
    """(readout, censoring, bracket) of an n(t) read as `value` off a curve tested at `loads`:
    left-censored at the judging load `at` where it lies below it (or no load reached the
    level: there is nothing to read below `at`, where a guess passes); right-censored where
    the run is still rising (more steps can only raise it) or holds the largest tested load;
    within a quarter of the largest tested load (`CEILING`), interval-censored between the two
    tested loads it fell between when the run converged (the fall was seen; `bracket` is
    them), else right-censored (the task, not the state, may hold it down)."""
    if at is not None and (value is None or value < at):
        return float(at), LEFT, None
    if value is None:
        return None, None, None
    largest = max(loads)
    if training == STILL_RISING or value >= largest:
        return value, RIGHT, None
    if value >= CEILING * largest:
        if training != CONVERGED:
            return value, RIGHT, None
        low = max(n for n in loads if n <= value)
        return value, INTERVAL, (low, min(n for n in loads if n > value))
    return value, None, None


def readout(
    curve: Mapping[int, float],
    floors: Mapping[int, float],
    threshold: float,
    training: str | None = None,
    examples: Mapping[int, float] | None = None,
) -> dict:
    """The record's `capacity`: `n90` (at `threshold`: see `level_name`) and `n50`, each with
    its censoring (`n90_censoring`, `n50_censoring`: `left`, `right` or None) and its sampling
    error (`n90_se`, `n90_se_log`, ...: `harness.readouts.readout_error`, from the
    `examples`); the `verdict` and `why` (`judged`), the `threshold`, the load it was judged at
    (`judged_at`), the run's `training` state, and `censored`: the readouts that are lower
    bounds."""
    at = judging_load({n: f for n, f in floors.items() if n in curve})
    found = judged(curve, floors, threshold, training, examples)
    verdict_, why = found if found else (None, None)
    out: dict[str, Any] = {"verdict": verdict_, "why": why, "threshold": threshold}
    out.update(judged_at=at, training=training)
    for name, level in (("n90", threshold), ("n50", 0.5)):
        value, kind, bracket = censoring(load_at(curve, level), list(curve), at, training)
        out[name], out[f"{name}_censoring"] = value, kind
        out[f"{name}_low"], out[f"{name}_high"] = bracket or (None, None)
        inside = kind in (None, INTERVAL) or (kind == RIGHT and value < max(curve))
        errors = readout_errors(curve, examples, level) if inside else None
        out[f"{name}_se"], out[f"{name}_se_log"] = errors or (None, None)
    out["censored"] = [name for name in ("n90", "n50") if out[f"{name}_censoring"] == RIGHT]
    return out


def examples_by_load(curve: Mapping[int, float], num_test: float | None) -> dict[int, float]:
    """The test examples expected at each tested load: `num_test` in equal shares (the presets
    test each load in equal shares: `load_dist: log2` or equal `load_weights`); empty when the
    count is unknown."""
    if not num_test or not curve:
        return {}
    return {n: num_test / len(curve) for n in curve}


def readout_of(
    metrics: Mapping[str, Any],
    threshold: float,
    train: Mapping[str, Any] | None = None,
    num_test: float | None = None,
    min_delta: float = MIN_DELTA,
    num_val: int | None = None,
) -> dict | None:
    """`readout` of a record's per-load metrics at `threshold`, with the `load` it was read
    over; `train` (the record's `train`: `converged`, `val_curve`, `floor`) gives the training
    state (`harness.readouts.convergence.training_state`, with `min_delta` and the `num_val`
    validation examples), `num_test` the test examples (`examples_by_load`). None when the run
    was not tested on more than one load."""
    load = load_of(metrics)
    curve = accuracy_by_load(metrics, load) if load else {}
    if len(curve) < 2:
        return None
    training = training_state(dict(train), min_delta, num_val) if train else None
    floors = floors_by_load(metrics, load)
    examples = examples_by_load(curve, num_test)
    return {"load": load, **readout(curve, floors, threshold, training, examples)}


def shown(capacity: Mapping[str, Any], name: str, with_error: bool = False) -> str:
    """A readout as the console and the report print it: `12.3`, `>=16` where it is a lower
    bound (the largest tested load, or a run still rising), `<2` where it lies below the
    judging load, `[48, 64)` between two tested loads, `-` where there is none;
    `with_error`: `12.3 ± 0.8` (its sampling error)."""
    value = capacity.get(name)
    if value is None:
        return "-"
    kind = capacity.get(f"{name}_censoring")
    if kind is None and name in (capacity.get("censored") or []):
        kind = RIGHT
    if kind == INTERVAL:
        return f"[{capacity[f'{name}_low']:g}, {capacity[f'{name}_high']:g})"
    sign = {LEFT: "<", RIGHT: ">="}.get(kind, "")
    text = f"{sign}{value:.3g}"
    se = capacity.get(f"{name}_se")
    if with_error and kind != LEFT and se is not None and not math.isnan(se):
        text += f" ± {se:.2g}"
    return text
