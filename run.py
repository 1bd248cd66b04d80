"""Entry point: `python run.py task=assoc_recall model=favor` (Hydra composes conf/); the
command line's names are checked first (`harness.config.command_line`), and the failure policy (exit
codes, a sweep that goes on) is `harness.records.failures`. torch and Lightning are imported
after that (with `harness.train`): `--help` and a refusal answer without them."""

import os
import sys
from pathlib import Path

# Jobs that launchers start in other processes (submitit, SLURM) import this repo's packages.
REPO = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
# OpenMP's idle threads sleep instead of spinning, so that a run beside other work does not
# burn the cores it waits on (docs/performance.md, "Threads beside other work"); before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from harness.config.command_line import check_command_line  # noqa: E402
from harness.config.compose import CONF_DIR  # noqa: E402  (also registers the presets' resolvers)
from harness.config.help import answer_help, register_help  # noqa: E402
from harness.records.failures import check_early, hydra_task, sweep_exit_code  # noqa: E402


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@hydra_task
def main(cfg: DictConfig) -> dict:
    check_early(cfg)
    from harness.train import run  # torch and Lightning

    return run(cfg)


if __name__ == "__main__":
    check_command_line(sys.argv[1:])
    answer_help(sys.argv[1:])
    register_help()
    main()
    sys.exit(sweep_exit_code())
