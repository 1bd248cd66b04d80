"""induction: the layout of tasks/induction.py's docstring, recomputed from the inputs."""

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tasks import IGNORE, build_task
from tasks.induction import Induction


def check_induction(task: Induction, data: dict[str, np.ndarray]) -> np.ndarray:
    """Check every example; return the trigger's first position per example."""
    inputs, labels = data["inputs"], data["labels"]
    num, length = inputs.shape
    assert set(data) == {"inputs", "labels", "depth_bin"} and length == task.seq_len
    assert all(data[k].dtype == np.int64 for k in data) and data["depth_bin"].shape == (num,)
    assert inputs.min() >= 1 and inputs.max() < task.vocab_size
    assert np.all(labels[:, :-1] == IGNORE)
    firsts = np.empty(num, np.int64)
    for i, x in enumerate(inputs):
        (first,) = np.flatnonzero(x[:-1] == x[-1])  # the trigger occurs exactly twice
        assert first <= length - 3
        assert labels[i, -1] == x[first + 1] != x[-1]
        assert data["depth_bin"][i] == np.rint(10 * first / max(length - 3, 1))
        firsts[i] = first
    return firsts


@pytest.mark.parametrize(
    "params", [{}, {"vocab_size": 3, "seq_len": 3}, {"vocab_size": 500, "seq_len": 130}]
)
def test_examples_meet_every_invariant(params):
    task = build_task("induction", **params)
    check_induction(task, task.generate(300, seed=0))


def test_trigger_position_answer_and_filler_are_uniform():
    task = build_task("induction", vocab_size=6, seq_len=23)  # first position in 0 .. 20
    data = task.generate(4200, 1)
    firsts = check_induction(task, data)
    counts = np.bincount(firsts, minlength=21)
    assert np.all(np.abs(counts - 200) < 5 * np.sqrt(200))
    # the answer is uniform over the 4 tokens other than the trigger
    same = data["labels"][:, -1] == (data["inputs"][:, -1] % 5) + 1  # one fixed other token
    assert abs(same.mean() - 0.25) < 0.03


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 2}, "vocab_size"),
        ({"vocab_size": None}, "vocab_size"),
        ({"seq_len": 2}, "seq_len"),
        ({"seq_len": 64.5}, "seq_len"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("induction", **params)


@settings(max_examples=50, deadline=None)
@given(vocab_size=st.integers(0, 70), seq_len=st.integers(0, 90), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(vocab_size, seq_len, seed):
    valid = vocab_size >= 3 and seq_len >= 3
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("induction", vocab_size=vocab_size, seq_len=seq_len)
        return
    task = build_task("induction", vocab_size=vocab_size, seq_len=seq_len)
    check_induction(task, task.generate(12, seed))
