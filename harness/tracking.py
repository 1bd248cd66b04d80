"""Weights & Biases: offline by default, never a prompt, online falls back to offline."""

import logging
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

log = logging.getLogger(__name__)
MODES = ("offline", "online", "disabled")


def start_wandb(
    logger_cfg: DictConfig, run_dir: Path, name: str, group: str | None, job_type: str, config: dict
) -> WandbLogger | None:
    """A WandbLogger writing into `run_dir/wandb`, or None when `logger=none`.

    `mode=online` that cannot reach the server within `init_timeout` seconds (no network, no
    login) warns once and continues offline; `wandb sync` uploads an offline run later."""
    if logger_cfg.get("name", "none") == "none" or logger_cfg.get("mode") == "disabled":
        return None
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_DIR"] = str(run_dir)
    kwargs: dict[str, Any] = dict(
        project=logger_cfg.project,
        entity=logger_cfg.get("entity"),
        dir=str(run_dir),
        name=name,
        group=group,
        job_type=job_type,
        config=config,
        reinit="finish_previous",
    )
    mode = logger_cfg.get("mode", "offline")
    timeout = float(logger_cfg.get("init_timeout", 15))
    try:
        run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=timeout), **kwargs)
    except Exception as error:  # noqa: BLE001 - any failure to go online falls back offline
        if mode == "offline":
            raise
        log.warning("W&B %s mode failed (%s); logging offline instead", mode, error)
        run = wandb.init(mode="offline", **kwargs)
    return WandbLogger(experiment=run)


def finish_wandb(logger: WandbLogger | None, summary: dict) -> dict | None:
    """Write the run's summary, close it, and describe it for the record."""
    if logger is None:
        return None
    import wandb

    run = logger.experiment
    run.summary.update(summary)
    info = {"mode": "offline" if run.offline else "online", "run_dir": str(Path(run.dir).parent)}
    wandb.finish()
    return info
