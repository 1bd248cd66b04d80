"""The console fits a log file: known warnings and banners silenced, no progress bars off a
terminal, one closing line per job, a sweep's i/N and summary, and what Ctrl-C left."""

import json
import logging
import os
import re
import signal
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import torch

from harness.readouts.capacity import readout
from harness.readouts.convergence import STILL_RISING
from harness.training import console
from harness.training.checkpoint import saved_step
from harness.training.console import (
    capacity_text,
    interrupted,
    job_line,
    quiet,
    show_progress_bar,
    state_text,
    status_word,
    strongest_baseline,
)
from tests.conftest import SMALL_RECALL, cli_command, cli_env, terminal_sigint

OK = {
    "status": "ok",
    "task": "assoc_recall",
    "model": "linear",
    "metrics": {
        "test/acc": 0.5041539901708402,
        "test/baseline/chance": 0.0156,
        "test/baseline/in_context": 0.25,
    },
    "state": {"mixer_floats_per_layer": 4160, "conv_floats_per_layer": 64},
    "train": {"wall_s": 75.2, "converged": False},
}


def test_job_line_says_everything_in_one_line() -> None:
    line = job_line(OK, {"task.seq_len": 64, "backbone.d_model": 128}, "3/12")
    assert line.startswith("[3/12]  ok assoc_recall linear seq_len=64 d_model=128  ")
    for part in (
        "acc 0.504 (in_context 0.250)",
        "state 4,160",
        "1m15s",
        "not converged",
    ):
        assert part in line, (part, line)
    assert "\n" not in line


@pytest.mark.parametrize(
    ("baselines", "named"),
    [
        ({"chance": 0.008, "elimination": 0.12504, "in_context": 0.12497}, ("in_context", 0.12497)),
        ({"chance": 0.008, "elimination": 0.34, "in_context": 0.125}, ("elimination", 0.34)),
        ({"in_context": 0.2, "chance": 0.2}, ("chance", 0.2)),
    ],
)
def test_the_line_names_the_least_informed_of_equal_baselines(baselines, named) -> None:
    metrics = {f"test/baseline/{name}": value for name, value in baselines.items()}
    assert strongest_baseline(metrics) == named


MQAR = {"test/acc": 0.01, "test/baseline/chance": 0.0078, "test/baseline/in_context": 0.125}


@pytest.mark.parametrize(
    ("acc", "word"),
    [(0.094, "guessing"), (0.126, "guessing"), (0.008, "guessing"), (0.136, "ok"), (0.9, "ok")],
)
def test_a_run_no_better_than_its_best_guess_is_not_printed_ok(acc: float, word: str) -> None:
    """The headline's FAVOR+ run: 0.094 against in_context's 0.117 is a guess, not `ok`;
    within MIN_DELTA (0.01) above the baseline too. The record's status stays `ok`."""
    record = {**OK, "metrics": {**MQAR, "test/acc": acc}}
    assert job_line(record, {}).split()[0] == word
    assert status_word(record) == word and record["status"] == "ok"


HEADLINE_CONFIG = {"backbone": {"d_model": 64}, "data": {"batch_size": 64}}
HEADLINE_CONFIG["trainer"] = {"max_steps": 1200}


def headline(model: str, acc: float, n90: float, censoring: str, verdict: str) -> dict:
    """A record of the README's headline run (MQAR, loads 1-16) of `model`."""
    capacity = {"load": "num_kv_pairs", "n90": n90, "n90_censoring": censoring, "n50": n90}
    capacity |= {"verdict": verdict, "threshold": 0.9}
    state = {"mixer_floats_per_layer": 4224, "conv_floats_per_layer": 192}
    train = {"wall_s": 221.0, "converged": False, "val_curve": [[100, 0.08]], "floor": 0.117}
    return {
        **OK,
        "model": model,
        "metrics": {**MQAR, "test/acc": acc},
        "task_params": {"num_kv_pairs": [1, 16], "seq_len": 64},
        "config": HEADLINE_CONFIG,
        **{"capacity": capacity, "state": state, "train": train},
    }


def test_the_headline_s_line_sets_a_guess_against_softmax_in_160_columns(tmp_path, monkeypatch):
    """The README's headline: FAVOR+ below its best guess, no readout at 2 pairs, beside
    softmax's best committed readout at the same protocol and budget and how many of its runs
    read it (another budget's is no reference); with its folder the line fits 160 columns
    (the reasons stay in the record: `capacity.why`, `train.val_curve`)."""
    softmax = headline("softmax", 0.99, 16.0, "right", "not_limited")
    rising = headline("softmax", 0.65, 2.0, "left", "training_limited")
    other_budget = {**softmax, "config": {**HEADLINE_CONFIG, "trainer": {"max_steps": 99}}}
    (tmp_path / "summary.jsonl").write_text(
        "\n".join(json.dumps(r) for r in (softmax, rising, other_budget)) + "\n"
    )
    monkeypatch.setattr(console, "REFERENCES", tmp_path)
    favor = headline("favor", 0.094, 2.0, "left", "training_limited")
    line = job_line(favor, {}) + "  -> outputs/2026-12-04/05-16-34"
    assert line.startswith("guessing assoc_recall favor  acc 0.094 (in_context 0.125)  ")
    assert "n90 <2: training_limited (softmax >=16 in 1 of 2)  state 4,224  3m41s  -> " in line
    assert len(line) <= 160, (len(line), line)
    assert "(softmax" not in job_line(rising, {})
    monkeypatch.setattr(console, "REFERENCES", tmp_path / "none")
    assert "(softmax" not in job_line(favor, {})


