"""A tiny real sweep, run once per session and shared by the console and W&B tests."""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli

TINY_SWEEP = [
    "-m",
    "model=softmax,linear",
    "task.seq_len=24,32",
    "task.vocab_size=32",
    "task.num_kv_pairs=4",
    "data.num_train=512",
    "data.num_val=64",
    "data.num_test=64",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=5",
    "threads=1",
    "logger=wandb",
]


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(sweep folder, the command's result): 4 jobs, offline W&B, output captured."""
    root = tmp_path_factory.mktemp("tiny")
    sweep = root / "multirun" / "2025-01-31" / "12-00-00"
    result = run_cli(root, *TINY_SWEEP, f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep, result
