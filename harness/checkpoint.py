"""Checkpoints: kill-safe training state, and the final weights a run can keep.

A run saves `<checkpoint.dir>/<config_hash>/last.ckpt` after every validation (written to a
temp file, then renamed, so a kill never leaves a torn checkpoint). Re-running the same
command finds it and resumes; a run that ends (ok or diverged) deletes it.

With `checkpoint.keep=true` a run that ends ok also keeps its final weights beside its record:
`<run dir>/model.pt`, the language model's `state_dict` (plain torch), which
`harness.evaluate` re-tests at other lengths or task settings.
"""

import contextlib
import logging
import os
import shutil
from pathlib import Path

import lightning as L
import torch

log = logging.getLogger(__name__)

WEIGHTS = "model.pt"
"""The kept final weights, in the run's folder beside `results.json`."""


class SaveLast(L.Callback):
    """Save the whole training state (model, optimizer, loops, callbacks) after validation."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)


def checkpoint_path(folder: str | Path, digest: str) -> Path:
    return Path(folder) / digest / "last.ckpt"


def resumable(path: Path) -> tuple[Path | None, int]:
    """(`path`, its step) if it holds a readable checkpoint, else (None, 0); a corrupt one is
    reported and ignored."""
    if not path.exists():
        return None, 0
    try:
        step = int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])
    except Exception as error:  # noqa: BLE001 - any unreadable file means start afresh
        log.warning("ignoring unreadable checkpoint %s (%s)", path, error)
        return None, 0
    log.info("resuming from %s at step %d", path, step)
    return path, step


def discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path.parent)


def keep_weights(model: torch.nn.Module, run_dir: Path) -> Path:
    """Save `model.state_dict()` to `<run_dir>/model.pt` (temp file, then rename)."""
    path = Path(run_dir) / WEIGHTS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{WEIGHTS}.{os.getpid()}.tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    return path


def kept_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The state dict a run kept (`FileNotFoundError` if it kept none)."""
    return torch.load(Path(run_dir) / WEIGHTS, map_location="cpu", weights_only=True)
