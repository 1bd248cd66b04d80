"""What every registered task must do: the same seed gives the same data, another seed other
data, and every array has the shapes of the task API."""

import numpy as np
import pytest

from tasks import TASKS, build_task

PARAMS = {
    "copy": {"seq_len": 33, "min_copy_len": 3},  # lengths vary per example: more randomness
    "selective_copy": {"noise_vocab_size": 4},
}


@pytest.mark.parametrize("name", TASKS.names())
def test_same_seed_same_data_other_seed_other_data(name: str) -> None:
    task = build_task(name, **PARAMS.get(name, {}))
    a, b, c = task.generate(100, 5), task.generate(100, 5), task.generate(100, 6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["inputs"], c["inputs"])
    for key, array in a.items():
        assert array.dtype == np.int64 and array.shape in ((100, task.seq_len), (100,)), key
    assert a["inputs"].min() >= 0 and a["inputs"].max() < task.vocab_size
