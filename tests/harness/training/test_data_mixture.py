"""harness.training.data_module with a mixture of task settings and test sets beyond training: every
batch from one component (no padding), batches in proportion to the shares, a function of the step
alone (resume, data parallel), validation over the whole mixture, the test task overridden."""

from collections import Counter

import numpy as np
import pytest
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import BatchSampler

from common.checks import InvalidValue
from harness.training.data_module import (
    MixtureDataset,
    TaskDataModule,
    batch_seed,
    mixture_from_config,
    split_counts,
)
from harness.training.samplers import BucketBatchSampler, EpochBatches, StepBatchSampler
from tasks import IGNORE, build_task
from tasks.splits import split_seed

TASK = build_task("assoc_recall", vocab_size=32, seq_len=16, num_kv_pairs=2)
ZOOLOGY_LIKE = [
    {"seq_len": 16, "num_kv_pairs": 2, "share": 100},
    {"seq_len": 24, "num_kv_pairs": 4, "share": 20},
    {"seq_len": 32, "num_kv_pairs": [2, 8], "share": 40},
]


def module(**kw) -> TaskDataModule:
    args = {"num_train": 1600, "num_val": 160, "num_test": 96, "batch_size": 16, "seed": 3}
    return TaskDataModule(TASK, **{**args, **kw})


def mixture_sampler(sizes: list[int], batch_size: int, seed: int, *args, **kw) -> StepBatchSampler:
    """The training sampler of a mixture of components of these sizes under data `seed`."""
    seeds = [batch_seed(seed, c) for c in range(len(sizes))]
    return StepBatchSampler(sizes, seeds, batch_size, seed, *args, **kw)


class Trainer:
    """What the data module reads of a Lightning Trainer."""

    def __init__(self, global_step: int, max_steps: int, rank: int = 0, world_size: int = 1):
        self.global_step, self.max_steps = global_step, max_steps
        self.global_rank, self.world_size = rank, world_size


def test_mixture_from_config_and_the_counts_it_gives() -> None:
    mixture = mixture_from_config(ZOOLOGY_LIKE)
    assert mixture[1] == ({"seq_len": 24, "num_kv_pairs": 4}, 20.0)
    data = module(mixture=mixture)
    assert data.counts == {"train": [1000, 200, 400], "val": [100, 20, 40]}
    assert [t.seq_len for t in data.train_tasks] == [16, 24, 32] and data.max_seq_len == 32
    assert data.max_train_seq_len == 32 and data.test_seq_lens == [16]  # tested on `task`
    assert split_counts(10, [1, 1, 1]) == [4, 3, 3] and sum(split_counts(997, [3, 5, 11])) == 997


def test_every_training_batch_is_one_component_without_padding() -> None:
    data = module(mixture=mixture_from_config(ZOOLOGY_LIKE))
    data.setup("fit")
    train = data.splits["train"]
    sampler = mixture_sampler(train.sizes, 16, seed=3, start_step=0, num_steps=400)
    widths = Counter()
    for indices in sampler:
        batch = train.__getitems__(indices)
        width = batch["inputs"].shape[1]
        (component,) = [i for i, t in enumerate(data.train_tasks) if t.seq_len == width]
        start = sum(train.sizes[:component])
        assert all(start <= i < start + train.sizes[component] for i in indices)
        assert batch["inputs"].shape == (16, width)  # 16 examples of one length: no padding
        assert int((batch["inputs"] == 0).sum()) == 0  # token 0 is never emitted by MQAR
        widths[width] += 1
    # per epoch 62 / 12 / 25 batches of the components (1000, 200, 400 examples)
    assert sum(widths.values()) == 400
    for width, per_epoch in ((16, 62), (24, 12), (32, 25)):
        assert abs(widths[width] / 400 - per_epoch / 99) < 0.05, widths


def test_each_epoch_of_the_mixture_takes_every_component_batch_once() -> None:
    sampler = mixture_sampler([100, 40, 60], 10, seed=1, start_step=0, num_steps=60)
    batches = list(sampler)  # 10 + 4 + 6 = 20 steps per epoch
    for epoch in range(3):
        seen = sorted(i for b in batches[20 * epoch : 20 * (epoch + 1)] for i in b)
        assert seen == list(range(200))  # every example of every component once
    first = [sampler.component_at(s)[0] for s in range(20)]
    assert Counter(first) == {0: 10, 1: 4, 2: 6}
    assert first != sorted(first)  # interleaved at random, not component after component


