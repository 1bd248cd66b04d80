"""Sweeps: every job's record reaches summary.jsonl, reruns skip finished jobs, failures
cost only themselves, the report renders, and jobs scale out through Hydra launchers."""

import json
import multiprocessing
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from threading import Barrier

import pytest

from harness.records.files import read_summary
from harness.records.sweep import describe_sweep, job_position
from harness.report.sweep_report import report
from tests.conftest import SMOKE, run_cli

TINY = [*SMOKE, "task.vocab_size=32", "task.num_kv_pairs=4"]


def multirun(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(tmp_path, "-m", *TINY, *args)


@pytest.mark.slow
def test_sweep_records_every_job_skips_them_on_rerun_and_reports(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = ["model=softmax,linear", "task.seq_len=24,32", f"hydra.sweep.dir={sweep}"]
    first = multirun(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    records = read_summary(sweep)
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert {(r["model"], r["seq_len"]) for r in records} == {
        (m, n) for m in ("softmax", "linear") for n in (24, 32)
    }

    again = multirun(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("skipping") + again.stdout.count("skipping") == 4
    assert len(read_summary(sweep)) == 4

    table = report(sweep, wandb_mode="disabled")
    assert len(table) == 4
    for name in ("table.csv", "acc_vs_seq_len.png", "acc_vs_state.png", "report.html"):
        assert (sweep / "report" / name).stat().st_size > 0
    softmax_24 = next(r for r in table if r["model"] == "softmax" and r["task.seq_len"] == 24)
    kv_cache, short_conv = 2 * 24 * 64, (4 - 1) * 64  # keys and values; the conv's last 3 inputs
    assert softmax_24["state_floats_per_layer"] == kv_cache  # in floats, the conv apart
    assert softmax_24["conv_floats_per_layer"] == short_conv


@pytest.mark.slow
def test_failed_job_keeps_the_other_records_and_report_renders(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # seq_len=8 cannot hold 4 key-value pairs and their queries: that job fails up front
    result = multirun(tmp_path, "model=softmax", "task.seq_len=24,8", f"hydra.sweep.dir={sweep}")
    assert result.returncode == 1  # a job failed; the sweep went on
    assert "Traceback" not in result.stderr
    records = read_summary(sweep)
    assert sorted(r["status"] for r in records) == ["failed", "ok"]
    failed = next(r for r in records if r["status"] == "failed")
    assert "seq_len=8" in failed["error"]
    table = report(sweep, wandb_mode="disabled")
    assert [row["not_ok"] for row in table if row["task.seq_len"] == 8] == [1]
    assert (sweep / "report" / "report.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["local", "submitit_local"])
def test_launchers_run_jobs_in_parallel_processes(tmp_path: Path, launcher: str) -> None:
    sweep = tmp_path / "sweep"
    result = multirun(
        tmp_path,
        f"hydra/launcher={launcher}",
        "model=softmax,linear",
        "task.seq_len=24",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_summary(sweep)
    assert sorted(r["model"] for r in records) == ["linear", "softmax"]
    assert all(r["status"] == "ok" for r in records)
    assert len({json.dumps(r["config_hash"]) for r in records}) == 2


def describe(sweep: str, number: int) -> None:
    describe_sweep(Path(sweep), {"command": f"python run.py -m seed={number}", "swept": ["seed"]})


def test_sweeps_started_at_once_into_one_folder_keep_every_command(tmp_path: Path) -> None:
    with ProcessPoolExecutor(8) as pool:
        list(pool.map(describe, [str(tmp_path)] * 32, range(32)))
    commands = json.loads((tmp_path / "sweep.json").read_text())["commands"]
    assert sorted(commands) == sorted(f"python run.py -m seed={n}" for n in range(32))


def launch_one_job(sweep: str, everyone_started: Barrier) -> str:
    """A sweep of one job launched into `sweep`, its job run in the launching process and
    finished only once every other launch has started."""
    describe_sweep(Path(sweep), {"command": "python run.py -m", "jobs": 1, "swept": ["seed"]})
    everyone_started.wait(timeout=60)
    return job_position(Path(sweep))


def test_sweeps_launched_into_one_folder_at_once_count_their_own_jobs(tmp_path: Path) -> None:
    with multiprocessing.Manager() as manager, ProcessPoolExecutor(4) as pool:
        barrier = manager.Barrier(4)
        positions = list(pool.map(launch_one_job, [str(tmp_path)] * 4, [barrier] * 4))
    assert positions == ["1/1"] * 4  # a counter shared by the folder read [2/1], [3/1], ...


def test_jobs_in_worker_processes_count_in_their_launcher_s_counter(tmp_path: Path) -> None:
    describe_sweep(tmp_path, {"command": "python run.py -m", "jobs": 3, "swept": ["seed"]})
    with ProcessPoolExecutor(3) as pool:  # as joblib's workers: children of the launcher
        positions = sorted(pool.map(job_position, [tmp_path] * 3))
    assert positions == ["1/3", "2/3", "3/3"]
