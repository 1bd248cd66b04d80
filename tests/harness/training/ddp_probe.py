"""`python -m tests.harness.training.ddp_probe OUT key=value ...`: one run through
`harness.train.run`
that also writes, per process, what that process saw: OUT/rank<r>.json with the token rows
of each training batch (by step) and of every test example it evaluated, and the record.
The run writes into OUT/run. Lightning's DDP starts the extra processes by running this same
command again, so test_ddp.py calls it in a subprocess."""

import json
import sys
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, open_dict

from harness.config.compose import compose_config
from harness.train import run
from harness.training.lightning_module import RecallModule


def config(out: Path, overrides: list[str]) -> DictConfig:
    cfg = compose_config(overrides, output_dir=out / "run")
    with open_dict(cfg):
        cfg.checkpoint.dir = str(out / "checkpoints")
    return cfg


def watch(seen: dict) -> None:
    """Record the batches of training and test steps."""
    train_step, test_step = RecallModule.training_step, RecallModule.test_step

    def training_step(self, batch, batch_idx):
        seen["train"].append([self.global_step, batch["inputs"].tolist()])
        return train_step(self, batch, batch_idx)

    def testing_step(self, batch, batch_idx, dataloader_idx=0):
        seen["test"].extend(batch["inputs"].tolist())
        return test_step(self, batch, batch_idx, dataloader_idx)

    RecallModule.training_step = training_step
    RecallModule.test_step = testing_step


def main(out: Path, overrides: list[str]) -> None:
    seen: dict = {"train": [], "test": []}
    watch(seen)
    record = run(config(out, overrides))
    rank = rank_zero_only.rank
    report = {"rank": rank, "seen": seen, "record": record}
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
