"""LightningDataModule serving a task's train / val / test splits as torch tensors."""

from pathlib import Path

import lightning as L
import numpy as np
import torch
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

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(indices)
        return {name: column[index] for name, column in self.columns.items()}


class StepBatchSampler(Sampler[list[int]]):
    """Training batches as a function of the step alone: batch s is slice s mod E of the
    permutation of epoch s // E (E = batches per epoch), drawn from a generator seeded with
    (seed, epoch). Starting at `start_step` (< num_steps) continues a killed run exactly."""

    def __init__(
        self, num_examples: int, batch_size: int, seed: int, start_step: int, num_steps: int
    ) -> None:
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.start_step, self.num_steps = start_step, num_steps
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
            yield order[index * self.batch_size : (index + 1) * self.batch_size].tolist()


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

    def _loader(self, dataset: ArrayDataset) -> DataLoader:
        return DataLoader(dataset, batch_size=self.batch_size, collate_fn=keep_batch)

    def train_dataloader(self) -> DataLoader:
        """One pass of `max_steps` batches; when resuming, from the restored step on."""
        start = self.trainer.global_step if self.trainer else 0
        total = self.trainer.max_steps if self.trainer else 1
        sampler = StepBatchSampler(
            len(self.splits["train"]), self.batch_size, self.seed, start, total
        )
        return DataLoader(self.splits["train"], batch_sampler=sampler, collate_fn=keep_batch)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.splits["val"])

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(dataset) for dataset in self.test_sets]
