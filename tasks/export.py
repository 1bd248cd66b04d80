"""A generated task as a Hugging Face dataset, for other frameworks:

    python -m tasks.export assoc_recall seq_len=128 num_kv_pairs=[1,32] --out data/mqar128
    python -m tasks.export assoc_recall --num-train 20000 --seed 3 --out data/mqar

writes a `datasets.DatasetDict` (`train`, `val`, `test`) with `save_to_disk`: the splits a
run with the same task parameters and `data.seed` trains, validates and tests on (a plain
run: no `task.mixture`, no `task.test` overrides), of `data.num_train`, `num_val`, `num_test`
examples. Read it back with `datasets.load_from_disk(DIR)`; each split's
`info.description` is JSON holding the task's name, parameters, generator version, data seed,
the split's own seed and size (`metadata`). Columns are the task's arrays: `inputs`,
`labels` (-100 where nothing is scored) as fixed-length lists, and its slices.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import yaml

from tasks import Task, build_task
from tasks.splits import SPLITS, split_seed

SIZES = {"train": 100_000, "val": 1_000, "test": 2_000}
"""Examples per split, as a run's defaults (`data.num_train`, `num_val`, `num_test`)."""


def to_arrow(data: dict[str, np.ndarray]) -> pa.Table:
    """Numpy columns -> an Arrow table; [N, T] arrays become fixed-size lists (no copy per row)."""
    columns = {}
    for name, array in data.items():
        flat = pa.array(np.ascontiguousarray(array).reshape(-1))
        columns[name] = (
            pa.FixedSizeListArray.from_arrays(flat, array.shape[1]) if array.ndim == 2 else flat
        )
    return pa.table(columns)


def metadata(task: Task, seed: int, split: str, num_examples: int) -> dict[str, Any]:
    """What a split was generated from: enough to generate it again."""
    return {
        "task": task.registry_name,
        "params": task.params(),
        "version": task.version,
        "data_seed": seed,
        "split": split,
        "split_seed": split_seed(seed, split),
        "num_examples": num_examples,
    }


def task_dataset(task: Task, seed: int, sizes: dict[str, int] = SIZES) -> datasets.DatasetDict:
    """The task's `train`, `val` and `test` splits of data seed `seed` as a `DatasetDict`."""
    splits = {}
    for split in SPLITS:
        data = task.generate(sizes[split], split_seed(seed, split))
        about = json.dumps(metadata(task, seed, split, sizes[split]), sort_keys=True)
        info = datasets.DatasetInfo(description=about)
        splits[split] = datasets.Dataset(to_arrow(data), info=info)
    return datasets.DatasetDict(splits)


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs, each value read as YAML (`seq_len=128`, `num_kv_pairs=[1,32]`)."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r} is not a key=value task parameter")
        params[key] = yaml.safe_load(value)
    return params


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.export", description=__doc__.splitlines()[0]
    )
    parser.add_argument("task", help="a registered task, e.g. assoc_recall")
    parser.add_argument("params", nargs="*", help="task parameters, key=value")
    parser.add_argument("--out", required=True, help="the folder to write (save_to_disk)")
    parser.add_argument("--seed", type=int, default=0, help="the data seed (data.seed)")
    for split in SPLITS:
        parser.add_argument(f"--num-{split}", type=int, default=SIZES[split])
    args = parser.parse_args(argv)
    try:
        task = build_task(args.task, **parse_params(args.params))
        sizes = {split: getattr(args, f"num_{split}") for split in SPLITS}
        dataset = task_dataset(task, args.seed, sizes)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    datasets.disable_progress_bars()
    dataset.save_to_disk(str(Path(args.out)))
    counts = ", ".join(f"{split} {len(dataset[split]):,}" for split in SPLITS)
    print(f"{args.task} {task.params()} seed {args.seed}: {counts} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
