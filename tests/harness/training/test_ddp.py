"""Data parallel on CPU (gloo, 2 processes): each rank trains on its own part of every step's
global batch, evaluation shards count every example once, and the gathered metrics equal one
process's evaluation of the same weights exactly; training reaches the accuracy of one
process with the same global batch."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness.config.devices import cpu_cores
from harness.evaluate import evaluate
from harness.training.build import build
from harness.training.samplers import StepBatchSampler
from tasks.splits import split_seed
from tests.conftest import REPO, SMALL_RECALL, cli_env, run_cli

needs_two_cores = pytest.mark.skipif(cpu_cores() < 2, reason="DDP test runs 2 processes")
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "threads=1"]
TINY = [
    "logger=none",
    "model=linear",
    "task.vocab_size=32",
    "task.seq_len=24",
    "task.num_kv_pairs=4",
    "data.num_train=512",
    "data.num_val=97",  # odd sizes: the two shards differ by one example ...
    "data.num_test=101",
    "data.batch_size=16",  # ... and, in batches of 16, by one batch (51 vs 50 examples)
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "trainer.enable_progress_bar=false",
    "checkpoint.keep=true",  # rank 0 keeps the final weights, to evaluate in one process
]


@pytest.mark.parametrize("world_size", [2, 4])
def test_step_batches_split_the_global_batch_into_disjoint_parts(world_size: int) -> None:
    single = list(StepBatchSampler([100], [3], 8, seed=3, start_step=0, num_steps=30))
    ranks = [
        list(StepBatchSampler([100], [3], 8, 3, 0, 30, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    for step, batch in enumerate(single):
        parts = [ranks[r][step] for r in range(world_size)]
        assert sum(parts, []) == batch
        assert all(len(part) == 8 // world_size for part in parts)
    resumed = list(StepBatchSampler([100], [3], 8, 3, 17, num_steps=30, rank=1, world_size=2))
    assert resumed == list(StepBatchSampler([100], [3], 8, 3, 0, 30, rank=1, world_size=2))[17:]
    with pytest.raises(ValueError, match="batch_size=6 must split evenly over world_size=4"):
        StepBatchSampler([100], [3], 6, 3, 0, 30, rank=0, world_size=4)


def rows(batch: list[list[int]]) -> list[tuple[int, ...]]:
    return [tuple(row) for row in batch]


@needs_two_cores
def test_ddp_ranks_see_disjoint_data_and_metrics_equal_one_process(make_cfg, tmp_path: Path):
    out = tmp_path / "probe"
    out.mkdir()
    probe = [sys.executable, "-m", "tests.harness.training.ddp_probe", str(out), *TINY, *DDP]
    result = subprocess.run(
        probe, cwd=REPO, env=cli_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    record = json.loads((out / "run" / "results.json").read_text())
    assert record["status"] == "ok" and record["train"]["steps"] == 6

    # training: at every step the two ranks' parts are disjoint halves of the global batch
    cfg = make_cfg(TINY)
    task = build(cfg).task
    train = task.generate(512, split_seed(cfg.data.seed, "train"))
    inputs = train["inputs"].tolist()
    sampler = StepBatchSampler([512], [cfg.data.seed], 16, cfg.data.seed, 0, 6)
    steps = [dict(rank["seen"]["train"]) for rank in ranks]
    assert sorted(steps[0]) == sorted(steps[1]) == list(range(6))
    for step, indices in enumerate(sampler):
        first, second = rows(steps[0][step]), rows(steps[1][step])
        assert len(first) == len(second) == 8 and not set(first) & set(second)
        assert first + second == rows([inputs[i] for i in indices])

    # test: the shards cover the test set once (51 + 50 examples), none twice
    test = task.generate(101, split_seed(cfg.data.seed, "test"))
    evaluated = Counter(rows(ranks[0]["seen"]["test"]) + rows(ranks[1]["seen"]["test"]))
    assert sorted(len(rank["seen"]["test"]) for rank in ranks) == [50, 51]
    assert evaluated == Counter(rows(test["inputs"].tolist()))

    # metrics: one process evaluating the same weights gets exactly the gathered numbers
    single = evaluate(out / "run")["metrics"]
    gathered = {k: v for k, v in record["metrics"].items() if k.startswith("test/")}
    assert len(gathered) > 5 and gathered == {k: single[k] for k in gathered}
    assert ranks[1]["record"]["metrics"] == ranks[0]["record"]["metrics"]


@pytest.mark.slow
@needs_two_cores
def test_ddp_training_reaches_the_accuracy_of_one_process(tmp_path: Path) -> None:
    """softmax on a small recall task, global batch 64: 2 processes x 32 against 1 x 64."""
    records = {}
    for name, extra in (("single", ["threads=1"]), ("ddp", DDP)):
        folder = tmp_path / name
        args = [*SMALL_RECALL, "model=softmax", *extra, f"hydra.run.dir={folder}"]
        result = run_cli(tmp_path, *args)
        assert result.returncode == 0, result.stderr[-3000:]
        records[name] = json.loads((folder / "results.json").read_text())
    single, ddp = (records[n]["metrics"]["test/acc"] for n in ("single", "ddp"))
    assert single >= 0.9 and ddp >= 0.9
    assert abs(single - ddp) <= 0.05
