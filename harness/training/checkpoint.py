"""Checkpoints: kill-safe training state, and the final weights a run can keep.

A run saves `<checkpoint.dir>/<config_hash>/last.ckpt` after every validation (Lightning's
`ModelCheckpoint`, `save_last`: written to a temp file, then moved, so a kill never leaves a
torn checkpoint). Re-running the same
command finds it and resumes; a run that ends (ok or diverged) deletes it.

A resumed run is one run: the checkpoint carries its training segments (one per process
that trained it, `Segments`), so that its wall time and throughput cover all of them, and
the id of its W&B run, which every segment continues (`Resumption.run_id`).

With `checkpoint.keep=true` a run that ends ok also keeps its final weights beside its record:
`<run dir>/model.pt`, the language model's `state_dict` (plain torch), which
`harness.evaluate` re-tests at other lengths or task settings.
"""

import contextlib
import logging
import os
import secrets
import shutil
import string
import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

log = logging.getLogger(__name__)

WEIGHTS = "model.pt"
"""The kept final weights, in the run's folder beside `results.json`."""


def save_last(path: Path) -> ModelCheckpoint:
    """Lightning's `ModelCheckpoint` writing the whole training state (model, optimizer, loops,
    callbacks) to `path` after every validation, over the one before: one file, whatever
    the step (`filename`, no version counter), written through fsspec's transaction (a temp
    file, then a move: Lightning's `_atomic_save`), so that a kill never leaves it torn."""
    return ModelCheckpoint(
        dirpath=path.parent, filename=path.stem, save_top_k=1, enable_version_counter=False
    )


def checkpoint_path(folder: str | Path, digest: str) -> Path:
    return Path(folder) / digest / "last.ckpt"


def segment(from_step: int, to_step: int, wall_s: float) -> dict:
    """One stretch of training in one process: `{"from_step", "to_step", "wall_s"}`."""
    return {"from_step": int(from_step), "to_step": int(to_step), "wall_s": round(wall_s, 3)}


class Segments(L.Callback):
    """The segments of training a run is made of, one per process that trained it (a run
    killed and resumed twice has three), and the W&B run id they share; both are part of the
    checkpoint. A killed process's segment is kept as of its last checkpoint: the steps after
    it are trained again by the next, so no time is counted twice and the segments tile the
    steps (each `from_step` is the one before's `to_step`). Must come before the checkpoint
    callback, so that the saved segment includes the validation just made."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.earlier: list[dict] = []
        self.started = time.perf_counter()
        self.current = segment(0, 0, 0.0)

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        step = trainer.global_step  # restored from the checkpoint by now
        self.current = segment(step, step, time.perf_counter() - self.started)

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        wall = time.perf_counter() - self.started
        self.current = segment(self.current["from_step"], trainer.global_step, wall)

    def close(self, to_step: int) -> list[dict]:
        """Every segment, this process's ending now at `to_step`."""
        wall = time.perf_counter() - self.started
        return [*self.earlier, segment(self.current["from_step"], to_step, wall)]

    def state_dict(self) -> dict:
        return {"run_id": self.run_id, "segments": [*self.earlier, self.current]}

    def load_state_dict(self, state_dict: dict) -> None:
        self.run_id = state_dict.get("run_id") or self.run_id
        self.earlier = [dict(s) for s in state_dict.get("segments", [])]


RUN_ID_CHARACTERS = string.ascii_lowercase + string.digits


def new_run_id() -> str:
    """A fresh W&B run id: 8 characters of [a-z0-9], as W&B draws its own."""
    return "".join(secrets.choice(RUN_ID_CHARACTERS) for _ in range(8))


@dataclass(frozen=True)
class Resumption:
    """Where a run starts: its checkpoint (None: afresh), the step that holds, and the id of
    the W&B run it continues (the checkpoint's, or a new one)."""

    path: Path | None
    step: int
    run_id: str


def resumable(path: Path) -> Resumption:
    """The checkpoint at `path` if it is readable, else a fresh start; a corrupt one is
    reported and ignored."""
    if not path.exists():
        return Resumption(None, 0, new_run_id())
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        step = int(saved["global_step"])
    except Exception as error:  # noqa: BLE001 - any unreadable file means start afresh
        log.warning("ignoring unreadable checkpoint %s (%s)", path, error)
        return Resumption(None, 0, new_run_id())
    # Lightning keeps a callback's state under its class's name (`Callback.state_key`)
    state = (saved.get("callbacks") or {}).get(Segments.__qualname__) or {}
    log.info("resuming from %s at step %d", path, step)
    return Resumption(path, step, state.get("run_id") or new_run_id())


def saved_step(path: Path) -> int | None:
    """The optimiser step the checkpoint at `path` holds, None when there is none to read."""
    saved = resumable(path)
    return saved.step if saved.path is not None else None


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
