"""Reliability: clear errors before training, divergence recorded, kill -9 then resume gives
the uninterrupted result, runs are deterministic, W&B never blocks."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from harness.build import build
from harness.failures import BadInput
from harness.train import run
from tests.conftest import SMALL_RECALL, run_cli, start_cli

BAD_INPUTS = [
    (["model=linear", "model.mode=sideways"], "mode='sideways' is invalid: must be one of"),
    (["task.seq_len=10"], "seq_len=10 is invalid"),
    (["task.num_kv_pairs=16"], "num_kv_pairs=16 is invalid"),
    (["model=favor", "model.feature_dim=0"], "feature_dim=0 is invalid"),
    (["model=favor", "model.feature_dim=-3"], "feature_dim=-3 is invalid"),
    (["model=linear", "model.chunk_size=0"], "chunk_size=0 is invalid"),
    (["model.n_heads=3"], "n_heads=3 is invalid: must be a divisor of d_model=64"),
    (["optim.lr=0"], "optim.lr=0 is invalid: must be > 0"),
    (["optim.lr=-0.1"], "optim.lr=-0.1 is invalid"),
    (["+task.eval_seq_lens=[48]"], "seq_len=48 is invalid: must be <= 24"),
    (["trainer.max_steps=0"], "trainer.max_steps=0 is invalid"),
    (["data.batch_size=0"], "data.batch_size=0 is invalid"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_names_parameter_value_and_allowed(make_cfg, overrides, message) -> None:
    with pytest.raises(BadInput) as caught:
        build(make_cfg([*SMALL_RECALL, *overrides]))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=nope"], "Could not find 'model/nope'"),
        (["task=nope"], "Could not find 'task/nope'"),
        (["task.no_such_key=1"], "no_such_key"),
    ],
)
def test_hydra_refuses_unknown_names_and_keys(tmp_path: Path, args, message) -> None:
    result = run_cli(tmp_path, *args)
    assert result.returncode != 0 and message in result.stderr


def test_divergence_is_recorded_with_step_and_reason(make_cfg, tmp_path: Path) -> None:
    cfg = make_cfg([*SMALL_RECALL, "optim.lr=1e6", "optim.grad_clip=null"])
    record = run(cfg)
    assert record["status"] == "diverged"
    assert "at step" in record["error"] and "loss is nan" in record["error"].lower()
    step = record["train"]["diverged_at_step"]
    assert isinstance(step, int) and record["error"].endswith(f"at step {step}")
    assert step <= record["train"]["steps"]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "diverged" and saved["train"]["diverged_at_step"] == step


def test_rff_denominator_collapse_ends_the_run_as_diverged(make_cfg) -> None:
    record = run(make_cfg([*SMALL_RECALL, "model=rff", "optim.lr=0.05"]))
    assert record["status"] == "diverged"
    assert "denominator" in record["error"] and "at step" in record["error"]
    assert record["error"].endswith(f"at step {record['train']['diverged_at_step']}")


def test_same_config_same_seed_gives_identical_metrics(make_cfg) -> None:
    overrides = [*SMALL_RECALL, "trainer.max_steps=30", "trainer.val_check_interval=10"]
    first, second = run(make_cfg(overrides)), run(make_cfg(overrides))
    assert first["metrics"] == second["metrics"]
    assert first["config_hash"] == second["config_hash"]


@pytest.mark.slow
def test_kill_9_then_rerun_resumes_and_matches_uninterrupted(tmp_path: Path) -> None:
    args = [
        *[a for a in SMALL_RECALL if not a.startswith("trainer.max_steps")],
        "trainer.max_steps=120",
        "trainer.val_check_interval=20",
        "early_stop_acc=null",  # never stop early: both runs do all 120 steps
        "threads=1",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
    ]
    whole = run_cli(tmp_path, *args, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-2000:]

    killed = start_cli(tmp_path, *args, f"hydra.run.dir={tmp_path / 'killed'}")
    deadline = time.time() + 300
    while not list((tmp_path / "ckpt").glob("*/last.ckpt")) and time.time() < deadline:
        time.sleep(0.2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert list((tmp_path / "ckpt").glob("*/last.ckpt")), "no checkpoint was written"
    assert not (tmp_path / "killed" / "results.json").exists()

    resumed = run_cli(tmp_path, *args, f"hydra.run.dir={tmp_path / 'killed'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = json.loads((tmp_path / "whole" / "results.json").read_text())
    b = json.loads((tmp_path / "killed" / "results.json").read_text())
    assert b["train"]["resumed_from_step"] > 0
    assert b["train"]["steps"] == a["train"]["steps"] == 120
    assert b["train"]["val_curve"] == a["train"]["val_curve"]  # the curve survives the kill
    for key in ("test/acc", "test/seq_acc", "val/acc"):
        assert b["metrics"][key] == pytest.approx(a["metrics"][key], abs=1e-6)
    assert not list((tmp_path / "ckpt").glob("*/last.ckpt")), "finished runs drop checkpoints"


def test_wandb_online_without_network_falls_back_offline(make_cfg) -> None:
    overrides = [*SMALL_RECALL, "logger=wandb", "logger.mode=online", "logger.init_timeout=5"]
    overrides += ["trainer.max_steps=5", "trainer.val_check_interval=5"]
    started = time.time()
    record = run(make_cfg(overrides))
    assert record["status"] == "ok"
    assert record["wandb"]["mode"] == "offline"
    assert time.time() - started < 90
