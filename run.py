"""Entry point: `python run.py task=assoc_recall model=favor` (Hydra composes conf/)."""

import contextlib
import os
import shutil
import sys
import traceback
from pathlib import Path

# Jobs that launchers start in other processes (submitit, SLURM) import this repo's packages.
REPO = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import harness.config  # noqa: E402,F401  (registers the resolvers the presets use)
from harness.build import BadInput  # noqa: E402
from harness.callbacks import LAST_SWEEP, NEW_RUN_DIRS  # noqa: E402
from harness.console import quiet  # noqa: E402
from harness.train import output_dir, run, sweep_dir  # noqa: E402


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    quiet()
    try:
        record = run(cfg)
    except BadInput as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if sweep_dir() is not None:
            return None  # recorded as failed (and printed); the sweep goes on
        forget(output_dir(cfg))
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except Exception:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or sweep_dir() is None:
            raise
        path = output_dir(cfg) / "traceback.txt"  # the job is recorded as failed; go on
        path.write_text(traceback.format_exc())
        print(f"traceback: {path}", file=sys.stderr)
        return None
    return record["metrics"].get("test/acc")


def forget(folder: Path) -> None:
    """A refused run leaves no folder behind, nor the emptied folders above it that it
    created (`outputs/<date>`), up to the working directory; a folder that existed before the
    run (`hydra.run.dir=` an old one) is left as it is."""
    if folder.resolve() not in NEW_RUN_DIRS:
        return
    shutil.rmtree(folder, ignore_errors=True)
    here = Path.cwd().resolve()
    for parent in folder.resolve().parents:
        if parent == here or here not in parent.parents:
            break
        with contextlib.suppress(OSError):
            parent.rmdir()  # only succeeds when empty


if __name__ == "__main__":
    main()
    if LAST_SWEEP["failed"]:
        sys.exit(1)
