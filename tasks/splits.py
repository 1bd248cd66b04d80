"""The seeds of a task's splits: train, val and test drawn from one data seed, disjoint and
reproducible (the harness's data module and `python -m tasks.export` use the same)."""

import numpy as np

SPLITS = ("train", "val", "test")


def split_seed(seed: int, split: str, component: int | None = None) -> int:
    """Disjoint, reproducible seeds for the splits of one data seed; `component` (0, 1, ...)
    gives each part of a mixture of task settings its own seed (None: the split's seed)."""
    index = SPLITS.index(split)
    key = (index,) if component is None else (index, component + 1)
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1)[0])