def test_mixture_batches_are_a_function_of_the_step_and_split_over_ranks() -> None:
    sizes = [64, 32, 48]
    single = list(mixture_sampler(sizes, 8, 5, 0, 40))
    assert single == list(mixture_sampler(sizes, 8, 5, 0, 40))
    assert single != list(mixture_sampler(sizes, 8, 6, 0, 40))
    assert list(mixture_sampler(sizes, 8, 5, 17, 40)) == single[17:]  # a resumed run
    parts = [list(mixture_sampler(sizes, 8, 5, 0, 40, rank=r, world_size=2)) for r in (0, 1)]
    for step, batch in enumerate(single):
        assert parts[0][step] + parts[1][step] == batch


def test_validation_covers_the_mixture_once_in_batches_of_one_component() -> None:
    data = module(mixture=mixture_from_config(ZOOLOGY_LIKE))
    data.setup("fit")
    val = data.splits["val"]
    assert isinstance(val, MixtureDataset) and val.sizes == [100, 20, 40]
    seen = []
    for batch in data.val_dataloader():
        assert batch["inputs"].shape[1] in (16, 24, 32)
        seen.append(batch["inputs"].shape[0])
    assert sum(seen) == 160
    shards = [BucketBatchSampler(val.sizes, 16, rank=r, world_size=2) for r in (0, 1)]
    flat = sorted(i for s in shards for b in s for i in b)
    assert flat == list(range(160))
    with pytest.raises(ValueError, match="spans components"):
        val.__getitems__([99, 100])


def test_components_are_generated_on_their_own() -> None:
    data = module(mixture=mixture_from_config(ZOOLOGY_LIKE))
    data.setup()
    for i, task in enumerate(data.train_tasks):
        cached = data.splits["train"].arrays(i)
        fresh = task.generate(data.counts["train"][i], split_seed(3, "train", i))
        assert all(np.array_equal(cached[k], fresh[k]) for k in fresh)
    ranged = data.splits["train"].arrays(2)["num_kv_pairs"]
    assert set(np.unique(ranged)) == set(range(2, 9))


def test_validation_baselines_pool_the_components_by_scored_positions() -> None:
    data = module(mixture=mixture_from_config(ZOOLOGY_LIKE))
    pooled = data.val_baselines()
    parts = [data.splits["val"].arrays(c) for c in range(3)]
    scored = [int(np.sum(p["labels"] != IGNORE)) for p in parts]
    tasks = data.train_tasks
    in_context = [t.baselines(p)["in_context"] for t, p in zip(tasks, parts, strict=True)]
    expected = sum(b * n for b, n in zip(in_context, scored, strict=True)) / sum(scored)
    assert pooled["in_context"] == pytest.approx(expected, rel=1e-12)
    assert pooled["chance"] == 1 / 16


def test_without_a_mixture_the_splits_and_batches_are_those_of_the_task() -> None:
    data = module()
    data.setup()
    assert data.train_tasks == [TASK] and data.components == [None]
    for split, size in (("train", 1600), ("val", 160)):
        assert isinstance(data.splits[split], MixtureDataset)
        assert data.splits[split].sizes == [size]
    expected = TASK.generate(1600, split_seed(3, "train"))
    assert np.array_equal(data.splits["train"].arrays()["inputs"], expected["inputs"])
    loader = data.train_dataloader()
    assert isinstance(loader.batch_sampler, StepBatchSampler)
    assert list(loader.batch_sampler) == list(StepBatchSampler([1600], [3], 16, 3, 0, 1))
    assert data.val_baselines() == pytest.approx(TASK.baselines(data.splits["val"].arrays()))


