"""Hydra callback (registered in conf/config.yaml): refuses `+keys` the harness would ignore
before anything runs, and gives a sweep its header (folder, number of jobs), its
description (`sweep.json`) and its closing summary."""

import shlex
import sys
from collections import Counter
from datetime import datetime
from math import prod
from pathlib import Path
from typing import Any

from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness.build import check_added_keys
from harness.config import CONF_DIR
from harness.failures import LAST_SWEEP, NEW_RUN_DIRS, BadInput, refused
from harness.status import status_of, tally
from harness.sweep import describe_sweep, records_of


def config_groups() -> set[str]:
    """Every config group (`model`, `hydra/launcher`, ...): folders under conf/, and Hydra's."""
    groups = {str(p.relative_to(CONF_DIR)) for p in CONF_DIR.rglob("*") if p.is_dir()}
    return groups | {"hydra", "hydra/launcher", "hydra/sweeper", "hydra/job_logging"}


def first_values(overrides: list[str]) -> list[str]:
    """The overrides with every sweep (`a,b`, `range(...)`) replaced by its first value and
    every `+` addition left out: the config they compose is the one that `+keys` extend."""
    out = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_add() or override.is_force_add() or override.is_delete():
            continue
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()))
            out.append(f"{override.get_key_element()}={first}")
        else:
            out.append(override.input_line)
    return out


def known_keys(config_name: str | None, overrides: list[str]) -> set[str]:
    """Every key (dotted, containers included) of the config without the `+` additions."""
    base = compose(config_name or "config", overrides=first_values(overrides))
    keys: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                keys.add(f"{prefix}{key}")
                walk(value, f"{prefix}{key}.")

    walk(OmegaConf.to_container(base, resolve=False), "")
    return keys


def refuse_added_keys(config: DictConfig, config_name: str | None, overrides: list[str]) -> None:
    """Exit 2 with one line when an override adds a key nothing reads (`+lr=0.5`)."""
    if not any(o.startswith("+") for o in overrides):
        return
    try:
        check_added_keys(overrides, known_keys(config_name, overrides), config_groups())
    except BadInput as error:
        sys.exit(refused(error))


def sweep_plan(config: DictConfig) -> tuple[int | None, list[str]]:
    """(number of jobs, swept keys) of a basic-sweeper multirun (None jobs for other sweepers).

    As Hydra's basic sweeper: the preset's `hydra.sweeper.params`, then the command line
    (a later override of the same key wins); jobs are the product of the value lists."""
    sweeper = config.hydra.sweeper
    params = sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()]
    lines += list(config.hydra.overrides.task)
    counts: dict[str, int] = {}
    for override in OverridesParser.create().parse_overrides(lines):
        if override.is_sweep_override():
            counts[override.key_or_group] = len(list(override.sweep_string_iterator()))
        else:
            counts[override.key_or_group] = 1
    swept = [key for key, n in counts.items() if n > 1]
    basic = "BasicSweeper" in str(sweeper.get("_target_", ""))
    return (prod(counts.values()) if basic else None), swept


class SweepConsole(Callback):
    """Refusal of unknown `+keys` (single runs and sweeps), a sweep's header and summary."""

    def on_run_start(self, config: DictConfig, config_name: str | None = None, **_: Any) -> None:
        refuse_added_keys(config, config_name, list(config.hydra.overrides.task))
        run_dir = Path(config.hydra.run.dir).resolve()
        if not run_dir.exists():
            NEW_RUN_DIRS.add(run_dir)

    def on_multirun_start(
        self, config: DictConfig, config_name: str | None = None, **_: Any
    ) -> None:
        refuse_added_keys(config, config_name, list(config.hydra.overrides.task))
        sweep = Path(config.hydra.sweep.dir)
        jobs, swept = sweep_plan(config)
        logger = config.get("logger") or {}
        describe_sweep(
            sweep,
            {
                "command": shlex.join(["python", *sys.argv]),
                "jobs": jobs,
                "swept": swept,
                "experiment": OmegaConf.select(config, "hydra.runtime.choices.experiment"),
                "logger": {k: logger.get(k) for k in ("name", "project", "entity", "mode")},
                "started": datetime.now().isoformat(timespec="seconds"),
            },
        )
        LAST_SWEEP.clear()
        print(f"sweep: {sweep} ({jobs if jobs else 'unknown number of'} jobs)", flush=True)

    def on_multirun_end(self, config: DictConfig, **_: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        statuses = Counter(status_of(r) for r in records_of(sweep))
        LAST_SWEEP.update(statuses)
        print(f"{tally(statuses)} -> python -m harness.report {sweep}", flush=True)
