"""A Lightning `Trainer` for a test or a study rather than a run: no logger, progress bar,
checkpoints, model summary or sanity validation."""

from typing import Any

import lightning as L


def quiet_trainer(**settings: Any) -> L.Trainer:
    """`L.Trainer` with the quiet settings; `settings` add to or override them."""
    quiet = {
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    return L.Trainer(**{**quiet, **settings})
