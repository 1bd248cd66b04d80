"""Off a terminal a run prints one line per validation (step, val acc, tokens/s, time left),
at most `LINES_PER_JOB + 1` a run, so that a 4-job sweep's log stays under 10 KB."""

import re

from harness.train import run
from harness.training.console import progress_line
from harness.training.progress import LINES_PER_JOB, progress_line_due
from tests.conftest import SMOKE

LINE = re.compile(
    r"(\[job \d+\] )?step \d+/\d+  val acc (\d\.\d{3}|\?)  \S+ tokens/s"
    r"  ~(\S+|\d+\.\d s) left"
)


def test_progress_line_says_step_accuracy_rate_and_time_left() -> None:
    line = progress_line(300, 1500, 0.125, 4900.0, 130.0, job=2)
    assert line == "[job 2] step 300/1500  val acc 0.125  4.9k tokens/s  ~2m10s left"
    assert progress_line(1, 10, None, None, None) == "step 1/10  val acc ?  ? tokens/s  ~? left"
    assert LINE.fullmatch(line)


def printed_steps(max_steps: int, interval: int) -> list[int]:
    """The validation steps that get a line, validating every `interval` steps."""
    printed: list[int] = []
    for step in range(interval, max_steps + 1, interval):
        if progress_line_due(step, max_steps, printed[-1] if printed else None):
            printed.append(step)
    return printed


def test_lines_are_thinned_to_a_bound_whatever_the_validation_interval() -> None:
    assert printed_steps(1500, 100)[:3] == [100, 300, 500]
    for max_steps, interval in ((1500, 100), (3000, 1), (100000, 7), (12, 1)):
        steps = printed_steps(max_steps, interval)
        assert len(steps) <= LINES_PER_JOB + 1, (max_steps, interval, len(steps))
        assert steps[0] == interval
        assert steps[-1] == max_steps or max_steps % interval  # the budget's end has a line


def test_a_four_job_sweeps_progress_stays_far_below_10_kb() -> None:
    """The longest line (a 7-digit budget, a long rate, hours left) times the most lines."""
    longest = progress_line(9_999_999, 9_999_999, 0.999, 999.9e6, 99 * 3600.0, job=999)
    per_job = (LINES_PER_JOB + 1) * (len(longest) + 1)
    assert 4 * per_job < 5_000  # the rest of the 10 KB: Hydra's launch lines and job lines


def test_a_run_off_a_terminal_prints_a_line_per_due_validation(make_cfg, capsys) -> None:
    cfg = make_cfg([*SMOKE, "trainer.max_steps=6", "trainer.val_check_interval=1"])
    cfg.trainer.enable_progress_bar = True  # pytest's capture is not a terminal: lines
    run(cfg)
    lines = [line for line in capsys.readouterr().out.splitlines() if LINE.fullmatch(line)]
    assert [int(line.split()[1].split("/")[0]) for line in lines] == printed_steps(6, 1)
    assert lines[-1].startswith("step 6/6") and lines[-1].endswith("~0.0 s left")


def test_no_lines_when_progress_is_off(make_cfg, capsys) -> None:
    run(make_cfg([*SMOKE, "trainer.max_steps=2", "trainer.val_check_interval=1"]))
    assert "tokens/s" not in capsys.readouterr().out
