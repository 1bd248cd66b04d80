"""LightningDataModule serving a task's train / val / test splits as torch tensors.

Data parallel (DDP) without Lightning's sampler injection (`use_distributed_sampler: false`,
set in conf/trainer/default.yaml): training batches are a function of the step, and of the
step only; `data.batch_size` is the global batch, and rank r of W trains on the r-th of its
W equal parts, so every rank sees different examples, the union over ranks is exactly the
batch one process would draw at that step, and a resumed run continues exactly.
Evaluation splits are sharded without repetition (rank r takes examples r, r + W, ...), so
each example is counted once when the ranks' counts are summed.
"""

from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, Sampler

from harness.dataset_cache import load_split, split_seed
from tasks import Task


class ArrayDataset(Dataset):
    """Columns of equal length; a batch is fetched with one fancy index per column."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.columns = {name: torch.from_numpy(np.asarray(a)) for name, a in arrays.items()}
        self.length = len(self.columns["inputs"])

    def __len__(self) -> int:
        return self.length

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays (no copy)."""
        return {name: column.numpy() for name, column in self.columns.items()}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(indices)
        return {name: column[index] for name, column in self.columns.items()}


class StepBatchSampler(Sampler[list[int]]):
    """Training batches as a function of the step alone: batch s is slice s mod E of the
    permutation of epoch s // E (E = batches per epoch), drawn from a generator seeded with
    (seed, epoch). Starting at `start_step` (< num_steps) continues a killed run exactly.

    Under data parallelism `batch_size` is the global batch: rank `rank` of `world_size`
    yields the rank-th of world_size equal, disjoint parts of every step's batch."""

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        seed: int,
        start_step: int,
        num_steps: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batch_size % world_size or not 0 <= rank < world_size:
            raise ValueError(
                f"batch_size={batch_size} must split evenly over world_size={world_size}"
                f" (rank={rank})"
            )
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.start_step, self.num_steps = start_step, num_steps
        self.rank, self.world_size = rank, world_size
        self.per_epoch = max(1, num_examples // batch_size)

    def __len__(self) -> int:
        """All steps of training (Lightning's loop counts restored steps into the epoch)."""
        return self.num_steps

    def __iter__(self):
        epoch, order = None, None
        for step in range(self.start_step, self.num_steps):
            if step // self.per_epoch != epoch:
                epoch = step // self.per_epoch
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                order = torch.randperm(self.num_examples, generator=generator)
            index = step % self.per_epoch
            batch = order[index * self.batch_size : (index + 1) * self.batch_size]
            yield batch.tensor_split(self.world_size)[self.rank].tolist()


def keep_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch


class TaskDataModule(L.LightningDataModule):
    """Train/val/test from disjoint seeds of one data `seed`; test sets at every length of
    `eval_seq_lens` (the training length first), for accuracy against length."""

    def __init__(
        self,
        task: Task,
        num_train: int,
        num_val: int,
        num_test: int,
        batch_size: int,
        seed: int,
        eval_seq_lens: list[int] | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.task, self.batch_size, self.seed, self.cache_dir = task, batch_size, seed, cache_dir
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        lengths = [task.seq_len] + [n for n in eval_seq_lens or [] if n != task.seq_len]
        self.test_tasks = [task if n == task.seq_len else task.with_seq_len(n) for n in lengths]
        self.splits: dict[str, ArrayDataset] = {}
        self.test_sets: list[ArrayDataset] = []

    @property
    def test_seq_lens(self) -> list[int]:
        return [t.seq_len for t in self.test_tasks]

    def _load(self, task: Task, split: str) -> ArrayDataset:
        seed = split_seed(self.seed, split)
        return ArrayDataset(load_split(task, self.sizes[split], seed, self.cache_dir))

    def prepare_data(self) -> None:
        """Generate and cache every split once (rank 0 only under DDP)."""
        if self.cache_dir is None:
            return
        for split in ("train", "val"):
            self._load(self.task, split)
        for task in self.test_tasks:
            self._load(task, "test")

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None) and not self.splits:
            self.splits = {split: self._load(self.task, split) for split in ("train", "val")}
        if stage in ("test", None) and not self.test_sets:
            self.test_sets = [self._load(task, "test") for task in self.test_tasks]

    def _ranks(self) -> tuple[int, int]:
        """(this process's rank, the number of processes), (0, 1) without a trainer."""
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def _loader(self, dataset: ArrayDataset) -> DataLoader:
        """In order; under DDP this rank's shard, without the padding that would count
        examples twice (shards differ by at most one example)."""
        rank, world_size = self._ranks()
        sampler = None
        if world_size > 1:
            sampler = UnrepeatedDistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=False
            )
        return DataLoader(
            dataset, batch_size=self.batch_size, sampler=sampler, collate_fn=keep_batch
        )

    def train_dataloader(self) -> DataLoader:
        """One pass of `max_steps` batches; when resuming, from the restored step on; under
        DDP this rank's part of each (global) batch."""
        start = self.trainer.global_step if self.trainer else 0
        total = self.trainer.max_steps if self.trainer else 1
        rank, world_size = self._ranks()
        sampler = StepBatchSampler(
            len(self.splits["train"]), self.batch_size, self.seed, start, total, rank, world_size
        )
        return DataLoader(self.splits["train"], batch_sampler=sampler, collate_fn=keep_batch)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.splits["val"])

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(dataset) for dataset in self.test_sets]
