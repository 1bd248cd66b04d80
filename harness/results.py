"""A run's record (`results.json`, README "The results record") and the sweep's `summary.jsonl`."""

import contextlib
import fcntl
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness.status import FAILED, RECORD, SUMMARY

HASH_EXCLUDED = (
    "logger",
    "hydra",
    "paths",
    "resume",
    "checkpoint",
    "output_dir",
    "compile",
    "capacity",
)
"""Top-level config keys that do not change a run's outcome (where files go, logging, how a
load curve is read)."""
HASH_EXCLUDED_DATA = ("cache_dir",)
HARNESS_KEYS = ("name", "eval_seq_lens", "test", "mixture")
"""Keys of a `task`/`model` group that are the harness's, not the constructor's: the test
lengths, the test set's parameter overrides (`task.test`) and a training mixture of task
settings (`task.mixture`, `harness.data`)."""
UNSET_TASK_KEYS = ("test", "mixture")
"""The task group's harness keys that, unset (null), leave the hash as it is without them."""


def config_hash(cfg: DictConfig) -> str:
    """Stable hash of the resolved config without paths and logger settings."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for key in HASH_EXCLUDED:
        resolved.pop(key, None)
    for key in HASH_EXCLUDED_DATA:
        resolved.get("data", {}).pop(key, None)
    task = resolved.get("task", {})
    for key in UNSET_TASK_KEYS:
        if task.get(key) is None:
            task.pop(key, None)
    resolved.get("trainer", {}).pop("enable_progress_bar", None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def jsonable(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither); containers recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def umask() -> int:
    """The process's file-creation mask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`; the file gets
    the mode a plain `open` would give it (0o666 less the umask), not mkstemp's 0o600, so
    that collaborators read it where the umask lets them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def params_of(cfg_group: DictConfig) -> dict:
    """A registry entry's parameters: its yaml group without the harness's own keys."""
    params = OmegaConf.to_container(cfg_group, resolve=True)
    for key in HARNESS_KEYS:
        params.pop(key, None)
    return params


def new_record(cfg: DictConfig, digest: str, run_dir: Path) -> dict:
    """The record of a run that has not finished yet: status `failed` until it does."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {
        "status": FAILED,
        "task": cfg.task.name,
        "model": cfg.model.name,
        "task_params": params_of(cfg.task),
        "model_params": params_of(cfg.model),
        "seq_len": cfg.task.get("seq_len"),
        "seed": cfg.seed,
        "config_hash": digest,
        "num_params": None,
        "state": None,
        "metrics": {},
        "train": None,
        "capacity": None,  # tested over a range of loads: harness.capacity.readout_of
        "wandb": None,
        "weights": None,  # the kept final weights' path with checkpoint.keep=true
        "run_dir": str(run_dir),
        "config": {k: v for k, v in resolved.items() if k not in ("logger", "hydra")},
    }


def state_record(model: torch.nn.Module, seq_len: int) -> dict:
    """Recurrent state needed to produce the next token at `seq_len` (the record's `state`);
    `model` is a `models.backbone.LanguageModel`. `rank_bound_per_layer`: the most bindings
    a linear read-out of one layer's state recovers exactly (`LanguageModel.rank_bound`,
    docs/background.md, section 17). `mixer_floats_per_layer` leaves every convolution's
    window out (`conv_floats_per_layer`: the shared one and the mixer's own); `knob` names
    the mixer's state knob (the key dimension per head, `Mixer.state_knob`) and its value,
    or is null for a mixer without one."""
    floats = model.state_size(seq_len)
    mixer = model.blocks[0].mixer
    knob = getattr(mixer, "state_knob", None)
    bytes_per_float = next(model.parameters()).element_size()
    return {
        "floats_per_layer": floats,
        "bytes_per_layer": floats * bytes_per_float,
        "bytes_total": floats * bytes_per_float * len(model.blocks),
        "grows_with_seq_len": model.state_size(2 * seq_len) > floats,
        "mixer_floats_per_layer": model.mixer_state_size(seq_len),
        "conv_floats_per_layer": model.conv_state_size(),
        "rank_bound_per_layer": model.rank_bound(seq_len),
        "knob": None if knob is None else {"name": knob, "value": getattr(mixer, knob)},
    }


def write_record(run_dir: Path, record: dict) -> Path:
    path = Path(run_dir) / RECORD
    write_atomic(path, json.dumps(jsonable(record), indent=2, sort_keys=True) + "\n")
    return path


def append_summary(sweep_dir: Path, record: dict) -> Path:
    """Append one line to `summary.jsonl` under an exclusive lock, so that concurrent jobs
    never interleave; each line is written with a single `write` call and fsynced."""
    path = Path(sweep_dir) / SUMMARY
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(jsonable(record), sort_keys=True) + "\n"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return path


def read_summary(sweep_dir: Path) -> list[dict]:
    """Every complete line of `summary.jsonl` (a torn last line from a kill is skipped)."""
    path = Path(sweep_dir) / SUMMARY
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records
