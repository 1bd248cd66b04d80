"""The training and evaluation batch samplers over a `MixtureDataset`'s components (indices
into the concatenation of the components, every batch within one component).

Data parallel (DDP) without Lightning's sampler injection (`use_distributed_sampler: false`,
set in conf/trainer/default.yaml): training batches are a function of the step, and of the
step only (`StepBatchSampler`); `data.batch_size` is the global batch, and rank r of W trains
on the r-th of its W equal parts, so every rank sees different examples, the union over ranks
is exactly the batch one process would draw at that step, and a resumed run continues exactly.
Evaluation splits are sharded without repetition (`BucketBatchSampler`: rank r takes
examples r, r + W, ... of each component), so each example is counted once when the ranks'
counts are summed.
"""

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


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
