"""Shared fixtures and override lists: Hydra configs composed in-process (as `run.py` composes
them), runs isolated in temp folders, the sizes of a test run, float64 for model tests."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, open_dict

from harness.config.compose import compose_config

REPO = Path(__file__).resolve().parents[1]

# Quiet runs: no W&B, no progress bar.
QUIET = ["logger=none", "trainer.enable_progress_bar=false"]

# Small instances of every task that softmax solves within LEARN (~200-1000 steps on 2 cores).
SMALL_TASKS = {
    "assoc_recall": ["task.vocab_size=32", "task.seq_len=24", "task.num_kv_pairs=4"],
    "copy": ["task.vocab_size=16", "task.seq_len=24", "task.copy_len=6"],
    "needle": ["task.vocab_size=32", "task.seq_len=24", "task.num_distractors=1"],
    "selective_copy": ["task.vocab_size=16", "task.seq_len=24", "task.num_tokens=4"],
    "induction": ["task.vocab_size=16", "task.seq_len=24"],
    "noisy_recall": [
        "task.vocab_size=32",
        "task.seq_len=32",
        "task.num_kv_pairs=4",
        "task.num_queries=4",
        "task.noise_vocab_size=4",
    ],
    "overwrite_recall": ["task.vocab_size=32", "task.seq_len=32", "task.num_kv_pairs=4"],
}

# The budget of a run that must learn: enough data and steps, early stopping ends it sooner.
LEARN = [
    "data.num_train=20000",
    "data.num_val=500",
    "data.num_test=500",
    "trainer.max_steps=1500",
    *QUIET,
]

# A recall task small enough that softmax solves it in ~200 steps, with the learning budget.
SMALL_RECALL = ["task=assoc_recall", *SMALL_TASKS["assoc_recall"], *LEARN]

# A run that only has to work, not learn: the `debug=smoke` preset (a few steps, tiny data,
# logger off), one thread.
SMOKE = ["debug=smoke", "threads=1"]


@pytest.fixture
def make_cfg(tmp_path: Path):
    """compose(overrides) -> the run's config, writing into `tmp_path`."""

    def make(overrides: list[str]) -> DictConfig:
        cfg = compose_config(overrides, output_dir=tmp_path / "run")
        with open_dict(cfg):
            cfg.checkpoint.dir = str(tmp_path / "checkpoints")
        return cfg

    return make


@pytest.fixture
def float64_by_default():
    """torch's default dtype is float64 inside the test only (a model test module opts in with
    `pytestmark = pytest.mark.usefixtures("float64_by_default")`)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(autouse=True)
def default_dtype_is_restored():
    """A test may change torch's default dtype only for itself."""
    dtype = torch.get_default_dtype()
    yield
    assert torch.get_default_dtype() == dtype, "a test leaked torch.set_default_dtype"


@pytest.fixture(autouse=True)
def torch_threads_are_restored():
    """A run in-process may set torch's thread count (`threads=1`) only for its own test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`python run.py *args` in `cwd`."""
    return subprocess.run(
        cli_command(*args), cwd=cwd, env=cli_env(cwd), capture_output=True, text=True, timeout=900
    )


def terminal_sigint() -> None:
    """In a child process: SIGINT as a terminal's Ctrl-C. A suite started in the background
    (`pytest &`) ignores SIGINT, its children inherit that, and Python then installs no
    KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(cwd: Path, *args: str, interruptible: bool = False) -> subprocess.Popen:
    """The same in the background (output discarded), e.g. to kill it; `interruptible`: a
    SIGINT stops it as a terminal's Ctrl-C would (`terminal_sigint`)."""
    return subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env=cli_env(cwd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=terminal_sigint if interruptible else None,
    )


def cli_command(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "run.py"), *args]


def cli_env(cwd: Path) -> dict[str, str]:
    return dict(os.environ)
