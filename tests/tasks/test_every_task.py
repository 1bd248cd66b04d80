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


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("assoc_recall", {"vocab_size": 8}, "num_kv_pairs=8 is invalid: .* for vocab_size=8"),
        ("assoc_recall", {"num_kv_pairs": 20}, "seq_len=64 is invalid: .* for num_kv_pairs=20"),
        ("noisy_recall", {"vocab_size": 20}, "num_kv_pairs=8 is invalid: .* vocab_size=20 and"),
        ("noisy_recall", {"vocab_size": 12}, "noise_vocab_size=16 is invalid: .* vocab_size=12"),
        ("needle", {"vocab_size": 4}, "num_distractors=1 is invalid: .* for vocab_size=4"),
        ("selective_copy", {"seq_len": 10}, "seq_len=10 is invalid: .* for num_tokens=8"),
        ("copy", {"seq_len": 9, "copy_len": 6}, "copy_len=6 is invalid: .* for seq_len=9"),
    ],
)
def test_a_bound_set_by_another_parameter_names_that_parameter_too(name, params, message):
    """Changing vocab_size alone must not yield an error that names only num_kv_pairs."""
    with pytest.raises(ValueError, match=message):
        build_task(name, **params)
