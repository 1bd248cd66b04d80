"""Refuse a device request this machine cannot meet, before anything is built: a GPU where
there is none, more processes than devices (or CPU cores), fp16 autocast on a CPU, or a
data-parallel run the data module cannot split. Each refusal is one `ValueError` naming the full
key, the value and what is allowed (refused in one line, exit 2: `harness.records.failures`).
Where the installed torch is a CPU build (its version says `+cpu`), the request is checked
before torch is imported (`cpu_only`: `run.py`'s early check)."""

import importlib.metadata
import os
import sys
from typing import Any

from omegaconf import DictConfig, ListConfig

from common.checks import require
from harness.config.hydra_job import in_multirun

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


def machine(accelerator: str, cpu_only: bool = False) -> tuple[str, int]:
    """The accelerator a request resolves to, as Lightning resolves `auto` (CUDA, then Apple
    MPS, then CPU; `gpu` is `cuda`), and how many of its devices this machine has (CPU: its
    cores, one process each); `cpu_only`: without asking torch, which sees no GPU."""
    gpus = mps = 0
    if not cpu_only and accelerator != "cpu":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        mps = int(torch.backends.mps.is_available())
    if accelerator == "auto":
        accelerator = "cuda" if gpus else "mps" if mps else "cpu"
    kind = "cuda" if accelerator == "gpu" else accelerator
    return kind, {"cuda": gpus, "mps": mps}.get(kind, cpu_cores())


def requested(devices: Any, kind: str, have: int) -> int | None:
    """How many devices `trainer.devices` asks for (None: not a form Lightning accepts here):
    an int >= 1, -1 or "auto" (every one; "auto" is 1 on CPU), or a list of GPU indices."""
    if isinstance(devices, str) and devices.lstrip("-").isdigit():
        devices = int(devices)
    if devices == "auto" or (devices == -1 and kind != "cpu"):
        return 1 if kind == "cpu" else have
    if isinstance(devices, list | ListConfig) and kind == "cuda":
        ok = devices and all(isinstance(i, int) and 0 <= i < have for i in devices)
        return len(set(devices)) if ok else None
    is_count = isinstance(devices, int) and not isinstance(devices, bool)
    return devices if is_count and devices >= 1 else None


def check_devices(cfg: DictConfig, cpu_only: bool = False) -> None:
    """Raise `ValueError` for a `trainer` device request this machine cannot meet (`cpu_only`:
    on a CPU build of torch, `cpu_build`, without importing it)."""
    trainer = cfg.trainer
    kind, have = machine(trainer.accelerator, cpu_only)
    missing = "CUDA GPU (trainer=gpu and trainer=ddp ask for one)" if kind == "cuda" else kind
    allowed = f"cpu or auto: this machine has no {missing}"
    require(kind == "cpu" or have > 0, "trainer.accelerator", trainer.accelerator, allowed)
    count = requested(trainer.devices, kind, have)
    unit = "CPU cores (one process each)" if kind == "cpu" else f"{kind} devices"
    allowed = f"an integer in [1, {have}]: this machine has {have} {unit}"
    allowed += "" if kind == "cpu" else ", or -1 for all of them"
    require(count is not None and count <= have, "trainer.devices", trainer.devices, allowed)
    if kind == "cpu":
        allowed = "32-true, bf16-mixed or bf16-true on CPU (fp16 needs a GPU)"
        require(trainer.precision not in FP16, "trainer.precision", trainer.precision, allowed)
    world = count * trainer.num_nodes
    if world > 1:
        slurm = "SLURM_NTASKS" in os.environ
        allowed = (
            "1 in a local multirun (Lightning's DDP relaunches the command line, which would "
            "start the whole sweep again): run each config alone, or sweep on SLURM with "
            "hydra.launcher.tasks_per_node = trainer.devices"
        )
        require(slurm or not in_multirun(), "trainer.devices", trainer.devices, allowed)
        batch = cfg.data.batch_size
        allowed = f"a multiple of the {world} processes (it is the global batch, split evenly)"
        require(batch % world == 0, "data.batch_size", batch, allowed)
        for key in ("num_val", "num_test"):
            allowed = f">= {world}, one example per process"
            require(cfg.data[key] >= world, f"data.{key}", cfg.data[key], allowed)