def test_a_plain_run_is_a_mixture_of_one_with_the_batches_of_the_data_seed() -> None:
    """Without a mixture, training step s takes batch s of the stream of the data seed itself,
    `EpochBatches(num_train, batch_size, seed)`, rank r of W its r-th part, from any step on;
    evaluation takes the examples in order, rank r those r, r + W, ... (Lightning's
    `UnrepeatedDistributedSampler`), in batches of `batch_size`."""
    data = module(num_train=100, num_val=37, num_test=21)
    data.setup()
    stream = EpochBatches(100, 16, 3)  # 6 batches per epoch: 40 steps cross 6 epochs
    steps = [stream.batch(s).tolist() for s in range(40)]
    data.trainer = Trainer(0, 40)
    train = data.splits["train"].arrays()
    for indices, batch in zip(steps, data.train_dataloader(), strict=True):
        assert torch.equal(batch["inputs"], torch.from_numpy(train["inputs"][indices]))
    for world_size in (1, 2):
        for rank in range(world_size):
            data.trainer = Trainer(17, 40, rank, world_size)
            part = [s[rank * 16 // world_size : (rank + 1) * 16 // world_size] for s in steps]
            assert list(data.train_dataloader().batch_sampler) == part[17:]
            val, (test,) = data.val_dataloader(), data.test_dataloader()
            for dataset, loader in ((data.splits["val"], val), (data.test_sets[0], test)):
                shard = UnrepeatedDistributedSampler(dataset, world_size, rank, shuffle=False)
                assert list(loader.batch_sampler) == list(BatchSampler(shard, 16, False))


def test_test_overrides_give_the_test_task_then_every_eval_length() -> None:
    overrides = {"seq_len": 64, "num_kv_pairs": [1, 8], "load_dist": "log2"}
    data = module(test_overrides=overrides, eval_seq_lens=[96])
    assert data.test_seq_lens == [64, 96] and data.max_seq_len == 96
    assert data.max_train_seq_len == 16
    assert all(t.params()["num_kv_pairs"] == [1, 8] for t in data.test_tasks)
    data.setup("test")
    loads = data.test_sets[1].arrays()["num_kv_pairs"]
    assert set(np.unique(loads)) == {1, 2, 4, 8}
    by_load = data.test_baselines_by_load(1)
    assert list(by_load) == [1, 2, 4, 8]
    assert by_load[4]["in_context"] == pytest.approx(0.25)
    assert data.test_baselines(0)["chance"] == 1 / 16


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"test_overrides": {"num_kv_pairs": [1, 8]}}, r"^task\.test\.seq_len=16 .*>= 32"),
        ({"test_overrides": {"pairs": 4}}, r"^task\.test\.pairs=4 is invalid: must be a parameter"),
        (
            {"mixture": [({"seq_len": 16, "num_kv_pairs": [2, 8]}, 1.0)]},
            r"^task\.mixture\[0\]\.seq_len=16 is invalid",
        ),
        ({"mixture": [({}, 1.0), ({}, 1e-6)]}, r"^task\.mixture\[1\]\.share=1e-06 is invalid"),
        (
            {"test_overrides": {"num_kv_pairs": 4}, "eval_seq_lens": [12]},
            r"^task\.eval_seq_lens=\[12\] is invalid: must be lengths that hold the test task",
        ),
    ],
)
def test_bad_overrides_are_refused_with_one_line(kw: dict, message: str) -> None:
    with pytest.raises(InvalidValue, match=message) as error:
        module(**kw)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(f"{error.value.name}=")  # the key, for the harness


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"seq_len": 16}], r"^task\.mixture\[0\]\.share=None is invalid: must be a number > 0"),
        ([{"share": 1}, {"share": 0}], r"^task\.mixture\[1\]\.share=0 is invalid"),
        ([{"share": "1"}], r"^task\.mixture\[0\]\.share='1' is invalid"),
        ([4], r"^task\.mixture\[0\]=4 is invalid: must be a mapping"),
    ],
)
def test_bad_mixture_entries_are_refused_with_one_line(entries, message) -> None:
    with pytest.raises(ValueError, match=message):
        mixture_from_config(entries)


def test_a_mixture_trains_through_lightning_with_batches_of_each_length() -> None:
    """The loaders as a Trainer uses them: max_steps batches, each of one length."""

    data = module(mixture=mixture_from_config(ZOOLOGY_LIKE))
    data.trainer = Trainer(0, 30)
    data.setup("fit")
    widths = [batch["inputs"].shape[1] for batch in data.train_dataloader()]
    assert len(widths) == 30 and set(widths) == {16, 24, 32}
    assert all(isinstance(b["labels"], torch.Tensor) for b in data.val_dataloader())


def test_a_component_or_test_set_with_its_own_load_drops_the_training_weights() -> None:
    weighted = build_task(
        "assoc_recall", seq_len=64, num_kv_pairs=[2, 8], load_weights={2: 3, 8: 1}
    )
    mixture = [({"num_kv_pairs": 4}, 1.0), ({"seq_len": 32}, 1.0)]
    data = TaskDataModule(weighted, 100, 20, 20, 10, 0, mixture=mixture,
                          test_overrides={"num_kv_pairs": [1, 8], "load_dist": "log2"})  # fmt: skip
    assert data.train_tasks[0].loads() == {4: 1.0}  # its own single load
    assert data.train_tasks[1].loads() == {2: 0.75, 8: 0.25}  # the weights stay with the load
    assert data.test_tasks[0].loads() == {1: 0.25, 2: 0.25, 4: 0.25, 8: 0.25}
