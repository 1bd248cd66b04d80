"""When to stop training, and whether a run converged: the validation curve, a threshold
(`early_stop_acc`) and a plateau, one definition shared by the stopping rule and the record's
verdict (`train.converged`)."""

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

Curve = list[list[float]]
"""[[step, val_acc], ...] in order of validation."""


def reached(curve: Curve, threshold: float | None) -> bool:
    """Some validation accuracy is >= `threshold` (None: never)."""
    return threshold is not None and any(acc >= threshold for _, acc in curve)


def still_rising(curve: Curve, patience: int, min_delta: float) -> bool:
    """Validation accuracy is still rising at the end of `curve`:

        max(last `patience` accuracies) > max(all earlier accuracies) + min_delta,

    i.e. one of the last `patience` validations improved on everything before it by more than
    `min_delta`. A curve of at most `patience` points has no "before" and counts as rising
    (too short to judge). Its negation is a plateau: `patience` validations in a row without
    such a gain. A plateau is not a proof of convergence: a model that learns in a sudden
    jump (softmax forming its induction circuit) can sit on one first; `patience` x the
    validation interval is the wait this verdict allows for such a jump."""
    if len(curve) <= patience:
        return True
    accuracies = [acc for _, acc in curve]
    return max(accuracies[-patience:]) > max(accuracies[:-patience]) + min_delta


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


def plateaued(curve: Curve, floor: float, patience: int, min_delta: float) -> bool:
    """The curve ends on a plateau above the floor: it `left_floor` and is not
    `still_rising`. A curve flat at the floor is no plateau: every model on a recall task
    first sits at the floor for a number of steps nobody can predict before it jumps
    (softmax forming its induction circuit), so a run still there is neither stopped nor,
    when its budget ends, converged: "cannot learn" and "has not learned yet" look alike."""
    return left_floor(curve, floor, min_delta) and not still_rising(curve, patience, min_delta)


def converged(
    curve: Curve, threshold: float | None, patience: int, min_delta: float, floor: float
) -> bool:
    """`train.converged`: the threshold was reached, or the curve ends on a plateau above the
    floor (`plateaued`); false when the run ended (out of budget, or diverged) while still
    rising, or still at the floor."""
    return reached(curve, threshold) or plateaued(curve, floor, patience, min_delta)


class ConvergenceStop(L.Callback):
    """Records `curve` ([step, val/acc] after every validation, the final one included) and
    stops training when `val/acc` reaches `threshold` (None: never) or, if `stop_on_plateau`,
    when the curve reaches a plateau above `floor` (`plateaued`). Its curve is part of the
    checkpoint, so a resumed run has the whole curve. Must come before the checkpoint
    callback, so the saved curve includes the validation just made."""

    def __init__(
        self,
        threshold: float | None,
        patience: int,
        min_delta: float,
        stop_on_plateau: bool,
        floor: float,
    ) -> None:
        self.threshold, self.patience, self.min_delta = threshold, patience, min_delta
        self.stop_on_plateau, self.floor = stop_on_plateau, floor
        self.curve: Curve = []
        self.stopped: str | None = None

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or "val/acc" not in trainer.callback_metrics:
            return
        step, acc = trainer.global_step, float(trainer.callback_metrics["val/acc"])
        if self.curve and self.curve[-1][0] == step:
            self.curve[-1] = [step, acc]  # validated again at the same weights
        else:
            self.curve.append([step, acc])
        if trainer.state.fn != TrainerFn.FITTING:
            return  # a validation outside fit (the final one) only records
        if reached([[step, acc]], self.threshold):
            self.stopped = "early_stop_acc"
        elif self.stop_on_plateau and plateaued(
            self.curve, self.floor, self.patience, self.min_delta
        ):
            self.stopped = "plateau"
        # collective under DDP; every rank has the same gathered val/acc, so the same decision
        stop = trainer.strategy.reduce_boolean_decision(self.stopped is not None, all=False)
        trainer.should_stop = trainer.should_stop or stop

    def verdict(self) -> bool:
        return converged(self.curve, self.threshold, self.patience, self.min_delta, self.floor)

    def state_dict(self) -> dict:
        return {"curve": self.curve, "stopped": self.stopped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.curve = [list(point) for point in state_dict["curve"]]
        self.stopped = state_dict.get("stopped")
