"""Refuse a device request this machine cannot meet, before anything is built: a GPU where
there is none, more processes than devices (or CPU cores), fp16 autocast on a CPU, or a
data-parallel setting the data module cannot split. Each refusal is one `ValueError` naming
the full key, the value and what is allowed (refused in one line, exit 2:
`harness.records.failures`). Where the installed torch is a CPU build (its version says
`+cpu`), the request is checked before torch is imported (`cpu_only`: `run.py`'s early check)."""

import importlib.metadata
import os
import sys
from typing import Any

from omegaconf import DictConfig, ListConfig

from common.checks import require, require_choice
from harness.config.hydra_job import in_multirun
from harness.config.settings import ACCELERATORS

DATA_PARALLEL = ("auto", "ddp")
"""Strategies whose processes run this very run (Lightning relaunches the command, or
SLURM starts one task per device); `ddp_spawn`/`ddp_fork` would keep the record's metrics
in child processes."""
FP16 = ("16-mixed", "16", 16, "16-true")


def cpu_cores() -> int:
    """Cores this process may run on (a SLURM or container limit included)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_build() -> bool:
    """Whether torch can see no GPU whatever the machine holds, read without importing it: a
    CPU build (`2.13.0+cpu`) off macOS (where a build without CUDA may still use MPS)."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    return version.endswith("+cpu") and sys.platform != "darwin"


def resolved_accelerator(name: str, cpu_only: bool = False) -> str:
    """`auto` resolved as Lightning does (CUDA, then Apple MPS, then CPU; `cpu_only`: CPU
    without asking torch); `gpu` = `cuda`."""
    if name == "auto" and cpu_only:
        return "cpu"
    if name == "auto":
        import torch

        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    return "cuda" if name == "gpu" else name


def available(accelerator: str, cpu_only: bool = False) -> int:
    """Devices of that kind on this machine; for CPU the cores (one process per core)."""
    if accelerator == "cpu" or cpu_only:
        return cpu_cores() if accelerator == "cpu" else 0
    import torch

    if accelerator == "cuda":
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())


def requested(devices: Any, accelerator: str, have: int) -> int | None:
    """How many devices `trainer.devices` asks for (None: not a form Lightning accepts
    here): an int >= 1, -1 or "auto" (every one; "auto" is 1 on CPU), or GPU indices."""
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        if devices == -1 and accelerator != "cpu":
            return have
        return devices if devices >= 1 else None
    if devices == "auto":
        return 1 if accelerator == "cpu" else have
    if isinstance(devices, list | tuple | ListConfig) and accelerator == "cuda":
        indices = list(devices)
        ok = all(isinstance(i, int) and 0 <= i < have for i in indices) and indices
        return len(set(indices)) if ok else None
    return None


def in_local_multirun() -> bool:
    """A Hydra sweep whose jobs SLURM did not start (DDP would relaunch the whole sweep)."""
    if not in_multirun():
        return False
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return not SLURMEnvironment.detect()


def check_devices(cfg: DictConfig, cpu_only: bool = False) -> None:
    """Raise `ValueError` for a `trainer` device request this machine cannot meet (`cpu_only`:
    on a CPU build of torch, `cpu_build`, without importing it)."""
    trainer = cfg.trainer
    require_choice("trainer.accelerator", trainer.accelerator, ACCELERATORS)
    accelerator = resolved_accelerator(trainer.accelerator, cpu_only)
    have = available(accelerator, cpu_only)
    if accelerator == "cuda":
        require(
            have > 0,
            "trainer.accelerator",
            trainer.accelerator,
            "cpu or auto: this machine has no CUDA GPU (torch.cuda.is_available() is "
            "False); trainer=gpu and trainer=ddp ask for one",
        )
    if accelerator == "mps":
        require(have > 0, "trainer.accelerator", "mps", "cpu or auto: MPS is not available")
    unit = "CPU cores (one process each)" if accelerator == "cpu" else f"{accelerator} devices"
    count = requested(trainer.devices, accelerator, have)
    allowed = f"an integer in [1, {have}]: this machine has {have} {unit}"
    if accelerator != "cpu":
        allowed += ", or -1 for all of them"
    require(count is not None and count <= have, "trainer.devices", trainer.devices, allowed)
    precision = trainer.get("precision", "32-true")
    if accelerator == "cpu":
        require(
            precision not in FP16,
            "trainer.precision",
            precision,
            "32-true, bf16-mixed or bf16-true on CPU (fp16 needs a GPU)",
        )
    if accelerator == "cuda" and str(precision).startswith("bf16"):
        import torch

        require(
            torch.cuda.is_bf16_supported(),
            "trainer.precision",
            precision,
            "32-true or 16-mixed: this GPU has no bf16 support",
        )
    world_size = count * int(trainer.get("num_nodes", 1))
    if world_size > 1:
        check_data_parallel(cfg, world_size)


def check_data_parallel(cfg: DictConfig, world_size: int) -> None:
    """What the data module's sharding (harness.training.data_module) and the record need from a run
    of `world_size` processes."""
    strategy = cfg.trainer.get("strategy", "auto")
    require(
        strategy in DATA_PARALLEL,
        "trainer.strategy",
        strategy,
        f"ddp (or auto) with {world_size} processes",
    )
    require(
        not in_local_multirun(),
        "trainer.devices",
        cfg.trainer.devices,
        "1 in a local multirun (Lightning's DDP relaunches the command line, which would "
        "start the whole sweep again): run each config alone, or sweep on SLURM with "
        "hydra.launcher.tasks_per_node = trainer.devices",
    )
    batch = cfg.data.batch_size
    require(
        batch % world_size == 0,
        "data.batch_size",
        batch,
        f"a multiple of the {world_size} processes (it is the global batch, split evenly)",
    )
    for key in ("num_val", "num_test"):
        require(
            cfg.data[key] >= world_size,
            f"data.{key}",
            cfg.data[key],
            f">= {world_size}, one example per process",
        )
