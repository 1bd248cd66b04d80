"""W&B dashboards as they come: offline runs read back as `wandb sync` would upload them."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.records.sweep import describe_sweep, sweep_id
from harness.records.wandb_run import (
    STEP,
    finish_wandb,
    report_run_id,
    run_name,
    sweep_group,
    wandb_logger,
)
from harness.report.sweep_report import report
from tests.harness.synthetic import record
from tests.harness.wandb_offline import read_run


def test_run_names_come_from_the_swept_values() -> None:
    job = record("deltanet", d_model=128, seq_len=256, seed=1, task_params={"num_kv_pairs": 8})
    swept = ["model", "backbone.d_model", "task.num_kv_pairs", "task.seq_len", "seed"]
    assert run_name(job, swept) == "deltanet-d128-kv8-T256-s1"
    assert run_name(job, ["model", "optim.lr"]) == "deltanet-T256-lr0.002"
    assert run_name(job, None, 3) == "deltanet-assoc_recall-T256-job3"


def test_a_swept_config_group_names_its_option() -> None:
    """`+state_size=linear_d8,linear_d16` leaves no key of its own in the config: the record's
    `choices` carry the option, so every cell of the sweep gets its own name."""
    names = set()
    for option in ("linear_d8", "linear_d16"):
        job = {**record("linear", seed=0), "choices": {"state_size": option, "model": "linear"}}
        names.add(run_name(job, ["state_size", "seed"]))
    assert names == {"linear-T64-linear_d8-s0", "linear-T64-linear_d16-s0"}


def test_group_is_the_sweep_id_after_the_preset(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun" / "2025-01-31" / "12-00-00"
    describe_sweep(sweep, {"command": "python run.py -m", "jobs": 2, "swept": ["model"]})
    assert sweep_group(sweep, None) == sweep_id(sweep)
    assert sweep_group(sweep, "state_frontier") == f"state_frontier/{sweep_id(sweep)}"
    assert sweep_group(None, "state_frontier") == "state_frontier"
    same_folders = tmp_path / "other" / "2025-01-31" / "12-00-00"
    assert sweep_group(same_folders, None) != sweep_group(sweep, None)


def offline_run(run_dir: Path, run_id: str, steps: range) -> dict | None:
    """One process of a run that logs `train/loss` at `steps` into W&B, offline."""
    logger_cfg = OmegaConf.create({"name": "wandb", "project": "recall-harness", "mode": "offline"})
    logger = wandb_logger(logger_cfg, run_dir, run_id, name="softmax-T24", config={"seed": 0})
    for step in steps:
        logger.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
    return finish_wandb(logger, {"status": "ok", "metrics": {"test/acc": 0.5}})


def test_a_resumed_run_continues_its_wandb_run_at_the_checkpoints_step(tmp_path: Path) -> None:
    first = offline_run(tmp_path / "1", "resume01", range(0, 50, 10))  # killed after step 40
    second = offline_run(tmp_path / "2", "resume01", range(30, 100, 10))  # resumed from 30
    assert first["id"] == second["id"] == "resume01" and first["mode"] == "offline"
    runs = [read_run(d) for d in sorted(tmp_path.glob("*/wandb/offline-run-*"))]
    assert [r.run_id for r in runs] == ["resume01", "resume01"]
    rows = [[(h["_step"], h[STEP]) for h in r.history if "train/loss" in h] for r in runs]
    assert rows[0] == [(s, s) for s in range(0, 50, 10)]  # W&B's step is the training step
    assert rows[1] == [(s, s) for s in range(30, 100, 10)]  # from the checkpoint's step on


@pytest.mark.slow
def test_job_runs_read_back(tiny_sweep) -> None:
    sweep, _ = tiny_sweep
    runs = [read_run(d) for d in sorted(sweep.glob("*/wandb/offline-run-*"))]
    assert len(runs) == 4
    assert sorted(r.name for r in runs) == [
        "linear-T24",
        "linear-T32",
        "softmax-T24",
        "softmax-T32",
    ]
    for run in runs:
        assert run.group == sweep_id(sweep) and run.project == "recall-harness"
        assert run.group.startswith("2025-01-31/12-00-00-")
        assert {"task:assoc_recall", f"model:{run.name.split('-')[0]}"} == set(run.tags)
        step = [m for m in run.metrics if m.name == "trainer/global_step"]
        every = [m for m in run.metrics if m.glob_name == "*"]
        assert step and every and every[0].step_metric == "trainer/global_step"
        for facts in (run.config, run.summary):
            assert facts["num_params"] > 0 and facts["status"] == "ok"
            assert facts["state"]["floats_per_layer"] > 0
            assert facts["train"]["wall_s"] > 0 and facts["train"]["tokens_per_s"] > 0
        assert "test/acc" in run.summary
        assert [h["trainer/global_step"] for h in run.history if "train/loss" in h][:2] == [4, 9]
        assert run.kinds["output_raw"] == 0  # no console (and no progress bars) captured


@pytest.mark.slow
def test_report_run_goes_to_the_sweeps_project_under_one_id(tiny_sweep) -> None:
    sweep, _ = tiny_sweep
    report(sweep)  # auto: offline, as the jobs
    report(sweep)  # again: the same run, not another one
    (folder,) = (sweep / "report" / "wandb").glob("offline-run-*")
    run = read_run(folder)
    assert run.run_id == report_run_id(sweep) and run.job_type == "report"
    assert run.project == "recall-harness" and run.group == sweep_id(sweep)
    logged = {key.split(".")[0] for key in run.summary}
    assert {"report/table", "report/frontier", "report/frontier_plot_table"} <= logged
    assert {"report/acc_vs_seq_len", "report/acc_vs_state"} <= logged
    assert "python" in run.config["command"] and "model=softmax,linear" in run.config["command"]
