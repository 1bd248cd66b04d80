"""`python -m tests.harness.ddp_probe OUT key=value ...`: one run through `harness.train.run`
that also writes, per process, what that process saw: OUT/rank<r>.json with the token rows
of each training batch (by step) and of every test example it evaluated, and the record's
metrics; rank 0 saves the final weights to OUT/weights.pt. Lightning's DDP starts the extra
processes by running this same command again, so test_ddp.py calls it in a subprocess."""

import json
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, open_dict

from harness.module import RecallModule
from harness.train import run

REPO = Path(__file__).resolve().parents[2]


def config(out: Path, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with open_dict(cfg):
        cfg.output_dir = str(out / "run")
        cfg.data.cache_dir = str(out / "cache")
        cfg.checkpoint.dir = str(out / "checkpoints")
    return cfg


def watch(out: Path, seen: dict) -> None:
    """Record the batches of training and test steps; save the weights after testing."""
    train_step, test_step = RecallModule.training_step, RecallModule.test_step
    test_end = RecallModule.on_test_epoch_end

    def training_step(self, batch, batch_idx):
        seen["train"].append([self.global_step, batch["inputs"].tolist()])
        return train_step(self, batch, batch_idx)

    def testing_step(self, batch, batch_idx, dataloader_idx=0):
        seen["test"].extend(batch["inputs"].tolist())
        return test_step(self, batch, batch_idx, dataloader_idx)

    def on_test_epoch_end(self):
        test_end(self)
        if self.trainer.is_global_zero:
            torch.save(self.model.state_dict(), out / "weights.pt")

    RecallModule.training_step = training_step
    RecallModule.test_step = testing_step
    RecallModule.on_test_epoch_end = on_test_epoch_end


def main(out: Path, overrides: list[str]) -> None:
    seen: dict = {"train": [], "test": []}
    watch(out, seen)
    record = run(config(out, overrides))
    rank = rank_zero_only.rank
    report = {"rank": rank, "seen": seen, "metrics": record["metrics"], "status": record["status"]}
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
