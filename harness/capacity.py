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
from collections.abc import Mapping

NOT_LIMITED = "not_limited"
CAPACITY_LIMITED = "capacity_limited"
TRAINING_LIMITED = "training_limited"
VERDICTS = (NOT_LIMITED, CAPACITY_LIMITED, TRAINING_LIMITED)

JUDGING_FLOOR = 0.5
"""The verdict is judged at the smallest load whose binding-free floor is at most this."""
DEFAULT_THRESHOLD = 0.9


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
    """The smallest load whose binding-free floor is at most `JUDGING_FLOOR` (MQAR: 2 pairs,
    where in-context guessing scores 1/2); None when every tested load can be guessed."""
    eligible = [n for n, floor in floors.items() if floor <= JUDGING_FLOOR]
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
