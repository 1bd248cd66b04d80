"""selective_copy: the layout of tasks/selective_copy.py's docstring, recomputed from the inputs."""

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tasks import IGNORE, build_task
from tasks.selective_copy import FIRST_NOISE, SEP, SelectiveCopy


def check_selective_copy(task: SelectiveCopy, data: dict[str, np.ndarray]) -> None:
    inputs, labels = data["inputs"], data["labels"]
    num, length = inputs.shape
    k, first_data = task.num_tokens, FIRST_NOISE + task.noise_vocab_size
    assert set(data) == {"inputs", "labels", "copy_position"} and length == task.seq_len
    assert all(data[key].dtype == np.int64 and data[key].shape == (num, length) for key in data)
    assert inputs.min() >= 1 and inputs.max() < task.vocab_size  # token 0 never appears
    for x, y, position in zip(inputs, labels, data["copy_position"], strict=True):
        (sep,) = np.flatnonzero(x == SEP)
        assert sep == length - k
        context = x[:sep]
        is_data = context >= first_data
        marked = context[is_data]  # the tokens to copy, in order
        assert len(marked) == k
        assert np.all(context[~is_data] >= FIRST_NOISE)  # the rest is noise
        if task.noise_vocab_size == 1:
            assert np.all(context[~is_data] == FIRST_NOISE)
        assert np.array_equal(x[sep + 1 :], marked[: k - 1])  # teacher-forced copy
        assert np.all(y[:sep] == IGNORE) and np.array_equal(y[sep:], marked)
        assert np.all(position[:sep] == -1) and np.array_equal(position[sep:], np.arange(k))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"vocab_size": 6, "seq_len": 2, "num_tokens": 1, "noise_vocab_size": 2},
        {"seq_len": 16, "num_tokens": 8},  # no noise at all
        {"vocab_size": 40, "seq_len": 101, "num_tokens": 5, "noise_vocab_size": 20},
    ],
)
def test_examples_meet_every_invariant(params):
    task = build_task("selective_copy", **params)
    check_selective_copy(task, task.generate(300, seed=0))


def test_marked_positions_and_noise_are_uniform():
    task = build_task("selective_copy", vocab_size=12, seq_len=44, num_tokens=4, noise_vocab_size=5)
    data = task.generate(3000, 1)
    context = data["inputs"][:, :40]
    marked = np.nonzero(context >= 7)[1]
    counts = np.bincount(marked, minlength=40)  # each position marked w.p. 4 / 40
    assert np.all(np.abs(counts - 300) < 5 * np.sqrt(300))
    noise = np.bincount(context[context < 7], minlength=7)[2:]
    assert np.all(np.abs(noise / noise.sum() - 0.2) < 0.01)


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 4}, "vocab_size"),
        ({"noise_vocab_size": 0}, "noise_vocab_size"),
        ({"noise_vocab_size": 29}, "noise_vocab_size"),  # leaves one data token
        ({"num_tokens": 0}, "num_tokens"),
        ({"num_tokens": 33}, "seq_len"),  # 2 * 33 > 64
        ({"seq_len": 15, "num_tokens": 8}, "seq_len"),
        ({"seq_len": 64.0}, "seq_len"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("selective_copy", **params)


@st.composite
def selective_copy_params(draw: st.DrawFn) -> dict:
    if draw(st.integers(0, 2)) == 0:  # anything nearby, mostly invalid
        return {
            "vocab_size": draw(st.integers(0, 20)),
            "seq_len": draw(st.integers(-1, 50)),
            "num_tokens": draw(st.integers(-1, 25)),
            "noise_vocab_size": draw(st.integers(-1, 18)),
        }
    vocab_size = draw(st.integers(5, 30))
    num_tokens = draw(st.integers(1, 20))
    return {
        "vocab_size": vocab_size,
        "seq_len": draw(st.integers(2 * num_tokens, 2 * num_tokens + 30)),
        "num_tokens": num_tokens,
        "noise_vocab_size": draw(st.integers(1, vocab_size - 4)),
    }


@settings(max_examples=50, deadline=None)
@given(params=selective_copy_params(), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(params, seed):
    valid = (
        params["vocab_size"] >= 5
        and 1 <= params["noise_vocab_size"] <= params["vocab_size"] - 4
        and params["num_tokens"] >= 1
        and params["seq_len"] >= 2 * params["num_tokens"]
    )
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("selective_copy", **params)
        return
    task = build_task("selective_copy", **params)
    check_selective_copy(task, task.generate(12, seed))
