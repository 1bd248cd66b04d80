"""The validation curve a run records, and its convergence verdict; the rule itself
(threshold, plateau, floor) is `harness.readouts.convergence`. Stopping at `early_stop_acc` is
Lightning's `EarlyStopping` (`stopping_threshold`), beside it in `harness.train.make_trainer`."""

import lightning as L

from harness.readouts.convergence import Curve, converged


class ValidationCurve(L.Callback):
    """Records `curve` ([step, val/acc] after every validation, the final one outside fit
    included); `verdict` judges it: `threshold` reached, or a plateau above `floor` (gains
    judged against a validation set of `num_examples`). Its curve is part of the checkpoint,
    so a resumed run has the whole curve (Lightning runs checkpoint callbacks last, so the
    saved curve includes the validation just made)."""

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

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or "val/acc" not in trainer.callback_metrics:
            return
        step, acc = trainer.global_step, float(trainer.callback_metrics["val/acc"])
        if self.curve and self.curve[-1][0] == step:
            self.curve[-1] = [step, acc]  # validated again at the same weights
        else:
            self.curve.append([step, acc])

    def verdict(self) -> bool:
        return converged(self.curve, self.threshold, self.min_delta, self.floor, self.num_examples)

    def state_dict(self) -> dict:
        return {"curve": self.curve}

    def load_state_dict(self, state_dict: dict) -> None:
        self.curve = [list(point) for point in state_dict["curve"]]
