"""The Lightning callback that records the validation curve and stops training at
`early_stop_acc`; the rule itself (threshold, plateau, floor) is `harness.readouts.convergence`."""

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from harness.readouts.convergence import Curve, converged, reached


class ConvergenceStop(L.Callback):
    """Records `curve` ([step, val/acc] after every validation, the final one included) and
    stops training when `val/acc` reaches `threshold` (None: never); a plateau above `floor`
    (`plateaued`, gains judged against a validation set of `num_examples`) only judges the
    verdict. Its curve is part of the checkpoint, so a resumed run has the whole curve. Must
    come before the checkpoint callback, so the saved curve includes the validation just
    made."""

    def __init__(
        self,
        threshold: float | None,
        min_delta: float,
        floor: float,
        num_examples: int | None = None,
    ) -> None:
        self.threshold, self.min_delta = threshold, min_delta
        self.floor, self.num_examples = floor, num_examples
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
        # collective under DDP; every rank has the same gathered val/acc, so the same decision
        stop = trainer.strategy.reduce_boolean_decision(self.stopped is not None, all=False)
        trainer.should_stop = trainer.should_stop or stop

    def verdict(self) -> bool:
        return converged(self.curve, self.threshold, self.min_delta, self.floor, self.num_examples)

    def state_dict(self) -> dict:
        return {"curve": self.curve, "stopped": self.stopped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.curve = [list(point) for point in state_dict["curve"]]
        self.stopped = state_dict.get("stopped")
