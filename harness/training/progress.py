"""Progress off a terminal (`nohup`, SLURM, `| tee`): one line per validation, so that a log
shows a long run is alive, yet stays small.

    [job 2] step 300/1500  val acc 0.125  4.9k tokens/s  ~2m10s left

At most `LINES_PER_JOB` lines a run, whatever its validation interval: a validation is printed
when it is the first, the last of the budget, or a `1 / LINES_PER_JOB` of `max_steps` after the
last one printed. Time left is the rest of the budget at this segment's pace (validations
included); early stopping on `early_stop_acc` can only make it shorter. On a terminal
Lightning's progress bar shows the same (`harness.training.console.show_progress_bar`)."""

import time
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from harness.config.hydra_job import job_number
from harness.training.console import progress_line, show_progress_lines

LINES_PER_JOB = 12
"""The most progress lines one run prints."""


def progress_line_due(
    step: int, max_steps: int, printed_at: int | None, lines: int = LINES_PER_JOB
) -> bool:
    """Whether the validation at `step` gets a line, the last line having been at `printed_at`
    (None: none yet): the first, the budget's last, and one every `max_steps / lines` steps."""
    if printed_at is None or step >= max_steps:
        return True
    return step >= printed_at + max_steps / lines


class ProgressLines(L.Callback):
    """One line per validation while fitting (rank 0), when progress is asked for
    (`trainer.enable_progress_bar`) and the console is not a terminal."""

    def __init__(self, requested: bool, lines: int = LINES_PER_JOB) -> None:
        self.enabled, self.lines = show_progress_lines(requested), lines
        self.start, self.start_step, self.tokens, self.printed_at = 0.0, 0, 0, None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start, self.start_step = time.perf_counter(), trainer.global_step
        self.tokens, self.printed_at = 0, None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        if self.enabled:
            self.tokens += batch["inputs"].numel() * trainer.world_size

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if not (self.enabled and fitting and trainer.is_global_zero):
            return
        step, max_steps = trainer.global_step, trainer.max_steps
        if not progress_line_due(step, max_steps, self.printed_at, self.lines):
            return
        self.printed_at = step
        elapsed, done = time.perf_counter() - self.start, step - self.start_step
        acc = trainer.callback_metrics.get("val/acc")
        line = progress_line(
            step,
            max_steps,
            None if acc is None else float(acc),
            self.tokens / elapsed if elapsed > 0 and self.tokens else None,
            (max_steps - step) * elapsed / done if done > 0 else None,
            job_number(),
        )
        print(line, flush=True)
