"""Entry point: `python run.py task=assoc_recall model=favor` (Hydra composes conf/)."""

import os
import sys
from pathlib import Path

# Jobs that launchers start in other processes (submitit, SLURM) import this repo's packages.
REPO = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import harness.config  # noqa: E402,F401  (registers the resolvers the presets use)
from harness.build import BadInput  # noqa: E402
from harness.train import is_recording_rank, run, sweep_dir  # noqa: E402


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    try:
        record = run(cfg)
    except BadInput as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or sweep_dir() is not None:
            raise  # a sweep records the failure and goes on with its other jobs
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    acc = record["metrics"].get("test/acc")
    state = record["state"]["floats_per_layer"]
    if is_recording_rank():  # once, not once per data-parallel process
        print(f"{record['status']}: test/acc={acc} state floats/layer={state} ({cfg.model.name})")
    return acc


if __name__ == "__main__":
    main()
