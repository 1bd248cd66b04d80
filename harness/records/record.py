"""A run's record (`results.json`, README "The results record"): a new one, its `state`, and
writing it."""

import json
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.hashing import params_of
from harness.config.hydra_job import group_choices
from harness.records.files import jsonable, write_atomic
from harness.records.schema import FAILED, RECORD


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
        "choices": group_choices(),  # the config groups' options: a swept +state_size=... too
        "num_params": None,
        "state": None,
        "metrics": {},
        "train": None,
        "capacity": None,  # tested over a range of loads: harness.readouts.capacity.readout_of
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
