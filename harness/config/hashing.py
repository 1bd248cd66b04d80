"""The config hash (a run's identity: its resolved config without where files go, how it is logged
or how its load curve is read) and a registry entry's parameters from its group."""

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

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
settings (`task.mixture`, `harness.training.data_module`)."""


UNSET_TASK_KEYS = ("test", "mixture")
"""The task group's harness keys that, unset (null), leave the hash as it is without them."""


DEFAULT_BACKBONE_KEYS = {"init": "torch"}
"""Backbone keys added after runs were recorded: at these values (the constructor's defaults,
today's behaviour) they leave the hash as it was before the key existed."""


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
    backbone = resolved.get("backbone") or {}
    for key, default in DEFAULT_BACKBONE_KEYS.items():
        if backbone.get(key) == default:
            backbone.pop(key, None)
    resolved.get("trainer", {}).pop("enable_progress_bar", None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def params_of(cfg_group: DictConfig) -> dict:
    """A registry entry's parameters: its yaml group without the harness's own keys."""
    params = OmegaConf.to_container(cfg_group, resolve=True)
    for key in HARNESS_KEYS:
        params.pop(key, None)
    return params
