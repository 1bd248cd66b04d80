"""A run's record (`results.json`, README "The results record"): a new one, its `state`, and
writing it."""

import json
import subprocess
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.group_nodes import ROOT
from harness.config.hashing import params_of
from harness.config.hydra_job import group_choices
from harness.records.files import jsonable, write_atomic
from harness.records.record_model import Record
from harness.records.schema import RECORD
from models.stack import HYBRID, hybrid_label


def new_record(cfg: DictConfig, digest: str, run_dir: Path) -> dict:
    """The record of a run that has not finished yet (`Record`'s defaults: status `failed`
    until it does), as the dict the run fills in."""
    return Record(
        task=cfg.task.name,
        model=cfg.model.name,
        task_params=params_of(cfg.task),
        model_params=params_of(cfg.model),
        seq_len=integer(cfg.task.get("seq_len")),  # a refused value stays in `config`
        seed=integer(cfg.seed),
        config_hash=digest,
        commit=git("rev-parse", "HEAD"),
        choices=group_choices(),
        run_dir=str(run_dir),
        config=config_of(cfg),
    ).model_dump()


def git(*args: str) -> str | None:
    """`git <args>` run on the code's checkout, its output; None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def integer(value: object) -> int | None:
    """`value` where it is an int, else None (a run refused for it keeps it in its config)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def config_of(cfg: DictConfig) -> dict:
    """The record's `config`: the resolved config without the logger and Hydra's own."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in resolved.items() if k not in ("logger", "hydra")}


def state_record(model: torch.nn.Module, seq_len: int) -> dict:
    """Recurrent state needed to produce the next token at `seq_len` (the record's `state`);
    `model` is a `models.backbone.LanguageModel`. `layers`: each layer's own
    (`Block.state_record`: its mixer, floats, rank bound, knob). The stack's state and rank
    bound are its layers' sums (`*_stack`); the `*_per_layer` fields are the stack's mean
    over its layers, one layer's own when every layer has the same mixer.
    `rank_bound_per_layer`: the most bindings a linear read-out of a layer's state recovers
    exactly (docs/background.md, section 17). `mixer_floats_per_layer` leaves every
    convolution's window out (`conv_floats_per_layer`: the shared one and the mixer's own);
    `knob` names the mixer's state knob (the key dimension per head, `Mixer.state_knob`) and
    its value: null for a mixer without one, and for a hybrid (its layers carry theirs)."""
    layers = model.layer_states(seq_len)
    n = len(layers)
    bytes_per_float = next(model.parameters()).element_size()

    def stack(field: str) -> int:
        return sum(layer[field] for layer in layers)

    def per_layer(field: str) -> int | float:
        total = stack(field)
        return total // n if total % n == 0 else total / n

    first = layers[0]
    alike = all((lay["mixer"], lay["knob"]) == (first["mixer"], first["knob"]) for lay in layers)
    return {
        "floats_per_layer": per_layer("floats"),
        "bytes_per_layer": per_layer("floats") * bytes_per_float,
        "bytes_total": stack("floats") * bytes_per_float,
        "grows_with_seq_len": any(layer["grows_with_seq_len"] for layer in layers),
        "mixer_floats_per_layer": per_layer("mixer_floats"),
        "conv_floats_per_layer": per_layer("conv_floats"),
        "rank_bound_per_layer": per_layer("rank_bound"),
        "floats_stack": stack("floats"),
        "mixer_floats_stack": stack("mixer_floats"),
        "rank_bound_stack": stack("rank_bound"),
        "knob": first["knob"] if alike else None,
        "layers": layers,
    }


KV_CACHES = {"softmax": "T tokens", "sliding_window": "min(T, window) tokens"}
"""The mixers whose state is a KV cache, and what their rank bound counts: the tokens kept
(`rank_bound` in `models/mixers/softmax.py`, `sliding_window.py`), not H x D bindings. Every
layer of a stack caches the same tokens, so a stack of them holds one layer's bound, not the
layers' sum."""


def model_label(record: dict) -> str:
    """The model as run names and the report call it: its mixer, or a hybrid named by its
    layers (`gdn+softmax`, `models.stack.hybrid_label`)."""
    if record.get("model") != HYBRID:
        return record.get("model") or "?"
    layers = (record.get("model_params") or {}).get("layers") or []
    return hybrid_label([e if isinstance(e, str) else e.get("name", "?") for e in layers])


def write_record(run_dir: Path, record: dict) -> Path:
    path = Path(run_dir) / RECORD
    write_atomic(path, json.dumps(jsonable(record), indent=2, sort_keys=True) + "\n")
    return path
