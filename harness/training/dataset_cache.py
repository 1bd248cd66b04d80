"""Task splits generated once and cached on disk as Hugging Face `datasets` Datasets.

The cache key is (task name, task params, generator version, split size, seed): changing any
of them generates anew. Writes are atomic (generate into a temp folder, then rename), so two
jobs generating the same split at once never leave a half-written dataset behind.
"""

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from harness.records.files import umask
from tasks import Task

datasets.disable_progress_bars()


def split_seed(seed: int, split: str, component: int | None = None) -> int:
    """Disjoint, reproducible seeds for the splits of one data seed; `component` (0, 1, ...)
    gives each part of a mixture of task settings its own seed (None: the split's seed)."""
    index = ("train", "val", "test").index(split)
    key = (index,) if component is None else (index, component + 1)
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1)[0])


def cache_key(task: Task, num_examples: int, seed: int) -> str:
    spec = {
        "task": task.registry_name,
        "params": task.params(),
        "version": task.version,
        "num_examples": num_examples,
        "seed": seed,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return f"{task.registry_name}-{digest}"


def to_arrow(data: dict[str, np.ndarray]) -> pa.Table:
    """Numpy columns -> an Arrow table; [N, T] arrays become fixed-size lists (no copy per row)."""
    columns = {}
    for name, array in data.items():
        flat = pa.array(np.ascontiguousarray(array).reshape(-1))
        columns[name] = (
            pa.FixedSizeListArray.from_arrays(flat, array.shape[1]) if array.ndim == 2 else flat
        )
    return pa.table(columns)


def load_split(
    task: Task, num_examples: int, seed: int, cache_dir: str | Path | None
) -> dict[str, np.ndarray]:
    """The split's arrays, from the cache when present, else generated and cached.
    `cache_dir=None` generates without caching."""
    if cache_dir is None:
        return task.generate(num_examples, seed)
    path = Path(cache_dir) / cache_key(task, num_examples, seed)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".tmp-", dir=path.parent))
        tmp.chmod(0o777 & ~umask())  # as a plain mkdir, not mkdtemp's owner-only 0o700
        try:
            datasets.Dataset(to_arrow(task.generate(num_examples, seed))).save_to_disk(tmp)
            os.rename(tmp, path)
        except OSError:
            if not path.exists():  # not just another job that finished the same split first
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(path)).with_format("numpy")[:]
