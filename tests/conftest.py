"""Shared fixtures: Hydra configs composed in-process, runs isolated in temp folders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

REPO = Path(__file__).resolve().parents[1]

# A recall task small enough that softmax solves it in ~200 steps on a 2-core CPU.
SMALL_RECALL = [
    "task=assoc_recall",
    "task.vocab_size=32",
    "task.seq_len=24",
    "task.num_kv_pairs=4",
    "data.num_train=20000",
    "data.num_val=500",
    "data.num_test=500",
    "trainer.max_steps=1000",
    "trainer.enable_progress_bar=false",
    "logger=none",
]


@pytest.fixture
def make_cfg(tmp_path: Path):
    """compose(overrides) -> the run's config, writing into `tmp_path`."""

    def make(overrides: list[str]) -> DictConfig:
        with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        with open_dict(cfg):
            cfg.output_dir = str(tmp_path / "run")
            cfg.data.cache_dir = str(tmp_path / "cache")
            cfg.checkpoint.dir = str(tmp_path / "checkpoints")
        return cfg

    return make


@pytest.fixture(autouse=True)
def default_dtype_is_restored():
    """A test may change torch's default dtype only for itself."""
    dtype = torch.get_default_dtype()
    yield
    assert torch.get_default_dtype() == dtype, "a test leaked torch.set_default_dtype"


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`python run.py *args` in `cwd`, datasets cached under `cwd/cache`."""
    return subprocess.run(
        cli_command(*args), cwd=cwd, env=cli_env(cwd), capture_output=True, text=True, timeout=900
    )


def start_cli(cwd: Path, *args: str) -> subprocess.Popen:
    """The same in the background (output discarded), e.g. to kill it."""
    return subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env=cli_env(cwd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cli_command(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "run.py"), *args]


def cli_env(cwd: Path) -> dict[str, str]:
    return {**os.environ, "RECALL_HARNESS_CACHE": str(cwd / "cache")}