def test_a_run_s_folder_is_named_from_the_working_directory_when_under_it(tmp_path) -> None:
    assert console.where(Path.cwd() / "outputs" / "2026-12-06" / "08-41-15") == (
        "-> outputs/2026-12-06/08-41-15"
    )
    assert console.where(tmp_path) == f"-> {tmp_path.resolve()}"


def test_a_load_curve_line_keeps_its_readout_and_leaves_convergence_to_its_verdict() -> None:
    capacity = {"load": "num_kv_pairs", "n90": 12.3, "n50": 27.0, "verdict": "capacity_limited"}
    train = {**OK["train"], "val_curve": [[100, 0.008]], "floor": 0.125}
    line = job_line({**OK, "metrics": MQAR, "train": train, "capacity": capacity}, {})
    assert "n90 12.3: capacity_limited" in line
    assert "not converged" not in line and "n50" not in line


def test_a_still_rising_run_reads_a_lower_bound_in_the_same_words_as_its_verdict() -> None:
    """quick_curve's linear run: still rising, its n90 read past the judging load."""
    found = readout(
        {1: 1.0, 2: 0.97, 4: 0.93, 8: 0.6, 16: 0.2},
        {1: 1.0, 2: 0.5, 4: 0.25, 8: 0.125, 16: 0.0625},
        0.9,
        STILL_RISING,
    )
    capacity = {**found, "load": "num_kv_pairs"}
    train = {**OK["train"], "converged": False, "val_curve": [[100, 0.3], [200, 0.6]]}
    train["floor"] = 0.125
    line = job_line({**OK, "metrics": MQAR, "train": train, "capacity": capacity}, {})
    assert "n90 >=4.26: training_limited" in line and "capacity_limited" not in line


def test_a_run_at_the_floor_and_one_that_learned_below_the_threshold_say_which_they_are() -> None:
    """Both read n90 <2; the README's verdicts tell them apart, and so does the line: FAVOR+ at
    the floor at 2 pairs is training_limited, a state that bound but held under 0.9 there is
    capacity_limited."""
    floors = {2: 0.5, 4: 0.25, 8: 0.125}
    at_floor = readout({2: 0.45, 4: 0.25, 8: 0.12}, floors, 0.9, "at_floor")
    learned = readout({2: 0.8, 4: 0.5, 8: 0.2}, floors, 0.9, "converged")
    assert capacity_text({**at_floor, "load": "num_kv_pairs"}) == "n90 <2: training_limited"
    assert capacity_text({**learned, "load": "num_kv_pairs"}) == "n90 <2: capacity_limited"


def test_job_line_of_a_diverged_job_gives_the_reason() -> None:
    error = "training loss is nan at step 132"
    line = job_line({**OK, "status": "diverged", "error": error, "metrics": {}}, {})
    assert line.startswith("diverged") and line.endswith(f"-- {error}")
    assert "acc" not in line


def test_a_kv_cache_is_named_and_a_state_without_conv_has_no_conv_part() -> None:
    kv = {"mixer_floats_per_layer": 8192, "conv_floats_per_layer": 0, "grows_with_seq_len": True}
    kv["layers"] = [{"mixer": "softmax"}, {"mixer": "softmax"}]
    assert state_text(kv) == "KV cache 8,192"
    assert state_text({}) == ""


def test_a_state_that_grows_with_t_but_is_no_kv_cache_says_it_grows() -> None:
    tree = {"mixer_floats_per_layer": 28672, "conv_floats_per_layer": 576}
    tree |= {"grows_with_seq_len": True, "layers": [{"mixer": "log_linear_mamba2"}]}
    assert state_text(tree) == "state 28,672 (grows with T)"


def test_known_warnings_and_banners_are_silenced() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet()
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, stacklevel=1)
        warnings.warn("Checkpoint directory /c/1a exists and is not empty.", stacklevel=1)
        warnings.warn("something new", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something new"]
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    logger.addHandler(handler)
    try:
        logger.warning("GPU available: False, used: False")
        logger.warning("💡 Tip: For seamless cloud logging, try installing litlogger")
        logger.warning("Restoring states from the checkpoint path")
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in seen] == ["Restoring states from the checkpoint path"]


