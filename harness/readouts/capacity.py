"""A load curve's readout: how many bindings a run recalls, and whether its curve measures the
state or only the training (docs/background.md, "Reading a load curve").

A load curve is accuracy against load (MQAR's key-value pairs, a copy's length, ...), measured
on one model's final weights at every tested load. Two readouts come from it:

- `n(t)`: the largest load at which accuracy is at least `t`, interpolated linearly in log load
  between the last tested load at or above `t` and the next one;
- the limit verdict, judged at the smallest tested load whose binding-free floor (the best
  baseline there) is at most 0.5, where a guess without binding cannot pass:
    - `not_limited`: accuracy >= threshold at every tested load;
    - `capacity_limited`: >= threshold at that load, below it at some larger one: the run
      retrieves while its state has room, so `n90` measures the state;
    - `training_limited`: below the threshold at that load: it has not learned to retrieve
      where the state has room, so its readouts say nothing about the state.
"""

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

NOT_LIMITED = "not_limited"
CAPACITY_LIMITED = "capacity_limited"
TRAINING_LIMITED = "training_limited"
VERDICTS = (NOT_LIMITED, CAPACITY_LIMITED, TRAINING_LIMITED)

JUDGING_FLOOR = 0.5
"""The verdict is judged at the smallest load whose binding-free floor is at most this."""
FLOOR_TOLERANCE = 0.02
"""How far a measured floor may sit above `JUDGING_FLOOR` and still count: a baseline that is
exactly 1/2 (MQAR at 2 pairs) reads up to a point above it on a few hundred test examples."""
DEFAULT_THRESHOLD = 0.9

ACC_BY = "test/acc_by/"
BASELINE_BY = "test/baseline_by/"
"""The record's per-load metrics: `test/acc_by/<load>/<value>` (the accuracy sliced by the
per-example load) and `test/baseline_by/<load>/<value>/<name>` (each binding-free baseline
on the examples at that load)."""


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
    a_i >= level. If i = k, the readout is n_k (every tested load passes up to there: a lower
    bound, see `censored`). Otherwise a_{i+1} < level, and

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


def verdict(
    curve: Mapping[int, float], floors: Mapping[int, float], threshold: float = DEFAULT_THRESHOLD
) -> str | None:
    """`not_limited`, `capacity_limited` or `training_limited` (module docstring); None when no
    tested load has a floor at most 0.5, so nothing can be judged."""
    judged = judging_load({n: f for n, f in floors.items() if n in curve})
    if judged is None:
        return None
    if not curve[judged] >= threshold:  # NaN (no answers at that load) counts as below
        return TRAINING_LIMITED
    if all(acc >= threshold for n, acc in curve.items() if n >= judged):
        return NOT_LIMITED
    return CAPACITY_LIMITED


def readout(
    curve: Mapping[int, float], floors: Mapping[int, float], threshold: float = DEFAULT_THRESHOLD
) -> dict:
    """The record's `capacity`: `n90` (at `threshold`), `n50`, the `verdict`, the `threshold`,
    the load it was judged at (`judged_at`), and `censored`: the readouts that equal the
    largest tested load, and are therefore lower bounds (the curve never fell below the level
    within the tested range)."""
    largest = max(curve)
    n90, n50 = load_at(curve, threshold), load_at(curve, 0.5)
    return {
        "n90": n90,
        "n50": n50,
        "verdict": verdict(curve, floors, threshold),
        "threshold": threshold,
        "judged_at": judging_load({n: f for n, f in floors.items() if n in curve}),
        "censored": [name for name, n in (("n90", n90), ("n50", n50)) if n == largest],
    }


def readout_of(metrics: Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD) -> dict | None:
    """`readout` of a record's per-load metrics, with the `load` it was read over; None when
    the run was not tested on more than one load."""
    load = load_of(metrics)
    curve = accuracy_by_load(metrics, load) if load else {}
    if len(curve) < 2:
        return None
    return {"load": load, **readout(curve, floors_by_load(metrics, load), threshold)}


def shown(capacity: Mapping[str, Any], name: str) -> str:
    """A readout as the console and the report print it: `12.3`, `>=64` where it is the largest
    tested load (a lower bound), `-` where no tested load reached the level."""
    value = capacity.get(name)
    if value is None:
        return "-"
    return (">=" if name in (capacity.get("censored") or []) else "") + f"{value:.3g}"
