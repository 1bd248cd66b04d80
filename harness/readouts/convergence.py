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


MIN_DELTA = 0.01
"""`plateau.min_delta`'s default (declared here, the lowest wing; `harness.config.settings`
takes it): the least gain or floor margin that counts where the noise is unknown."""


LAST_PART = 1 / 3
"""The part of training whose gain judges convergence: the last third of the steps."""


def required_gain(best: float, min_delta: float, num_examples: int | None) -> float:
    """The gain the last part of training must make over the `best` before it to count as
    rising: 2 SE(best) (`standard_error`), the validation set's noise; with `num_examples`
    None, `min_delta` stands in for it. At 500 examples and acc 0.86 it is 0.031."""
    if num_examples is None:
        return min_delta
    return NOISE_SIGMAS * standard_error(best, num_examples)


def last_part(curve: Curve) -> tuple[list[float], list[float]]:
    """(the accuracies before, those within) the last `LAST_PART` of the curve's steps:
    validations at steps above (1 - 1/3) x the final step are within."""
    cut = (1 - LAST_PART) * curve[-1][0]
    return [a for s, a in curve if s <= cut], [a for s, a in curve if s > cut]


def still_rising(curve: Curve, min_delta: float, num_examples: int | None = None) -> bool:
    """Validation accuracy still rose over the last third of training:

        max(accuracies in the last third) > best + required_gain(best, min_delta, n),

    best = max(accuracies before it): the last third of the steps gained more than twice the
    standard error of a validation set of `num_examples` examples (`required_gain`). A curve
    with fewer than two validations before its last third, or none within it, is too short to
    judge and counts as rising. Its negation is convergence off the floor. It is not a proof
    of convergence: a model that learns in a sudden jump (softmax forming its induction
    circuit) can sit still for a third of its budget first."""
    if not curve:
        return True
    before, within = last_part(curve)
    if len(before) < 2 or not within:
        return True
    best = max(before)
    return max(within) > best + required_gain(best, min_delta, num_examples)


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
    curve: Curve, floor: float, min_delta: float, num_examples: int | None = None
) -> bool:
    """The curve ends on a plateau above the floor: it `left_floor` and is not
    `still_rising` (its last third gained less than twice the validation noise). A curve
    flat at the floor is no plateau: every model on a recall task first sits at the floor for
    a number of steps nobody can predict before it jumps (softmax forming its induction
    circuit), so a run still there is neither stopped nor, when its budget ends, converged:
    "cannot learn" and "has not learned yet" look alike."""
    rising = still_rising(curve, min_delta, num_examples)
    return left_floor(curve, floor, min_delta) and not rising


def converged(
    curve: Curve,
    threshold: float | None,
    min_delta: float,
    floor: float,
    num_examples: int | None = None,
) -> bool:
    """`train.converged`: the threshold was reached, or the curve ends on a plateau above the
    floor (`plateaued`); false when the run ended (out of budget, or diverged) while still
    rising, or still at the floor."""
    return reached(curve, threshold) or plateaued(curve, floor, min_delta, num_examples)


CONVERGED, STILL_RISING, AT_FLOOR = "converged", "still_rising", "at_floor"


def training_state(
    train: dict, min_delta: float = MIN_DELTA, num_examples: int | None = None
) -> str | None:
    """How a run's training ended, judged anew from its record's `train` by one rule for every
    run: `converged` (stopped at `early_stop_acc`, or off the floor and its last third gained
    less than twice the validation noise of `num_examples` examples: `still_rising`),
    `at_floor` (its validation curve never `left_floor`), or `still_rising`; a record without
    a validation curve keeps its own `train.converged`; None when the record does not say."""
    if train.get("converged") is None:
        return None
    curve, floor = train.get("val_curve") or [], train.get("floor")
    if train.get("stopped_by") == "early_stop_acc":
        return CONVERGED
    if not curve or floor is None:
        return CONVERGED if train["converged"] else STILL_RISING
    if not left_floor(curve, floor, min_delta):
        return AT_FLOOR
    return STILL_RISING if still_rising(curve, min_delta, num_examples) else CONVERGED
