"""LightningDataModule serving a task's train / val / test splits as torch tensors.

Every split is a `MixtureDataset` of one or more components: a mixture of task settings
(Zoology's list of (length, pairs) with shares of the examples) has one component per setting,
a plain run and each test set have one. Each component is generated on its own (in memory:
generating the default task's splits takes no longer than reading them back from a disk
cache did, docs/performance.md),
every batch holds examples of one component only (so batches of different lengths never pad),
and training interleaves the components' batches at random in proportion to their sizes
(`StepBatchSampler`); validation covers the same mixture. Test sets may use other settings
than training (`test_overrides`: e.g. a wider range of loads). The samplers, and how they
split batches under data parallelism, are `harness.training.samplers`.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from common.checks import InvalidValue, is_real, require
from harness.training.samplers import BucketBatchSampler, StepBatchSampler
from tasks import Task
from tasks.base import pool_baselines, scored_positions
from tasks.splits import split_seed

Mixture = list[tuple[dict[str, Any], float]]
"""Components of a mixture: (task-parameter overrides, share of the examples)."""


class MixtureDataset(Dataset):
    """The concatenation of one or more components, each columns of equal length (indices
    0 .. sum - 1, component by component: example i of component c is `offsets[c] + i`).
    A batch comes from one component, fetched with one fancy index per column; indices that
    span components raise a `ValueError`."""

    def __init__(self, parts: Sequence[Mapping[str, np.ndarray]]) -> None:
        self.parts = [
            {name: torch.from_numpy(np.asarray(a)) for name, a in part.items()} for part in parts
        ]
        self.sizes = [len(part["inputs"]) for part in self.parts]
        self.offsets = np.cumsum([0, *self.sizes]).tolist()

    def __len__(self) -> int:
        return self.offsets[-1]

    def arrays(self, component: int = 0) -> dict[str, np.ndarray]:
        """The columns of one component as numpy arrays (no copy)."""
        return {name: column.numpy() for name, column in self.parts[component].items()}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        """The columns at `indices` (all of one component), each a tensor [len(indices), ...]."""
        c = int(np.searchsorted(self.offsets, indices[0], side="right")) - 1
        start, end = self.offsets[c], self.offsets[c + 1]
        index = torch.as_tensor(indices)
        if index.min() < start or index.max() >= end:
            raise ValueError(f"a batch spans components of the mixture: {indices}")
        return {name: column[index - start] for name, column in self.parts[c].items()}


def keep_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The collate function: `MixtureDataset.__getitems__` already returns the batch."""
    return batch


def batch_seed(seed: int, component: int | None) -> int:
    """The seed of a training component's stream of batches (`StepBatchSampler`): the data
    `seed` itself for the one component of a run without a mixture (`component` None), the
    seed of the component's training examples in a mixture."""
    return seed if component is None else split_seed(seed, "train", component)


def mixture_from_config(
    entries: Sequence[Mapping[str, Any]] | None, key: str = "task.mixture"
) -> Mixture:
    """The config form of a mixture, a list of task-parameter overrides each with its
    `share` ([{seq_len: 64, num_kv_pairs: 4, share: 100000}, ...]), as (overrides, share)
    pairs; an entry without a positive `share` raises the `ValueError` naming `key[i].share`."""
    mixture = []
    for i, entry in enumerate(entries or []):
        require(
            isinstance(entry, Mapping),
            f"{key}[{i}]",
            entry,
            "a mapping of task parameters and a share",
        )
        overrides = {name: value for name, value in entry.items() if name != "share"}
        share = entry.get("share")
        ok = is_real(share) and np.isfinite(share) and share > 0
        require(ok, f"{key}[{i}].share", share, "a number > 0 (a relative share of the examples)")
        mixture.append((overrides, float(share)))
    return mixture


def split_counts(total: int, shares: Sequence[float]) -> list[int]:
    """`total` split in proportion to `shares` (largest remainders: the counts sum to total)."""
    exact = np.asarray(shares, dtype=np.float64) / sum(shares) * total
    counts = np.floor(exact).astype(np.int64)
    extra = np.argsort(-(exact - counts), kind="stable")[: total - counts.sum()]
    counts[extra] += 1
    return counts.tolist()


def overridden(task: Task, overrides: Mapping[str, Any], key: str) -> Task:
    """`task` with some parameters changed; a bad one raises the task's `InvalidValue` under
    its full key (`task.test.num_kv_pairs=[1, 128] is invalid: ...`)."""
    try:
        return task.with_params(**dict(overrides))
    except InvalidValue as error:
        raise InvalidValue(f"{key}.{error.name}", error.value, error.allowed) from error


