"""The failure policy in one place (`harness.records.failures`): each exception's status and error
in the record, and the exit code of a single run, a sweep and a re-test."""

from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.config.refusal import BadInput, as_bad_input, refused
from harness.records import failures
from harness.records.failures import (
    Diverged,
    Terminated,
    forget,
    hydra_task,
    outcome,
    sweep_exit_code,
)
from harness.records.schema import DIVERGED, FAILED, INTERRUPTED
from models.mixers.base import DenominatorCollapse


@pytest.mark.parametrize(
    ("error", "status", "message", "step"),
    [
        (Diverged("training loss is nan", 132), DIVERGED, "training loss is nan at step 132", 132),
        (DenominatorCollapse("denominators <= 0"), DIVERGED, "denominators <= 0", None),
        (BadInput("seed=-1 is invalid: must be"), FAILED, "seed=-1 is invalid: must be", None),
        (KeyboardInterrupt(), INTERRUPTED, "interrupted (KeyboardInterrupt)", None),
        (SystemExit(1), INTERRUPTED, "interrupted (SystemExit)", None),
        (Terminated("SIGTERM"), INTERRUPTED, "interrupted (SIGTERM)", None),
        (RuntimeError("CUDA out of memory"), FAILED, "RuntimeError: CUDA out of memory", None),
    ],
)
def test_each_exception_has_its_status_and_error(error, status, message, step) -> None:
    ended = outcome(error)
    assert (ended.status, ended.error, ended.diverged_at_step) == (status, message, step)
    assert ended.ends_the_run == (status != DIVERGED)  # a divergence is a result, not an error


def test_diverged_carries_its_step_as_a_field() -> None:
    error = Diverged("training loss is inf", 7)
    assert (error.reason, error.step, str(error)) == (
        "training loss is inf",
        7,
        "training loss is inf at step 7",
    )


def test_a_value_error_inside_is_bad_input_with_the_same_message() -> None:
    with pytest.raises(BadInput, match="^x=1 is invalid$"), as_bad_input():
        raise ValueError("x=1 is invalid")
    with pytest.raises(RuntimeError), as_bad_input():
        raise RuntimeError("not the user's input")


def test_a_refusal_is_one_line_and_exit_2(capsys, monkeypatch) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert refused(BadInput("seed=-1 is invalid: must be an integer >= 0")) == 2
    assert capsys.readouterr().err == "error: seed=-1 is invalid: must be an integer >= 0\n"
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(BadInput):
        refused(BadInput("seed=-1 is invalid"))


def raises(error: BaseException):
    def run(cfg):
        raise error

    return run


def test_a_single_run_refused_exits_2_and_leaves_no_folder(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    folder = tmp_path / "outputs" / "day" / "time"
    folder.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(failures, "NEW_RUN_DIRS", {folder.resolve()})
    cfg = OmegaConf.create({"output_dir": str(folder)})
    with pytest.raises(SystemExit) as exit_:
        hydra_task(raises(BadInput("threads='two' is invalid")))(cfg)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["error: threads='two' is invalid"]
    assert not (tmp_path / "outputs").exists()


def test_a_folder_that_existed_before_the_run_is_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(failures, "NEW_RUN_DIRS", set())
    forget(tmp_path)
    assert tmp_path.is_dir()


def test_a_single_run_error_and_full_error_keep_their_traceback(monkeypatch) -> None:
    cfg = OmegaConf.create({"output_dir": "."})
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(RuntimeError):
        hydra_task(raises(RuntimeError("boom")))(cfg)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(BadInput):
        hydra_task(raises(BadInput("seed=-1 is invalid")))(cfg)


def test_the_task_returns_the_test_accuracy() -> None:
    task = hydra_task(lambda cfg: {"metrics": {"test/acc": 0.75}})
    assert task(OmegaConf.create({})) == 0.75


def test_a_sweep_with_a_failed_job_exits_1(monkeypatch) -> None:
    monkeypatch.setattr(failures, "LAST_SWEEP", Counter({"ok": 3, "diverged": 1}))
    assert sweep_exit_code() == 0
    failures.LAST_SWEEP["failed"] += 1
    assert sweep_exit_code() == 1
