"""Reliability: clear errors before training, divergence recorded, kill -9 and Ctrl-C then
resume give the uninterrupted result as one run, runs are deterministic, W&B never blocks."""

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from harness.config.refusal import BadInput
from harness.records.sweep import load_sweep
from harness.records.wandb_run import FLUSH_INTERVAL_S
from harness.train import run
from harness.training.build import build
from tests.conftest import SMALL_RECALL, run_cli, start_cli
from tests.harness.wandb_offline import read_run

BAD_INPUTS = [
    (["model=linear", "model.mode=sideways"], "mode='sideways' is invalid: must be one of"),
    (["task.seq_len=10"], "seq_len=10 is invalid"),
    (["task.num_kv_pairs=16"], "num_kv_pairs=16 is invalid"),
    (["model=favor", "model.feature_dim=0"], "feature_dim=0 is invalid"),
    (["model=favor", "model.feature_dim=-3"], "feature_dim=-3 is invalid"),
    (["model=linear", "model.chunk_size=0"], "chunk_size=0 is invalid"),
    (["model.n_heads=3"], "n_heads=3 is invalid: must be a divisor of d_model=64"),
    (["optim.lr=0"], "optim.lr=0.0 is invalid: must be a number > 0"),
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


@pytest.mark.parametrize("override", ["model=nope", "task=nope", "task.no_such_key=1"])
def test_hydra_refuses_unknown_names_and_keys(tmp_path: Path, override: str) -> None:
    result = run_cli(tmp_path, override)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()  # one line, naming what was refused
    assert line.startswith("error: ") and override in line


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


def wait_for_checkpoint(folder: Path, newer_than: int = 0) -> int:
    """The modification time (ns) of the first checkpoint under `folder` written after
    `newer_than`, once there is one."""
    deadline = time.time() + 300
    while time.time() < deadline:
        for path in folder.glob("*/last.ckpt"):
            with contextlib.suppress(FileNotFoundError):
                if (written := path.stat().st_mtime_ns) > newer_than:
                    return written
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint written under {folder}")


def logged_steps(run_dir: Path) -> tuple[set[str], list[list[int]]]:
    """The W&B ids of a run's offline runs under `run_dir` (their folders' and, where written,
    their records'), and the `train/loss` steps of each, in order; each row's W&B step is its
    training step."""
    runs = {d: read_run(d) for d in sorted(run_dir.glob("**/wandb/offline-run-*"))}
    ids = {d.name.rsplit("-", 1)[-1] for d in runs} | {r.run_id for r in runs.values()} - {""}
    rows = [[h for h in r.history if "train/loss" in h] for r in runs.values()]
    assert all(h["_step"] == h["trainer/global_step"] for h in sum(rows, []))
    return ids, [[h["_step"] for h in part] for part in rows]


@pytest.mark.slow
def test_kill_9_ctrl_c_then_rerun_is_one_run_matching_the_uninterrupted(tmp_path: Path) -> None:
    """Killed (SIGKILL) after its first checkpoint, interrupted (SIGINT) after the next, then
    resumed, each attempt in its own folder as single runs are: the run ends as the
    uninterrupted one, its record is the latest, one W&B run covers every step, and its wall
    time covers the three segments."""
    args = [
        *[a for a in SMALL_RECALL if not a.startswith("trainer.max_steps") and a != "logger=none"],
        "trainer.max_steps=120",
        "trainer.val_check_interval=20",
        "trainer.log_every_n_steps=10",
        "early_stop_acc=null",  # never stop early: both runs do all 120 steps
        "threads=1",
        "logger=wandb",
        "logger.mode=offline",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
    ]
    whole = run_cli(tmp_path, *args, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-2000:]

    attempts = tmp_path / "outputs"
    killed = start_cli(tmp_path, *args, f"hydra.run.dir={attempts / '1'}")
    wait_for_checkpoint(tmp_path / "ckpt")
    time.sleep(FLUSH_INTERVAL_S)  # W&B has written some of what it logged
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (attempts / "1" / "results.json").exists()
    saved = wait_for_checkpoint(tmp_path / "ckpt")  # the last one it wrote

    stopped = start_cli(tmp_path, *args, f"hydra.run.dir={attempts / '2'}", interruptible=True)
    wait_for_checkpoint(tmp_path / "ckpt", newer_than=saved)  # a step beyond the first
    os.kill(stopped.pid, signal.SIGINT)
    assert stopped.wait(timeout=120) != 0
    interrupted = json.loads((attempts / "2" / "results.json").read_text())
    assert interrupted["status"] == "interrupted", interrupted["error"]
    assert interrupted["error"] == "interrupted (KeyboardInterrupt)"

    resumed = run_cli(tmp_path, *args, f"hydra.run.dir={attempts / '3'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = json.loads((tmp_path / "whole" / "results.json").read_text())
    b = json.loads((attempts / "3" / "results.json").read_text())
    assert b["train"]["resumed_from_step"] > 0
    assert b["train"]["steps"] == a["train"]["steps"] == 120
    assert b["train"]["val_curve"] == a["train"]["val_curve"]  # the curve survives the kill
    for key in ("test/acc", "test/seq_acc", "val/acc"):
        assert b["metrics"][key] == pytest.approx(a["metrics"][key], abs=1e-6)
    assert not list((tmp_path / "ckpt").glob("*/last.ckpt")), "finished runs drop checkpoints"

    # the latest record of the config is the resumed one
    (row,) = load_sweep(attempts).to_dict("records")
    assert (row["status"], row["run_dir"]) == ("ok", str(attempts / "3"))

    # three segments tile the 120 steps; wall time and throughput cover them all
    segments = b["train"]["segments"]
    tiles = [(s["from_step"], s["to_step"]) for s in segments]
    first, second = tiles[0][1], tiles[1][1]
    assert tiles == [(0, first), (first, second), (second, 120)] and 0 < first < second
    assert b["train"]["resumed_from_step"] == second
    assert b["train"]["wall_s"] == pytest.approx(sum(s["wall_s"] for s in segments), abs=0.01)
    tokens = 120 * b["config"]["data"]["batch_size"] * b["seq_len"]
    assert b["train"]["tokens_per_s"] == pytest.approx(tokens / b["train"]["wall_s"], rel=1e-3)
    assert interrupted["train"]["segments"][0] == segments[0]

    # one W&B run: each process continues from its checkpoint's step (the killed one's
    # last second of history, never written, is what the next one logs again after it)
    ids, (killed_rows, stopped_rows, resumed_rows) = logged_steps(attempts)
    assert ids == {b["wandb"]["id"]} == {interrupted["wandb"]["id"]}
    _, (uninterrupted,) = logged_steps(tmp_path / "whole")
    assert killed_rows and killed_rows == uninterrupted[: len(killed_rows)]
    stopped_at = interrupted["train"]["steps"]
    assert stopped_rows == [s for s in uninterrupted if first <= s < stopped_at]
    assert resumed_rows == [s for s in uninterrupted if s >= second]
