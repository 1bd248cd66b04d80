"""Weights & Biases: offline by default, never a prompt, online falls back to offline.

A job's run is named by its swept values (`deltanet-d128-kv8-T256-s1`), grouped by its sweep
(or preset), tagged with preset, task and model, charted against the training step, and holds
the parameter count, the state, wall time and tokens/s in its config and summary. A resumed
job continues its W&B run: the same id (kept in its checkpoint, `harness.training.checkpoint`), with
W&B's own step (`_step`) equal to the training step, so that the history of every process
that trained it lines up into one curve (offline, each process writes its own
`offline-run-*-<id>` folder; `wandb sync` uploads them in order into that one run). The
report logs into one run per sweep (fixed id) in the same project."""

import hashlib
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from harness.config.short_names import in_run_name
from harness.records.record import model_label
from harness.records.sweep import sweep_id, swept_values

log = logging.getLogger(__name__)
STEP = "trainer/global_step"
"""Lightning's step key: every chart's x axis."""
NAME_ORDER = ("backbone.", "model.", "task.", "task.seq_len", "optim.", "", "seed")


def name_part(key: str, value: Any) -> str:
    """`d128` for backbone.d_model=128, `lr0.002`, `feature_map-favor`, `linear_d8` for the
    option of a swept config group (`+state_size=linear_d8`)."""
    if isinstance(value, float):
        value = f"{value:g}"
    elif isinstance(value, list | tuple):
        value = "_".join(map(str, value))
    short = in_run_name(key)
    return f"{key.rsplit('.', 1)[-1]}-{value}" if short is None else f"{short}{value}"


def order_of(key: str) -> int:
    """Where a swept key goes in a run's name: widths, mixer, task, length, lr, rest, seed."""
    if key in NAME_ORDER:
        return NAME_ORDER.index(key)
    return next(i for i, prefix in enumerate(NAME_ORDER) if key.startswith(prefix))


def run_name(record: dict, swept: list[str] | None, job_number: int | None = None) -> str:
    """A run's name from its swept values, unique within its sweep: `deltanet-d128-kv8-T256-s1`.

    Outside a described sweep: `model-task-T<seq_len>` (and the job's number in a sweep)."""
    parts = [model_label(record)]
    if swept is None:
        parts += [record["task"], f"T{record.get('seq_len')}"]
        return "-".join(parts + ([f"job{job_number}"] if job_number is not None else []))
    if "task" in swept:
        parts.append(record["task"])
    values = swept_values(record, swept)
    values.setdefault("task.seq_len", record.get("seq_len"))
    parts += [name_part(k, values[k]) for k in sorted(values, key=order_of)]
    return "-".join(parts)


def sweep_group(sweep: Path | None, preset: str | None) -> str | None:
    """The W&B group: the sweep's id (`harness.records.sweep.sweep_id`) after its preset
    (`state_frontier/2025-01-31/12-00-00-1a2b3c4d`), or the preset's name for a single run
    (None without either)."""
    if sweep is None:
        return preset
    return f"{preset}/{sweep_id(sweep)}" if preset else sweep_id(sweep)


FLUSH_INTERVAL_S = 1.0
"""How often W&B writes a run's data to its local file (15 s by W&B's default): a process
killed outright (SIGKILL) loses at most its last second of history. The next process logs
again everything after the checkpoint it resumes from; a gap is left only where that
checkpoint was saved within the lost second."""


def run_settings(timeout: float):
    """`wandb.Settings` without console capture (no progress bars in the run's log), giving up
    going online after `timeout` seconds, flushed every `FLUSH_INTERVAL_S` where this W&B has
    the setting."""
    import wandb

    settings = {"console": "off", "init_timeout": timeout}
    if "x_transaction_log_flush_interval" in wandb.Settings.model_fields:
        settings["x_transaction_log_flush_interval"] = FLUSH_INTERVAL_S
    return wandb.Settings(**settings)


