"""Hydra callback (registered in conf/config.yaml): gives a sweep its header (folder, number of
jobs), its description (`sweep.json`) and its closing summary. The command line's names are
checked before Hydra composes (`harness.config.command_line`, from run.py)."""

import shlex
import sys
from collections import Counter
from datetime import datetime
from math import prod
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness.config.command_line import value_strings
from harness.config.group_nodes import group_options
from harness.records.failures import LAST_SWEEP, NEW_RUN_DIRS
from harness.records.schema import status_of, tally


def sweep_plan(config: DictConfig) -> tuple[int | None, list[str]]:
    """(number of jobs, swept keys) of a basic-sweeper multirun (None jobs for other sweepers).

    As Hydra's basic sweeper: the preset's `hydra.sweeper.params`, then the command line
    (a later override of the same key wins); jobs are the product of the value lists (a sweep
    the basic sweeper cannot list counts as one value)."""
    sweeper = config.hydra.sweeper
    params = sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()]
    lines += list(config.hydra.overrides.task)
    counts: dict[str, int] = {}
    for override in OverridesParser.create().parse_overrides(lines):
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:  # model=glob(*): a group's files
            options = group_options().get(override.key_or_group, [])
            counts[override.key_or_group] = len(override.value().filter(options))
        else:
            counts[override.key_or_group] = len(value_strings(override) or [None])
    swept = [key for key, n in counts.items() if n > 1]
    basic = "BasicSweeper" in str(sweeper.get("_target_", ""))
    return (prod(counts.values()) if basic else None), swept


class SweepConsole(Callback):
    """A single run's new folder (`harness.records.failures.forget`), a sweep's header and
    summary."""

    def on_run_start(self, config: DictConfig, **_: Any) -> None:
        run_dir = Path(config.hydra.run.dir).resolve()
        if not run_dir.exists():
            NEW_RUN_DIRS.add(run_dir)

    def on_multirun_start(self, config: DictConfig, **_: Any) -> None:
        from harness.records.sweep import describe_sweep  # pandas, torch: not for a single run

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
        from harness.records.sweep import end_launch, records_of

        sweep = Path(config.hydra.sweep.dir)
        end_launch(sweep)
        statuses = Counter(status_of(r) for r in records_of(sweep))
        LAST_SWEEP.update(statuses)
        print(f"{tally(statuses)} -> python -m harness.report {sweep}", flush=True)
