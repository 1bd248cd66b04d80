"""What Hydra says about the job that is running: its folder, its sweep's folder, its number
in the sweep and the preset it was composed with (outside a Hydra app: the config's
`output_dir`, and no sweep)."""

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_dir() -> Path | None:
    """The multirun's folder when this job is part of one."""
    return Path(HydraConfig.get().sweep.dir) if in_multirun() else None


def output_dir(cfg: DictConfig) -> Path:
    """The job's folder: Hydra's output folder, or the config's `output_dir` (else `.`)."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or ".")


def job_number() -> int | None:
    """This job's index in its sweep."""
    return HydraConfig.get().job.num if in_multirun() else None


def experiment_name() -> str | None:
    """The preset (`experiment=...`) this run was composed with, if any."""
    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def group_choices() -> dict[str, str]:
    """The options this run took of the config's groups (`{"state_size": "linear_d16",
    "model": "linear", ...}`), Hydra's own groups left out; empty outside a Hydra app."""
    if not HydraConfig.initialized():
        return {}
    choices = HydraConfig.get().runtime.choices
    return {g: str(c) for g, c in choices.items() if c is not None and not g.startswith("hydra")}


def touched_keys() -> set[str]:
    """The keys this run's command line set (empty outside a Hydra app)."""
    if not HydraConfig.initialized():
        return set()
    return {o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task}


def parallel_jobs() -> int | None:
    """How many jobs the sweep's launcher runs at once (joblib's `n_jobs`), if it says."""
    if not HydraConfig.initialized():
        return None
    n_jobs = HydraConfig.get().launcher.get("n_jobs")
    return n_jobs if isinstance(n_jobs, int) else None
