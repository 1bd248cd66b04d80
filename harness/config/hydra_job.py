"""What Hydra says about the job that is running: its folder, its sweep's folder, its number
in the sweep and the preset it was composed with (outside a Hydra app: the config's
`output_dir`, and no sweep)."""

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig


def hydra() -> Any:
    """Hydra's config of this job, None outside a Hydra app."""
    return HydraConfig.get() if HydraConfig.initialized() else None


def in_multirun() -> bool:
    return hydra() is not None and hydra().mode == RunMode.MULTIRUN


def sweep_dir() -> Path | None:
    """The multirun's folder when this job is part of one."""
    return Path(hydra().sweep.dir) if in_multirun() else None


def output_dir(cfg: DictConfig) -> Path:
    """The job's folder: Hydra's output folder, or the config's `output_dir` (else `.`)."""
    return Path(hydra().runtime.output_dir if hydra() else cfg.get("output_dir") or ".")


def job_number() -> int | None:
    """This job's index in its sweep."""
    return hydra().job.num if in_multirun() else None


def experiment_name() -> str | None:
    """The preset (`experiment=...`) this run was composed with, if any."""
    return hydra().runtime.choices.get("experiment") if hydra() else None


def group_choices() -> dict[str, str]:
    """The options this run took of the config's groups (`{"state_size": "linear_d16",
    "model": "linear", ...}`), Hydra's own groups left out; empty outside a Hydra app."""
    choices = hydra().runtime.choices if hydra() else {}
    return {g: str(c) for g, c in choices.items() if c is not None and not g.startswith("hydra")}


def touched_keys() -> set[str]:
    """The keys this run's command line set (empty outside a Hydra app)."""
    overrides = hydra().overrides.task if hydra() else []
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def parallel_jobs() -> int | None:
    """How many jobs the sweep's launcher runs at once (joblib's `n_jobs`), if it says."""
    n_jobs = hydra().launcher.get("n_jobs") if hydra() else None
    return n_jobs if isinstance(n_jobs, int) else None
