"""copy: the layout of tasks/copy.py's docstring, recomputed from the inputs."""

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tasks import IGNORE, build_task
from tasks.copy import BOS, PAD, SEP, Copy


def check_copy(task: Copy, data: dict[str, np.ndarray]) -> None:
    inputs, labels, position = data["inputs"], data["labels"], data["copy_position"]
    num, length = inputs.shape
    assert set(data) == {"inputs", "labels", "copy_position", "copy_len"}
    assert data["copy_len"].shape == (num,) and length == task.seq_len
    assert all(data[k].dtype == np.int64 for k in data)
    assert inputs.min() >= 0 and inputs.max() < task.vocab_size
    for x, y, pos, string_len in zip(inputs, labels, position, data["copy_len"], strict=True):
        (bos,) = np.flatnonzero(x == BOS)
        (sep,) = np.flatnonzero(x == SEP)
        assert np.all(x[:bos] == PAD) and not np.any(x[bos + 1 :] == PAD)
        string = x[bos + 1 : sep]
        n = len(string)
        assert n == string_len and task.min_len <= n <= task.max_len
        assert np.all(string >= 3)  # alphabet only
        assert sep + n == length  # the copy ends the example
        assert np.array_equal(x[sep + 1 :], string[: n - 1])  # teacher-forced copy
        scored = np.flatnonzero(y != IGNORE)
        assert np.array_equal(scored, np.arange(sep, sep + n))
        assert np.array_equal(y[scored], string)  # label at SEP + j is the string's token j
        assert np.array_equal(pos[scored], np.arange(n))
        assert np.all(np.delete(pos, scored) == -1)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"vocab_size": 5, "seq_len": 3},  # one-token string, two symbols
        {"seq_len": 40, "copy_len": 12},  # left padding
        {"seq_len": 33, "copy_len": 16, "min_copy_len": 1},  # a length per example
    ],
)
def test_examples_meet_every_invariant(params):
    task = build_task("copy", **params)
    check_copy(task, task.generate(300, seed=0))


def test_default_string_fills_the_sequence_and_grows_with_seq_len():
    task = build_task("copy")
    defaults = {
        "vocab_size": 32,
        "seq_len": 64,
        "copy_len": None,
        "min_copy_len": None,
        "load_dist": "uniform",
        "load_weights": None,
    }
    assert task.params() == defaults
    assert task.max_len == 31 and task.with_seq_len(129).max_len == 64
    fixed = build_task("copy", seq_len=64, copy_len=10).with_seq_len(128)
    assert fixed.max_len == 10  # an explicit copy_len stays; the rest is padding
    with pytest.raises(ValueError, match="^copy_len="):
        build_task("copy", seq_len=64, copy_len=30).with_seq_len(32)


def test_variable_lengths_cover_the_range_uniformly():
    task = build_task("copy", seq_len=33, copy_len=16, min_copy_len=4)
    counts = np.bincount(task.generate(13_000, 2)["copy_len"], minlength=17)[4:]
    assert np.all(np.abs(counts - 1000) < 5 * np.sqrt(1000))


def test_symbols_are_uniform():
    data = build_task("copy", vocab_size=8, seq_len=41).generate(2000, 3)
    counts = np.bincount(data["labels"][data["labels"] != IGNORE], minlength=8)[3:]
    assert np.all(np.abs(counts / counts.sum() - 0.2) < 0.01)


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 4}, "vocab_size"),
        ({"vocab_size": 32.0}, "vocab_size"),
        ({"seq_len": 2}, "seq_len"),
        ({"seq_len": "64"}, "seq_len"),
        ({"copy_len": 0}, "copy_len"),
        ({"copy_len": 32}, "copy_len"),  # 2 * 32 + 1 > 64
        ({"copy_len": 4.0}, "copy_len"),
        ({"copy_len": 8, "min_copy_len": 9}, "min_copy_len"),
        ({"min_copy_len": 0}, "min_copy_len"),
        ({"min_copy_len": True}, "min_copy_len"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("copy", **params)


@st.composite
def copy_params(draw: st.DrawFn) -> dict:
    if draw(st.integers(0, 2)) == 0:  # anything nearby, mostly invalid
        return {
            "vocab_size": draw(st.integers(2, 12)),
            "seq_len": draw(st.integers(0, 40)),
            "copy_len": draw(st.one_of(st.none(), st.integers(-1, 22))),
            "min_copy_len": draw(st.one_of(st.none(), st.integers(-1, 22))),
        }
    seq_len = draw(st.integers(3, 60))
    copy_len = draw(st.one_of(st.none(), st.integers(1, (seq_len - 1) // 2)))
    top = (seq_len - 1) // 2 if copy_len is None else copy_len
    return {
        "vocab_size": draw(st.integers(5, 40)),
        "seq_len": seq_len,
        "copy_len": copy_len,
        "min_copy_len": draw(st.one_of(st.none(), st.integers(1, top))),
    }


@settings(max_examples=50, deadline=None)
@given(params=copy_params(), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(params, seed):
    longest = (params["seq_len"] - 1) // 2
    top = longest if params["copy_len"] is None else params["copy_len"]
    valid = (
        params["vocab_size"] >= 5
        and params["seq_len"] >= 3
        and 1 <= top <= longest
        and (params["min_copy_len"] is None or 1 <= params["min_copy_len"] <= top)
    )
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("copy", **params)
        return
    task = build_task("copy", **params)
    check_copy(task, task.generate(12, seed))