class StepLogger(WandbLogger):
    """Lightning's W&B logger with W&B's step (`_step`, the row of the history) set to the
    training step. Offline, W&B counts its rows from 0 in every process, and the server keys a
    run's history by `_step`: a resumed run would otherwise write its steps from the
    checkpoint on into rows its earlier process had already used. Rows are kept in order of
    step: Lightning logs at a step that never decreases."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is None:
            super().log_metrics(metrics, step)
            return
        self.experiment.log({**metrics, STEP: step}, step=step)  # the logger has no prefix


def wandb_logger(
    logger_cfg: DictConfig | dict, run_dir: Path, run_id: str, **init: Any
) -> WandbLogger | None:
    """Lightning's `WandbLogger` (`StepLogger`) of the W&B run `run_id` in `run_dir/wandb`
    (continued when it exists: `resume="allow"`, Lightning's), in the configured mode,
    started now: `mode=online` that cannot reach the server within `init_timeout` seconds
    warns once and continues offline (`wandb sync` uploads it later). Lightning charts every
    metric against `trainer/global_step`; `init` goes to `wandb.init` (name, group, tags,
    ...). None with `logger=none` or `mode=disabled`."""
    if logger_cfg.get("name") == "none" or logger_cfg.get("mode") == "disabled":
        return None
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_DIR"] = str(run_dir)
    wandb.setup()  # silent from here: before the settings Lightning passes are checked
    mode = logger_cfg.get("mode", "offline")
    timeout = float(logger_cfg.get("init_timeout", 15))

    def started(mode: str) -> StepLogger:
        logger = StepLogger(
            id=run_id,
            save_dir=str(run_dir),
            project=logger_cfg.get("project"),
            entity=logger_cfg.get("entity"),
            mode=mode,
            settings=run_settings(timeout),
            **init,
        )
        logger.experiment  # noqa: B018 - wandb.init, here: a failure to go online is caught
        return logger

    try:
        return started(mode)
    except Exception as error:  # noqa: BLE001 - any failure to go online falls back offline
        if mode == "offline":
            raise
        log.warning("W&B %s mode failed (%s); logging offline instead", mode, error)
        return started("offline")


def run_facts(record: dict) -> dict:
    """What a run's record says beyond its metrics, for W&B config and summary columns."""
    train = record.get("train") or {}
    keep = ("steps", "wall_s", "tokens_per_s", "converged", "resumed_from_step", "segments")
    facts = {
        "status": record.get("status"),
        "num_params": record.get("num_params"),
        "state": record.get("state"),
        "train": {k: train.get(k) for k in keep if k in train},
    }
    if record.get("capacity"):
        facts["capacity"] = record["capacity"]  # the load curve's n90, n50 and verdict
    if record.get("error"):
        facts["error"] = record["error"]
    return facts


def finish_wandb(logger: WandbLogger | None, record: dict) -> dict | None:
    """Write the run's facts into config and summary, close it, describe it for the record."""
    if logger is None:
        return None
    import wandb

    run = logger.experiment
    facts = run_facts(record)
    run.config.update(facts, allow_val_change=True)
    run.summary.update({**record.get("metrics", {}), **facts})
    info = {
        "mode": "offline" if run.offline else "online",
        "id": run.id,
        "run_dir": str(Path(run.dir).parent),
    }
    wandb.finish()
    return info


def report_run_id(sweep: Path) -> str:
    """One fixed W&B id per sweep (from its id, `harness.records.sweep.sweep_id`): reporting again
    updates the same run."""
    return "report-" + hashlib.sha1(sweep_id(sweep).encode()).hexdigest()[:12]


def report_items(tables: dict[str, list[dict]], figures: list[Path]) -> dict[str, Any]:
    """The report's tables as W&B tables, its figures as images, and the frontier as a
    scatter plot, keyed `report/<name>`."""
    import wandb

    logged: dict[str, Any] = {}
    for name, rows in tables.items():
        if rows:
            columns = list(dict.fromkeys(k for row in rows for k in row))
            data = [[row.get(c) for c in columns] for row in rows]
            logged[f"report/{name}"] = wandb.Table(columns=columns, data=data)
    for figure in figures:
        logged[f"report/{figure.stem}"] = wandb.Image(str(figure))
    if tables.get("frontier"):
        logged["report/frontier_plot"] = wandb.plot.scatter(
            logged["report/frontier"], "state_floats_per_layer", "test_acc", title="frontier"
        )
    return logged


def log_report(
    sweep: Path,
    out: Path,
    description: dict,
    mode: str,
    tables: dict[str, list[dict]],
    figures: list[Path],
) -> Path | None:
    """Log the report (tables, figures) to the sweep's project and entity, as the run
    `report-<hash of the sweep folder>` in the sweep's group; returns its local folder."""
    import wandb

    logger_cfg = {**(description.get("logger") or {}), "name": "wandb", "mode": mode}
    if not logger_cfg.get("project"):
        logger_cfg["project"] = "recall-harness"
    run_id = report_run_id(sweep)
    for stale in (out / "wandb").glob(f"offline-run-*-{run_id}"):
        shutil.rmtree(stale, ignore_errors=True)  # a re-report replaces the local copy
    preset = description.get("experiment")
    run = wandb_logger(
        logger_cfg,
        out,
        run_id,
        name=f"report {sweep_group(sweep, None)}",
        group=sweep_group(sweep, preset),
        tags=[f"preset:{preset}"] if preset else [],
        job_type="report",
        config={
            "sweep": str(sweep),
            "command": description.get("command"),
            "commands": description.get("commands"),
        },
    ).experiment
    run.log(report_items(tables, figures))
    folder = Path(run.dir).parent
    wandb.finish()
    wandb.teardown()  # offline: the run's file is complete when this returns
    return folder
