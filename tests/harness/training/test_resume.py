"""A resumed run is one run: the latest record of a config wins, the segments of every process
that trained it and its W&B id travel in the checkpoint, SIGTERM and Ctrl-C end a run as
`interrupted`, and a sweep's W&B group is unique wherever the sweep lies."""

import json
import os
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn

from harness.records.failures import (
    Terminated,
    interruptible,
    outcome,
    raise_terminated,
    sweep_exit_code,
)
from harness.records.schema import INTERRUPTED, tally
from harness.records.sweep import describe_sweep, load_sweep, records_of, sweep_id
from harness.training.checkpoint import Segments, resumable
from tests.harness.synthetic import record


def attempt(config: str, status: str, finished_at: str | None) -> dict:
    """A record of the config `config` that ended with `status` at `finished_at`."""
    job = record("softmax", status=status, error=None if status == "ok" else f"{status} here")
    job["config_hash"], job["run_dir"] = config, f"/outputs/{config}-{finished_at}"
    if finished_at is not None:
        job["finished_at"] = finished_at
    return job


def write(path: Path, job: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job))


def test_the_latest_attempt_of_a_single_run_is_its_record(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs" / "2025-01-01"
    # the folder names sort against the finish times: the time decides, not the path
    write(outputs / "12-30-00" / "results.json", attempt("a", INTERRUPTED, "2025-01-01T12:31"))
    write(outputs / "09-00-00" / "results.json", attempt("a", "ok", "2025-01-01T12:40"))
    write(outputs / "10-00-00" / "results.json", attempt("b", "ok", "2025-01-01T10:05"))
    write(outputs / "11-00-00" / "results.json", attempt("b", "failed", "2025-01-01T11:05"))
    frame = load_sweep(outputs).set_index("config_hash")
    assert frame.loc["a", "status"] == "ok" and frame.loc["b", "status"] == "failed"
    assert frame.loc["a", "run_dir"] == "/outputs/a-2025-01-01T12:40" and len(frame) == 2


def test_the_latest_line_of_a_summary_wins_and_a_newer_file_beside_it(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    lines = [
        attempt("a", INTERRUPTED, "2025-01-01T12:00"),
        attempt("a", "ok", "2025-01-01T12:10"),
        attempt("b", "failed", "2025-01-01T12:00"),
        attempt("c", "failed", None),  # written before records had a finish time
        attempt("c", "ok", None),
    ]
    write(sweep / "summary.jsonl", {})
    (sweep / "summary.jsonl").write_text("".join(json.dumps(j) + "\n" for j in lines))
    # job b was resumed and killed between its record and its summary line
    write(sweep / "1" / "results.json", attempt("b", "ok", "2025-01-01T12:20"))
    # without finish times, summary lines outrank the files
    write(sweep / "2" / "results.json", attempt("c", "failed", None))
    statuses = {r["config_hash"]: r["status"] for r in records_of(sweep)}
    assert statuses == {"a": "ok", "b": "ok", "c": "ok"}


def test_interrupted_runs_are_counted_only_when_there_are_some() -> None:
    assert tally(Counter(ok=3)) == "3 ok, 0 diverged, 0 failed"
    assert tally(Counter(ok=3, interrupted=1)) == "3 ok, 0 diverged, 0 failed, 1 interrupted"


def test_a_sweep_with_an_interrupted_job_exits_1(monkeypatch) -> None:
    from harness.records import failures

    monkeypatch.setattr(failures, "LAST_SWEEP", Counter(ok=3, interrupted=1))
    assert sweep_exit_code() == 1


def test_sigterm_ends_a_run_as_interrupted_and_the_handlers_come_back() -> None:
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped, interruptible():
            assert signal.getsignal(signal.SIGTERM) is raise_terminated  # safe to send it
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler interrupts it
            except KeyboardInterrupt:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Lightning does, then exit(1)
                raise SystemExit(1) from None
        assert isinstance(stopped.value.__context__, Terminated)
        ended = outcome(stopped.value)
        assert (ended.status, ended.error) == (INTERRUPTED, "interrupted (SIGTERM)")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_launchers_sigterm_handler_is_left_alone() -> None:
    def launchers(signum, frame) -> None:
        pass

    before = signal.signal(signal.SIGTERM, launchers)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGTERM) is launchers
    finally:
        signal.signal(signal.SIGTERM, before)


def fake_trainer(step: int) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=step, sanity_checking=False, state=SimpleNamespace(fn=TrainerFn.FITTING)
    )


def test_segments_tile_the_steps_and_travel_in_the_checkpoint(tmp_path: Path) -> None:
    killed = Segments("run12345")
    killed.on_fit_start(fake_trainer(0), None)
    killed.on_train_start(fake_trainer(0), None)
    killed.on_validation_end(fake_trainer(20), None)  # saved here, then killed at step 23
    saved = {"global_step": 20, "callbacks": {"Segments": killed.state_dict()}}
    torch.save(saved, tmp_path / "last.ckpt")

    resumed = resumable(tmp_path / "last.ckpt")
    assert (resumed.path, resumed.step, resumed.run_id) == (tmp_path / "last.ckpt", 20, "run12345")
    again = Segments("another1")
    again.load_state_dict(saved["callbacks"]["Segments"])  # what Lightning does on resume
    again.on_fit_start(fake_trainer(20), None)
    again.on_train_start(fake_trainer(20), None)
    segments = again.close(120)
    assert [(s["from_step"], s["to_step"]) for s in segments] == [(0, 20), (20, 120)]
    assert again.run_id == "run12345" and all(s["wall_s"] >= 0 for s in segments)


def test_a_fresh_or_unreadable_checkpoint_starts_a_new_wandb_run(tmp_path: Path) -> None:
    fresh = resumable(tmp_path / "none.ckpt")
    assert (fresh.path, fresh.step) == (None, 0) and len(fresh.run_id) == 8
    (tmp_path / "torn.ckpt").write_bytes(b"not a checkpoint")
    torn = resumable(tmp_path / "torn.ckpt")
    assert torn.path is None and torn.run_id != fresh.run_id


def test_a_sweeps_id_is_unique_wherever_it_lies_and_survives_a_move(tmp_path: Path) -> None:
    first = tmp_path / "a" / "multirun" / "2025-01-31" / "12-00-00"
    second = tmp_path / "b" / "multirun" / "2025-01-31" / "12-00-00"
    description = {"command": "python run.py -m", "jobs": 2, "swept": ["model"]}
    describe_sweep(first, dict(description))
    describe_sweep(second, dict(description))
    ids = sweep_id(first), sweep_id(second)
    assert ids[0] != ids[1] and all(i.startswith("2025-01-31/12-00-00-") for i in ids)
    describe_sweep(first, dict(description))  # swept again to resume: the same id
    moved = tmp_path / "elsewhere" / "12-00-00"
    shutil.move(first, moved)
    assert sweep_id(moved) == ids[0]