class TaskDataModule(L.LightningDataModule):
    """Train/val/test from disjoint seeds of one data `seed`; test sets at every length of
    `eval_seq_lens` (the test task's length first), for accuracy against length.

    `mixture` (optional, `Mixture`): train and validate on these variants of `task` instead
    (component i = `task` with its overrides, `num_train` and `num_val` split in proportion to
    the shares); without one, train and val have the single component `task`. `test_overrides`
    (optional): the test sets are of `task` with these parameters changed (e.g.
    {"num_kv_pairs": [1, 128], "load_dist": "log2"}), then of that task at each length of
    `eval_seq_lens`. A bad override raises the `InvalidValue` of common.checks under its full
    key (`task.mixture[i].<name>`, `task.test.<name>`)."""

    def __init__(
        self,
        task: Task,
        num_train: int,
        num_val: int,
        num_test: int,
        batch_size: int,
        seed: int,
        eval_seq_lens: list[int] | None = None,
        mixture: Mixture | None = None,
        test_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.mixture = list(mixture or [])
        self.train_tasks = [
            overridden(task, overrides, f"task.mixture[{i}]")
            for i, (overrides, _) in enumerate(self.mixture)
        ] or [task]
        # the key of each training component in `split_seed` (None: the split's own seed)
        self.components: list[int | None] = list(range(len(self.mixture))) or [None]
        shares = [share for _, share in self.mixture] or [1.0]
        self.counts = {split: split_counts(self.sizes[split], shares) for split in ("train", "val")}
        for split, key in (("train", "num_train"), ("val", "num_val")):
            for i, count in enumerate(self.counts[split]):
                require(
                    count >= 1,
                    f"task.mixture[{i}].share",
                    shares[i],
                    f"a share that gives at least one of data.{key}={self.sizes[split]} examples",
                )
        test_task = overridden(task, test_overrides, "task.test") if test_overrides else task
        lengths = [test_task.seq_len] + [n for n in eval_seq_lens or [] if n != test_task.seq_len]
        self.test_tasks = [test_task] + [
            at_length(test_task, n, eval_seq_lens) for n in lengths[1:]
        ]
        self.splits: dict[str, MixtureDataset] = {}
        self.test_sets: list[MixtureDataset] = []

    @property
    def test_seq_lens(self) -> list[int]:
        return [t.seq_len for t in self.test_tasks]

    @property
    def max_train_seq_len(self) -> int:
        """The longest training sequence (of any component of a mixture): learned positions
        must reach it."""
        return max(t.seq_len for t in self.train_tasks)

    @property
    def max_seq_len(self) -> int:
        """The longest sequence of any split, test sets included."""
        return max(self.max_train_seq_len, *self.test_seq_lens)

    def _generate(self, split: str) -> MixtureDataset:
        """The train or val split: one component per task of `train_tasks`."""
        parts = zip(self.train_tasks, self.counts[split], self.components, strict=True)
        seed = self.seed
        return MixtureDataset([t.generate(n, split_seed(seed, split, k)) for t, n, k in parts])

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None) and not self.splits:
            self.splits = {split: self._generate(split) for split in ("train", "val")}
        if stage in ("test", None) and not self.test_sets:
            seed, size = split_seed(self.seed, "test"), self.sizes["test"]
            self.test_sets = [MixtureDataset([t.generate(size, seed)]) for t in self.test_tasks]

    def val_baselines(self) -> dict[str, float]:
        """`Task.baselines` of the validation split, pooled over its components weighted by
        their scored positions, as validation accuracy is."""
        self.setup("fit")
        val = self.splits["val"]
        return pool_baselines(
            [
                (task.baselines(val.arrays(c)), scored_positions(val.arrays(c)))
                for c, task in enumerate(self.train_tasks)
            ]
        )

    def test_baselines(self, index: int = 0) -> dict[str, float]:
        """`Task.baselines` of the test set at `test_seq_lens[index]`."""
        self.setup("test")
        return self.test_tasks[index].baselines(self.test_sets[index].arrays())

    def test_baselines_by_load(self, index: int = 0) -> dict[int, dict[str, float]]:
        """`Task.baselines_by_load` of the test set at `test_seq_lens[index]`: {load: {name:
        accuracy}} for every load of the set ({} for a task without a load)."""
        self.setup("test")
        return self.test_tasks[index].baselines_by_load(self.test_sets[index].arrays())

    def _ranks(self) -> tuple[int, int]:
        """(this process's rank, the number of processes), (0, 1) without a trainer."""
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def _loader(self, dataset: MixtureDataset) -> DataLoader:
        """In order, batch by batch within each component; under DDP this rank's shard,
        without the padding that would count examples twice."""
        sampler = BucketBatchSampler(dataset.sizes, self.batch_size, *self._ranks())
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=keep_batch)

    def train_dataloader(self) -> DataLoader:
        """One pass of `max_steps` batches, each of one component; when resuming, from the
        restored step on; under DDP this rank's part of each (global) batch."""
        start = self.trainer.global_step if self.trainer else 0
        total = self.trainer.max_steps if self.trainer else 1
        train = self.splits["train"]
        seeds = [batch_seed(self.seed, key) for key in self.components]
        sampler = StepBatchSampler(
            train.sizes, seeds, self.batch_size, self.seed, start, total, *self._ranks()
        )
        return DataLoader(train, batch_sampler=sampler, collate_fn=keep_batch)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.splits["val"])

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(dataset) for dataset in self.test_sets]


def at_length(task: Task, seq_len: int, eval_seq_lens: list[int]) -> Task:
    """`task` at another test length; one that cannot hold the task names the key the user
    typed, `task.eval_seq_lens`, and why."""
    try:
        return task.with_seq_len(seq_len)
    except ValueError as error:
        allowed = f"lengths that hold the test task ({seq_len}: {error})"
        raise InvalidValue("task.eval_seq_lens", list(eval_seq_lens), allowed) from error
