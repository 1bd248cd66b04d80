"""The SLURM path without a cluster: the `slurm` launcher preset composes into the sbatch
script a cluster would be sent, and two tiny jobs run through `submitit_local` with exactly
the settings that preset passes on (its setup lines, one torch thread per CPU of the task,
the sweep folder layout); both records land in `summary.jsonl`."""

import os
import re
from pathlib import Path

import pytest
import submitit
from hydra import compose, initialize_config_dir
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import DictConfig, OmegaConf

from harness.config.compose import CONF_DIR, hydra_value
from harness.records.files import read_summary
from tests.conftest import run_cli

SHARED = list(OmegaConf.structured(BaseQueueConf).keys())
"""The settings every submitit executor understands (SLURM's own, such as `partition`, only
reach an sbatch script)."""
# no `threads`: the preset's setup line decides them
TINY = ["debug=smoke", "task.vocab_size=32", "task.seq_len=24", "task.num_kv_pairs=4"]


def slurm_launcher(*overrides: str) -> DictConfig:
    """`hydra.launcher` as `python run.py -m hydra/launcher=slurm <overrides>` composes it."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True
        )
    return cfg.hydra.launcher


def sbatch_script(launcher: DictConfig, folder: Path, bin_dir: Path) -> str:
    """The sbatch script submitit writes for these settings (hydra-submitit-launcher's
    mapping of its config onto submitit's executor: generic keys as they are, the others
    prefixed with the cluster's name). submitit refuses to start without `srun`, so a
    stand-in is put on PATH; nothing is submitted."""
    params = OmegaConf.to_container(launcher, resolve=True)
    params.pop("_target_")
    params.pop("submitit_folder")
    init = {"slurm_max_num_timeout": params.pop("max_num_timeout")}
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **init)
    finally:
        os.environ["PATH"] = path
    executor.update_parameters(
        **{key if key in SHARED else f"slurm_{key}": value for key, value in params.items()}
    )
    return executor._executor._make_submission_file_text("python -m job", "uid")


def test_slurm_preset_composes_into_an_sbatch_script(tmp_path: Path) -> None:
    launcher = slurm_launcher(
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=lab",
        "hydra.launcher.gpus_per_node=1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.submitit_folder == f"{tmp_path / 'sweep'}/.submitit/%j"
    script = sbatch_script(launcher, tmp_path / "submitit", tmp_path)
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --mem=8GB",
        "#SBATCH --time=60",
        "export OMP_NUM_THREADS=2",  # the setup line, resolved
    ):
        assert line in script.splitlines(), line
    assert script.index("export OMP_NUM_THREADS=2") < script.index("srun")


@pytest.mark.slow
def test_two_jobs_run_locally_with_the_slurm_presets_settings(tmp_path: Path) -> None:
    # one CPU per task, so that the thread count differs from torch's default (all cores)
    preset = OmegaConf.to_container(slurm_launcher("hydra.launcher.cpus_per_task=1"), resolve=False)
    same = [f"hydra.launcher.{key}={hydra_value(preset[key])}" for key in SHARED]
    setup = f"+hydra.launcher.setup={hydra_value(preset['setup'])}"
    sweep = tmp_path / "sweep"
    result = run_cli(
        tmp_path,
        "-m",
        *TINY,
        "model=softmax,linear",
        "hydra/launcher=submitit_local",
        *same,
        setup,
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_summary(sweep)
    assert sorted(r["model"] for r in records) == ["linear", "softmax"]
    assert all(r["status"] == "ok" for r in records)
    # the sweep's layout: one folder per job number, submitit's files beside them
    assert {Path(r["run_dir"]).name for r in records} == {"0", "1"}
    assert all((sweep / n / "results.json").exists() for n in ("0", "1"))
    logs = list((sweep / ".submitit").glob("*/*_log.*"))
    assert logs, "submitit wrote no job logs into the sweep folder"
    # the setup line ran before each job: one torch thread per CPU of the task
    threads = re.findall(r"torch threads: (\d+)", "".join(p.read_text() for p in logs))
    assert threads == ["1", "1"]
