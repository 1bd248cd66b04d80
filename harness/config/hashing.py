"""The config hash (a run's identity: its resolved config without the settings whose role is
plumbing or readout, `harness.config.settings`) and a registry entry's parameters from its
group."""

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

from harness.config.settings import IDENTITY, role_of

HARNESS_KEYS = ("name", "eval_seq_lens", "test", "mixture")
"""Keys of a `task`/`model` group that are the harness's, not the constructor's: the test
lengths, the test set's parameter overrides (`task.test`) and a training mixture of task
settings (`task.mixture`, `harness.training.data_module`)."""


UNSET_TASK_KEYS = ("test", "mixture")
"""The task group's harness keys that, unset (null), leave the hash as it is without them."""


DEFAULT_BACKBONE_KEYS = {"init": "torch"}
"""Backbone keys added after runs were recorded: at these values (the constructor's defaults,
today's behaviour) they leave the hash as it was before the key existed."""


def identity_of(resolved: dict, prefix: str = "") -> dict:
    """The part of a resolved config that says what a run measures: every key whose role is
    `IDENTITY` (`harness.config.settings.role_of`), groups left empty dropped."""
    kept = {}
    for key, value in resolved.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            value = identity_of(value, f"{dotted}.")
            if value:
                kept[key] = value
        elif role_of(dotted) == IDENTITY:
            kept[key] = value
    return kept


def identity_hash(resolved: dict) -> str:
    """The hash of a resolved config (a record's `config` too): its identity
    (`identity_of`), with the task's unset harness keys, the backbone's keys at their
    pre-existing defaults and, while the capacity protocol is off, its settings (they derive
    nothing then) left out."""
    identity = identity_of(resolved)
    if not (identity.get("capacity") or {}).get("protocol"):
        identity.pop("capacity", None)
    task = identity.get("task", {})
    for key in UNSET_TASK_KEYS:
        if task.get(key) is None:
            task.pop(key, None)
    backbone = identity.get("backbone") or {}
    for key, default in DEFAULT_BACKBONE_KEYS.items():
        if backbone.get(key) == default:
            backbone.pop(key, None)
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def config_hash(cfg: DictConfig) -> str:
    """A run's identity as 16 hex digits: the resolved config's `identity_hash`."""
    return identity_hash(OmegaConf.to_container(cfg, resolve=True))


def params_of(cfg_group: DictConfig) -> dict:
    """A registry entry's parameters: its config group without the harness's own keys."""
    params = OmegaConf.to_container(cfg_group, resolve=True)
    for key in HARNESS_KEYS:
        params.pop(key, None)
    return params