def test_no_progress_bar_off_a_terminal() -> None:
    assert show_progress_bar(True) is False  # pytest captures stderr: not a terminal
    assert show_progress_bar(False) is False


def test_interrupted_says_how_to_resume(tmp_path: Path) -> None:
    checkpoint = tmp_path / "last.ckpt"
    assert "start this job again" in interrupted(checkpoint, None, 600, None)
    message = interrupted(checkpoint, 200, 600, tmp_path / "sweep")
    assert f"kept at step 200 of 600 in {checkpoint}" in message
    assert "resume from step 200" in message and f"hydra.sweep.dir={tmp_path / 'sweep'}" in message


def test_the_step_kept_is_the_checkpoint_s(tmp_path: Path) -> None:
    checkpoint = tmp_path / "last.ckpt"
    assert saved_step(checkpoint) is None
    torch.save({"global_step": 200}, checkpoint)
    assert saved_step(checkpoint) == 200


@pytest.mark.slow
def test_sweep_console_fits_a_log_file(tiny_sweep) -> None:
    sweep, result = tiny_sweep
    output = result.stdout + result.stderr
    assert len(output.encode()) < 4000, len(output.encode())
    for noise in ("GPU available", "Tip:", "LeafSpec", "weights_only", "Training", "\r", "it/s"):
        assert noise not in output, noise
    lines = result.stdout.splitlines()
    assert lines[0] == f"sweep: {sweep} (4 jobs)"
    finished = [line for line in lines if re.match(r"\[\d+/\d+\]", line)]
    assert [line.split("]")[0] for line in finished] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert all(
        re.search(r"/4\]  (ok|guessing) ", line) and "seq_len=" in line and " acc " in line
        for line in finished
    )
    assert lines[-1] == f"4 ok, 0 diverged, 0 failed -> python -m harness.report {sweep}"
    progress = [line for line in lines if line.endswith(" left")]  # off a terminal (a pipe)
    assert sorted({line.split("]")[0] for line in progress}) == [f"[job {n}" for n in range(4)]
    assert all(
        " step " in line and " val acc " in line and " tokens/s " in line for line in progress
    )


@pytest.mark.slow
def test_ctrl_c_keeps_the_checkpoint_and_says_rerun_resumes(tmp_path: Path) -> None:
    args = [a for a in SMALL_RECALL if not a.startswith("trainer.max_steps")]
    args += [
        "trainer.max_steps=100000",
        "trainer.val_check_interval=5",
        "early_stop_acc=null",
        "threads=1",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    process = subprocess.Popen(
        cli_command(*args),
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_sigint,  # a terminal's Ctrl-C
    )
    deadline = time.time() + 300
    while not list((tmp_path / "ckpt").glob("*/last.ckpt")) and time.time() < deadline:
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("Ctrl-C did not stop the run within two minutes") from None
    assert process.returncode != 0
    (checkpoint,) = (tmp_path / "ckpt").glob("*/last.ckpt")
    step = saved_step(checkpoint)
    kept = f"interrupted: training state kept at step {step} of 100000 in {checkpoint}"
    assert kept in stderr, stderr[-2000:]
    assert f"run the same command again to resume from step {step}" in stderr


def test_sweep_plan_counts_the_presets_and_the_command_lines_values() -> None:
    from omegaconf import OmegaConf

    from harness.records.sweep_console import sweep_plan

    config = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {
                    "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": {"model": "softmax,linear,favor", "seed": "0,1,2"},
                },
                "overrides": {"task": ["task.num_kv_pairs=4,8", "seed=0", "threads=1"]},
            }
        }
    )
    jobs, swept = sweep_plan(config)
    assert jobs == 3 * 2  # the command line's seed=0 replaces the preset's three seeds
    assert swept == ["model", "task.num_kv_pairs"]

    config.hydra.overrides.task = ["model=glob(*,exclude=soft*)"]  # the group's options
    from harness.config.group_nodes import group_options

    options = len(group_options()["model"])
    assert sweep_plan(config) == ((options - 1) * 3, ["model", "seed"])


def test_a_job_line_names_the_option_of_a_swept_group(tmp_path: Path) -> None:
    """`+state_size=softmax,linear_d2` is a group, not a key of the config: each job's line
    names the option it ran (and the model it composed)."""
    from tests.conftest import run_cli

    sweep = tmp_path / "sweep"
    result = run_cli(
        tmp_path, "-m", "+state_size=softmax,linear_d2", "debug=smoke", f"hydra.sweep.dir={sweep}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if re.match(r"\[\d/2\]", line)]
    assert len(lines) == 2, result.stdout
    assert any(" softmax " in line and "state_size=softmax " in line for line in lines), lines
    assert any(" linear " in line and "state_size=linear_d2 " in line for line in lines), lines
