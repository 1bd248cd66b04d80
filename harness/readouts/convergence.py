"""When to stop training, and whether a run converged: the validation curve, a threshold
(`early_stop_acc`) and a plateau, one definition shared by the stopping rule and the record's
verdict (`train.converged`).

Only the threshold stops training. A plateau never cuts the learning-rate schedule short: it
judges the verdict, never the budget (a run stopped half-way down its cosine schedule has
not had the low learning rates that settle it). A gain counts only when it exceeds the
validation set's noise (`required_gain`)."""

import math

Curve = list[list[float]]
"""[[step, val_acc], ...] in order of validation."""


def reached(curve: Curve, threshold: float | None) -> bool:
    """Some validation accuracy is >= `threshold` (None: never)."""
    return threshold is not None and any(acc >= threshold for _, acc in curve)


def standard_error(acc: float, num_examples: int) -> float:
    """An upper bound on the standard error of a validation accuracy `acc` measured on
    `num_examples` examples: sqrt(acc (1 - acc) / n). Answers of one example are correlated
    (one lookup circuit serves them all), so the example, not the answer, is the unit; the
    per-example accuracy lies in [0, 1] with mean `acc`, so its variance is at most
    acc (1 - acc)."""
    return math.sqrt(max(acc * (1 - acc), 0.0) / num_examples)


NOISE_SIGMAS = 2.0
"""A gain must exceed this many standard errors of the validation accuracy to count."""


def required_gain(best: float, min_delta: float, num_examples: int | None) -> float:
    """The gain a validation must make over the `best` before it to count as rising:
    max(min_delta, 2 SE(best)), SE from `standard_error` (with `num_examples` None, min_delta
    alone). At 500 examples and acc 0.86 the noise term is 0.031, above the default 0.01."""
    if num_examples is None:
        return min_delta
    return max(min_delta, NOISE_SIGMAS * standard_error(best, num_examples))


def still_rising(
    curve: Curve, patience: int, min_delta: float, num_examples: int | None = None
) -> bool:
    """Validation accuracy is still rising at the end of `curve`:

        max(last `patience` accuracies) > best + required_gain(best, min_delta, n),

    best = max(all earlier accuracies): one of the last `patience` validations improved on
    everything before it by more than `min_delta` and by more than the noise of a validation
    set of `num_examples` examples (`required_gain`). A curve of at most `patience` points
    has no "before" and counts as rising (too short to judge). Its negation is a plateau:
    `patience` validations in a row without such a gain. A plateau is not a proof of
    convergence: a model that learns in a sudden jump (softmax forming its induction circuit)
    can sit on one first; `patience` x the validation interval is the wait this verdict
    allows for such a jump."""
    if len(curve) <= patience:
        return True
    accuracies = [acc for _, acc in curve]
    best = max(accuracies[:-patience])
    return max(accuracies[-patience:]) > best + required_gain(best, min_delta, num_examples)


FLOOR_MARGIN = 0.1
"""The fraction of the way from the floor to perfect recall a curve must cover to have left
the floor (`left_floor`)."""


def left_floor(curve: Curve, floor: float, min_delta: float) -> bool:
    """The best accuracy of `curve` beat `floor` (the strongest binding-free baseline on the
    validation set) by more than max(min_delta, FLOOR_MARGIN (1 - floor)): a tenth of the way
    to perfect recall, 0.0875 above MQAR's 1/8. A run stuck a point or two above the floor
    (0.145 against 0.125) has learned no binding; it has only guessed a little better."""
    margin = max(min_delta, FLOOR_MARGIN * (1 - floor))
    return bool(curve) and max(acc for _, acc in curve) > floor + margin


def under_floor(best: float, chance: float | None, floor: float, min_delta: float) -> str | None:
    """Where an accuracy `best` at or under the binding-free `floor` sits against `chance` (one
    over the answer alphabet), within the margin max(min_delta, FLOOR_MARGIN (floor - chance)):
    "chance" (it has not learned which tokens answer), "between" (it is learning that), or None
    (it answers as a binding-free strategy does, or chance is unknown)."""
    if chance is None or chance >= floor:
        return None
    margin = max(min_delta, FLOOR_MARGIN * (floor - chance))
    if best <= chance + margin:
        return "chance"
    return "between" if best < floor - margin else None


def plateaued(
    curve: Curve, floor: float, patience: int, min_delta: float, num_examples: int | None = None
) -> bool:
    """The curve ends on a plateau above the floor: it `left_floor` and is not
    `still_rising`. A curve flat at the floor is no plateau: every model on a recall task
    first sits at the floor for a number of steps nobody can predict before it jumps
    (softmax forming its induction circuit), so a run still there is neither stopped nor,
    when its budget ends, converged: "cannot learn" and "has not learned yet" look alike."""
    rising = still_rising(curve, patience, min_delta, num_examples)
    return left_floor(curve, floor, min_delta) and not rising


def converged(
    curve: Curve,
    threshold: float | None,
    patience: int,
    min_delta: float,
    floor: float,
    num_examples: int | None = None,
) -> bool:
    """`train.converged`: the threshold was reached, or the curve ends on a plateau above the
    floor (`plateaued`); false when the run ended (out of budget, or diverged) while still
    rising, or still at the floor."""
    return reached(curve, threshold) or plateaued(curve, floor, patience, min_delta, num_examples)


CONVERGED, STILL_RISING, AT_FLOOR = "converged", "still_rising", "at_floor"
TRAINING_STATES = (CONVERGED, STILL_RISING, AT_FLOOR)


def training_state(train: dict, min_delta: float = 0.01) -> str | None:
    """How a run's training ended, from its record's `train`: `converged` (`train.converged`),
    `at_floor` (not converged, and its validation curve never `left_floor`: flat at the
    binding-free floor, which is not "still rising"), or `still_rising` (not converged, off the
    floor); None when the record does not say."""
    if train.get("converged"):
        return CONVERGED
    if train.get("converged") is None:
        return None
    curve, floor = train.get("val_curve") or [], train.get("floor")
    if floor is not None and curve and not left_floor(curve, floor, min_delta):
        return AT_FLOOR
    return STILL_RISING
