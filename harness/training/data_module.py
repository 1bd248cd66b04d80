"""LightningDataModule serving a task's train / val / test splits as torch tensors.

Every split is a `MixtureDataset` of one or more components: a mixture of task settings
(Zoology's list of (length, pairs) with shares of the examples) has one component per setting,
a plain run and each test set have one. Each component is generated and cached on its own,
every batch holds examples of one component only (so batches of different lengths never pad),
and training interleaves the components' batches at random in proportion to their sizes
(`StepBatchSampler`); validation covers the same mixture. Test sets may use other settings
than training (`test_overrides`: e.g. a wider range of loads).

Data parallel (DDP) without Lightning's sampler injection (`use_distributed_sampler: false`,
set in conf/trainer/default.yaml): training batches are a function of the step, and of the
step only; `data.batch_size` is the global batch, and rank r of W trains on the r-th of its
W equal parts, so every rank sees different examples, the union over ranks is exactly the
batch one process would draw at that step, and a resumed run continues exactly.
Evaluation splits are sharded without repetition (`BucketBatchSampler`: rank r takes
examples r, r + W, ... of each component), so each example is counted once when the ranks'
counts are summed.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from common.checks import InvalidValue, is_real, require
from harness.training.dataset_cache import load_split, split_seed
from tasks import Task
from tasks.base import pool_baselines, scored_positions

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


class EpochBatches:
    """Batch b of a stream of batches over `num_examples`: slice b mod E of the permutation
    of epoch b // E (E = max(1, num_examples // batch_size) batches per epoch), drawn from a
    generator seeded with seed * 1_000_003 + epoch. The permutation of the current epoch is
    kept, so consecutive batches cost one slice each."""

    def __init__(self, num_examples: int, batch_size: int, seed: int) -> None:
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.per_epoch = max(1, num_examples // batch_size)
        self.epoch, self.order = None, None

    def batch(self, index: int) -> torch.Tensor:
        """int64 [<= batch_size]: the example indices of batch `index`."""
        if index // self.per_epoch != self.epoch:
            self.epoch = index // self.per_epoch
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self.order = torch.randperm(self.num_examples, generator=generator)
        start = (index % self.per_epoch) * self.batch_size
        return self.order[start : start + self.batch_size]


def check_batch_split(batch_size: int, rank: int, world_size: int) -> None:
    """Raise a `ValueError` unless the global batch splits evenly over `world_size` ranks and
    `rank` is one of them."""
    if batch_size % world_size or not 0 <= rank < world_size:
        raise ValueError(
            f"batch_size={batch_size} must split evenly over world_size={world_size} (rank={rank})"
        )


class StepBatchSampler(Sampler[list[int]]):
    """Training batches as a function of the step alone, each drawn from one component of a
    `MixtureDataset` (indices into the concatenation of the components).

    Component c (`sizes[c]` examples) is a stream `EpochBatches(sizes[c], batch_size,
    seeds[c])` of E_c batches per epoch. An epoch is E = sum_c E_c steps, in an order drawn
    with a generator seeded by (seed, epoch): component c takes E_c of them, so the batches of
    each component come in proportion to its size, at random; the k-th step of component c in
    epoch e takes its batch e * E_c + k. With one component, step s takes batch s of its
    stream. Starting at `start_step` (< num_steps) continues a killed run exactly.

    Under data parallelism `batch_size` is the global batch: rank `rank` of `world_size`
    yields the rank-th of world_size equal, disjoint parts of every step's batch."""

    def __init__(
        self,
        sizes: Sequence[int],
        seeds: Sequence[int],
        batch_size: int,
        seed: int,
        start_step: int,
        num_steps: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        check_batch_split(batch_size, rank, world_size)
        if len(seeds) != len(sizes):
            raise ValueError(f"one seed per component: {len(sizes)} sizes, {len(seeds)} seeds")
        self.sizes, self.seeds = list(sizes), list(seeds)
        self.batch_size, self.seed = batch_size, seed
        self.start_step, self.num_steps = start_step, num_steps
        self.rank, self.world_size = rank, world_size
        self.offsets = np.cumsum([0, *self.sizes])[:-1].tolist()
        self.per_component = [max(1, n // batch_size) for n in self.sizes]
        labels = np.repeat(np.arange(len(self.sizes)), self.per_component)
        self.labels, self.per_epoch = labels, labels.size
        self.schedule_epoch, self.schedule, self.rank_in = None, labels, labels

    def __len__(self) -> int:
        """All steps of training (Lightning's loop counts restored steps into the epoch)."""
        return self.num_steps

    def batches(self) -> Callable[[int], torch.Tensor]:
        """step -> the global batch of that step (int64 example indices)."""
        streams = [
            EpochBatches(n, self.batch_size, s) for n, s in zip(self.sizes, self.seeds, strict=True)
        ]

        def batch_at(step: int) -> torch.Tensor:
            c, index = self.component_at(step)
            return streams[c].batch(index) + self.offsets[c]

        return batch_at

    def component_at(self, step: int) -> tuple[int, int]:
        """(component, its batch index) of training step `step`."""
        epoch, index = divmod(step, self.per_epoch)
        if epoch != self.schedule_epoch:
            rng = np.random.default_rng((self.seed, epoch))
            self.schedule = rng.permutation(self.labels)
            # rank_in[i]: how many earlier steps of this epoch drew the same component
            order = np.argsort(self.schedule, kind="stable")  # by component, then by step
            grouped = self.schedule[order]
            self.rank_in = np.empty_like(order)
            self.rank_in[order] = np.arange(order.size) - np.searchsorted(grouped, grouped)
            self.schedule_epoch = epoch
        c = int(self.schedule[index])
        return c, epoch * self.per_component[c] + int(self.rank_in[index])

    def __iter__(self) -> Iterator[list[int]]:
        batch_at = self.batches()
        for step in range(self.start_step, self.num_steps):
            yield batch_at(step).tensor_split(self.world_size)[self.rank].tolist()


class BucketBatchSampler(Sampler[list[int]]):
    """Evaluation batches, in order, each within one component (no padding): component c
    contributes its examples offsets[c] + (rank, rank + W, ...) in batches of `batch_size`,
    so under DDP each example is counted once (the shards of a component differ by at most
    one example)."""

    def __init__(
        self, sizes: Sequence[int], batch_size: int, rank: int = 0, world_size: int = 1
    ) -> None:
        offsets = np.cumsum([0, *sizes])[:-1]
        self.batches = [
            indices[i : i + batch_size].tolist()
            for n, offset in zip(sizes, offsets, strict=True)
            for indices in [np.arange(offset, offset + n)[rank::world_size]]
            for i in range(0, indices.size, batch_size)
        ]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)


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
        cache_dir: str | Path | None = None,
        mixture: Mixture | None = None,
        test_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.task, self.batch_size, self.seed, self.cache_dir = task, batch_size, seed, cache_dir
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

    def _load(self, split: str, parts: Iterable[tuple[Task, int, int | None]]) -> MixtureDataset:
        """The components (task, number of examples, key in `split_seed`) of `split`, each
        generated once and cached."""
        return MixtureDataset(
            [
                load_split(task, num, split_seed(self.seed, split, key), self.cache_dir)
                for task, num, key in parts
            ]
        )

    def _load_fit(self, split: str) -> MixtureDataset:
        """The train or val split: one component per task of `train_tasks`."""
        parts = zip(self.train_tasks, self.counts[split], self.components, strict=True)
        return self._load(split, parts)

    def _load_test(self, task: Task) -> MixtureDataset:
        """The test set of `task` (one component)."""
        return self._load("test", [(task, self.sizes["test"], None)])

    def prepare_data(self) -> None:
        """Generate and cache every split once (rank 0 only under DDP)."""
        if self.cache_dir is None:
            return
        for split in ("train", "val"):
            self._load_fit(split)
        for task in self.test_tasks:
            self._load_test(task)

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None) and not self.splits:
            self.splits = {split: self._load_fit(split) for split in ("train", "val")}
        if stage in ("test", None) and not self.test_sets:
            self.test_sets = [self._load_test(task) for task in self.test_tasks]

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
