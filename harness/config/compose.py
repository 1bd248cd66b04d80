"""A run's config composed in-process exactly as `python run.py` composes it: `conf/` with
Hydra's compose API, the `model` and `task` options read from their constructors
(`harness.config.group_nodes`), the schema of the run-level settings
(`harness.config.settings`) and the resolvers the presets use (both registered when this
module is imported; `run.py`, the Python API and the tests all import it)."""

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

import harness.config.settings  # noqa: F401  (stores the schema)
from harness.config.group_nodes import CONF_DIR, store_group_nodes


def register_resolvers() -> None:
    """`${mul:a,b}` = a * b and `${div:a,b}` = a // b: tie one swept value to another in a
    preset (the sequence length to the number of key-value pairs; the batch to the length,
    so that every length trains on the same number of tokens per step)."""
    OmegaConf.register_new_resolver("mul", lambda a, b: a * b, replace=True)
    OmegaConf.register_new_resolver("div", lambda a, b: a // b, replace=True)


register_resolvers()
store_group_nodes()


def compose_config(
    overrides: Iterable[str] = (), output_dir: str | Path | None = None
) -> DictConfig:
    """`conf/config.yaml` with command-line style `overrides` (`"task=copy"`,
    `"trainer.max_steps=50"`, `"experiment=retrieval_gap"`, `"debug=smoke"`). Outside a Hydra
    app the run writes into `output_dir` (the config key of the same name)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    if output_dir is not None:
        with open_dict(cfg):
            cfg.output_dir = str(output_dir)
    return cfg


PLAIN = re.compile(r"[\w.\-/:+]+")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override syntax: true/false, null, [a,b], {k:v}, quoted strings
    when they hold anything but plain characters."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if PLAIN.fullmatch(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides_of(settings: Mapping[str, Any]) -> list[str]:
    """Keyword settings as override strings: `{"trainer.max_steps": 50}` and
    `{"trainer": {"max_steps": 50}}` both give `"trainer.max_steps=50"`; `{"seed": 1}` gives
    `"seed=1"`, `{"debug": "smoke"}` `"debug=smoke"` (a config group)."""
    out = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out += overrides_of({f"{key}.{k}": v for k, v in value.items()})
        else:
            out.append(f"{key}={hydra_value(value)}")
    return out
