"""needle: the layout of tasks/needle.py's docstring, recomputed from the inputs."""

import math

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import tasks.needle
from tasks import IGNORE, build_task
from tasks.needle import Needle


def check_needle(task: Needle, data: dict[str, np.ndarray]) -> np.ndarray:
    """Check every example; return the needle's start per example."""
    inputs, labels = data["inputs"], data["labels"]
    num, length = inputs.shape
    half = task.vocab_size // 2
    assert set(data) == {"inputs", "labels", "depth_bin"} and length == task.seq_len
    assert all(data[k].dtype == np.int64 for k in data) and data["depth_bin"].shape == (num,)
    assert inputs.min() >= 1 and inputs.max() < task.vocab_size
    assert np.all(labels[:, :-1] == IGNORE)
    starts = np.empty(num, np.int64)
    for i, x in enumerate(inputs):
        key = x[-1]
        assert 1 <= key < half
        (start,) = np.flatnonzero(x[:-1] == key)  # the query key occurs once before the query
        assert start <= length - 3
        assert labels[i, -1] == x[start + 1] and half <= x[start + 1]  # the value after it
        assert data["depth_bin"][i] == np.rint(10 * start / max(length - 3, 1))
        starts[i] = start
    return starts


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"num_distractors": 0, "seq_len": 3, "vocab_size": 4},
        {"depth": 0.0, "seq_len": 50},
        {"depth": 1.0, "seq_len": 50},  # odd context: the needle ends off the distractor grid
        {"depth": [0.1, 0.9], "num_distractors": 10, "seq_len": 25},  # distractors fill the grid
    ],
)
def test_examples_meet_every_invariant(params):
    task = build_task("needle", **params)
    check_needle(task, task.generate(300, seed=0))


def test_distractors_are_distinct_pairs_that_never_touch_the_needle():
    # Filler of one value token: every key-half token in the context is a needle or distractor.
    task = build_task("needle", vocab_size=32, seq_len=40, num_distractors=5)
    original = tasks.needle.sample_excluding
    try:
        tasks.needle.sample_excluding = lambda rng, shape, *_: np.full(shape, 31)
        data = task.generate(500, 1)
    finally:
        tasks.needle.sample_excluding = original
    starts = check_needle(task, data)
    for x, start in zip(data["inputs"], starts, strict=True):
        at = np.flatnonzero(x[:-1] < 16)  # key starts
        assert len(at) == 6 and start in at and len(set(x[at])) == 6
        assert np.all(np.diff(at) >= 2) and np.all(x[at + 1] >= 16)  # non-overlapping pairs
        assert len(set(x[at + 1])) == 6  # distinct values
        assert all(a % 2 == 0 for a in at if a != start)  # distractors sit on the 2-grid


def test_every_key_half_token_is_a_key_when_keys_use_them_all():
    # vocab 8: keys are [1, 4), all three used; filler may not contain any of them.
    task = build_task("needle", vocab_size=8, seq_len=21, num_distractors=2)
    data = task.generate(500, 2)
    check_needle(task, data)
    context = data["inputs"][:, :-1]
    for x in context:
        at = np.flatnonzero(x < 4)
        assert sorted(x[at]) == [1, 2, 3] and np.all(x[at + 1] >= 4)


@pytest.mark.parametrize(
    ("depth", "bins"), [(0.0, {0}), (1.0, {10}), ([0.0, 0.5, 1.0], {0, 5, 10})]
)
def test_depth_places_the_needle(depth, bins):
    task = build_task("needle", seq_len=43, depth=depth)  # T - 3 = 40: depth 0.5 -> start 20
    data = task.generate(300, 3)
    starts = check_needle(task, data)
    assert set(data["depth_bin"]) == bins
    assert set(starts) == {round(d * 40) for d in np.atleast_1d(depth)}


def test_uniform_depth_covers_every_start_evenly():
    task = build_task("needle", seq_len=23, depth="uniform")  # starts 0 .. 20
    starts = check_needle(task, task.generate(4200, 4))
    counts = np.bincount(starts, minlength=21)
    assert np.all(np.abs(counts - 200) < 5 * np.sqrt(200))


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 3}, "vocab_size"),
        ({"num_distractors": -1}, "num_distractors"),
        ({"num_distractors": 15}, "num_distractors"),  # 15 + 1 keys > 15 in [1, 16)
        ({"num_distractors": 10, "seq_len": 24}, "seq_len"),
        ({"num_distractors": 0, "seq_len": 2}, "seq_len"),
        ({"depth": 1.5}, "depth"),
        ({"depth": -0.1}, "depth"),
        ({"depth": math.nan}, "depth"),
        ({"depth": "middle"}, "depth"),
        ({"depth": []}, "depth"),
        ({"depth": [0.5, 2.0]}, "depth"),
        ({"depth": True}, "depth"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("needle", **params)


def test_seq_len_error_states_the_minimum():
    with pytest.raises(ValueError, match=r"seq_len=24 is invalid: .*>= 25"):
        build_task("needle", num_distractors=10, seq_len=24)


def test_a_depth_list_is_stored_as_floats():
    assert build_task("needle", depth=(0, 1)).params()["depth"] == [0.0, 1.0]


depths = st.one_of(
    st.just("uniform"),
    st.floats(0, 1),
    st.lists(st.floats(0, 1), min_size=1, max_size=4),
)


@st.composite
def needle_params(draw: st.DrawFn) -> dict:
    if draw(st.integers(0, 2)) == 0:  # anything nearby, mostly invalid
        return {
            "vocab_size": draw(st.integers(0, 40)),
            "seq_len": draw(st.integers(0, 60)),
            "depth": draw(st.one_of(depths, st.floats(-1, 2), st.just("end"), st.just([]))),
            "num_distractors": draw(st.integers(-1, 20)),
        }
    vocab_size = draw(st.integers(4, 40))
    num_distractors = draw(st.integers(0, vocab_size // 2 - 2))
    low = 3 if num_distractors == 0 else 2 * num_distractors + 5
    return {
        "vocab_size": vocab_size,
        "seq_len": draw(st.integers(low, low + 30)),
        "depth": draw(depths),
        "num_distractors": num_distractors,
    }


@settings(max_examples=50, deadline=None)
@given(params=needle_params(), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(params, seed):
    vocab_size, m, depth = params["vocab_size"], params["num_distractors"], params["depth"]
    depth_ok = (
        depth == "uniform"
        or (isinstance(depth, float) and 0 <= depth <= 1)
        or (isinstance(depth, list) and len(depth) > 0 and all(0 <= d <= 1 for d in depth))
    )
    valid = (
        vocab_size >= 4
        and 0 <= m <= vocab_size // 2 - 2
        and params["seq_len"] >= (3 if m == 0 else 2 * m + 5)
        and depth_ok
    )
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("needle", **params)
        return
    task = build_task("needle", **params)
    check_needle(task, task.generate(12, seed))
