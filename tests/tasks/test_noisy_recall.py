"""noisy_recall: the layout of tasks/noisy_recall.py's docstring, recomputed from the inputs."""

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tasks import IGNORE, build_task
from tasks.noisy_recall import NoisyRecall


def check_noisy_recall(task: NoisyRecall, data: dict[str, np.ndarray]) -> np.ndarray:
    """Check every example; return the pairs' start positions [N, n]."""
    inputs, labels = data["inputs"], data["labels"]
    num, length = inputs.shape
    n, q = task.num_kv_pairs, task.num_queries
    first_key = 1 + task.noise_vocab_size
    num_keys = (task.vocab_size - first_key) // 2
    first_value = first_key + num_keys
    context = length - 2 * q
    assert set(data) == {"inputs", "labels", "query_index"} and length == task.seq_len
    assert all(data[k].dtype == np.int64 and data[k].shape == (num, length) for k in data)
    assert inputs.min() >= 1 and inputs.max() < task.vocab_size
    all_starts = np.empty((num, n), np.int64)
    for i, (x, y, index) in enumerate(zip(inputs, labels, data["query_index"], strict=True)):
        ctx = x[:context]
        starts = np.flatnonzero((ctx >= first_key) & (ctx < first_value))
        keys, values = ctx[starts], ctx[np.minimum(starts + 1, context - 1)]
        assert len(starts) == n and len(set(keys)) == n  # n distinct keys, once each
        assert np.all(starts + 1 < context) and np.all(values >= first_value)  # value after key
        assert len(set(values)) == n and np.sum(ctx >= first_value) == n
        assert np.sum(ctx < first_key) == context - 2 * n  # everything else is noise
        at_key = context + 2 * np.arange(q)
        asked = x[at_key]
        assert set(asked) <= set(keys)  # keys of the context
        pair = np.array([list(keys).index(k) for k in asked])
        assert np.all(x[at_key + 1] < first_key)  # noise after a query: no answer after the context
        assert not set(x[context:]) & set(values)
        assert np.array_equal(y[at_key], values[pair]) and np.array_equal(index[at_key], pair)
        unscored = np.ones(length, bool)
        unscored[at_key] = False
        assert np.all(y[unscored] == IGNORE) and np.all(index[unscored] == -1)
        all_starts[i] = starts
    return all_starts


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"vocab_size": 4, "seq_len": 4, "num_kv_pairs": 1, "num_queries": 1, "noise_vocab_size": 1},
        {
            "vocab_size": 16,
            "seq_len": 20,
            "num_kv_pairs": 5,
            "num_queries": 5,
            "noise_vocab_size": 5,
        },
        {"seq_len": 200, "num_kv_pairs": 12, "num_queries": 3},
        {"seq_len": 60, "num_kv_pairs": 2, "num_queries": 20},  # more queries than pairs
    ],
)
def test_examples_meet_every_invariant(params):
    task = build_task("noisy_recall", **params)
    check_noisy_recall(task, task.generate(300, seed=0))


def test_pairs_are_placed_uniformly_and_queries_pick_pairs_independently():
    task = build_task("noisy_recall", seq_len=48, num_kv_pairs=4, num_queries=2)  # context 44
    data = task.generate(4000, 1)
    starts = check_noisy_recall(task, data)
    # by symmetry of uniform placements, the mean start of a pair is (44 - 2) / 2
    assert abs(starts.mean() - 21) < 0.4
    asked = data["query_index"][data["query_index"] >= 0].reshape(4000, 2)
    assert np.all(np.abs(np.bincount(asked.ravel(), minlength=4) - 2000) < 5 * np.sqrt(1500))
    same = np.mean(asked[:, 0] == asked[:, 1])  # with replacement: the same pair w.p. 1/4
    assert abs(same - 0.25) < 5 * np.sqrt(0.25 * 0.75 / 4000)


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 3}, "vocab_size"),
        ({"noise_vocab_size": 0}, "noise_vocab_size"),
        ({"noise_vocab_size": 62}, "noise_vocab_size"),
        ({"num_kv_pairs": 24}, "num_kv_pairs"),  # (64 - 1 - 16) // 2 = 23 keys
        ({"num_kv_pairs": 0}, "num_kv_pairs"),
        ({"num_queries": 0}, "num_queries"),
        ({"seq_len": 31}, "seq_len"),
        ({"seq_len": "64"}, "seq_len"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("noisy_recall", **params)


@st.composite
def noisy_recall_params(draw: st.DrawFn) -> dict:
    if draw(st.integers(0, 2)) == 0:  # anything nearby, mostly invalid
        return {
            "vocab_size": draw(st.integers(0, 40)),
            "seq_len": draw(st.integers(-1, 60)),
            "num_kv_pairs": draw(st.integers(-1, 20)),
            "num_queries": draw(st.integers(-1, 20)),
            "noise_vocab_size": draw(st.integers(-1, 30)),
        }
    vocab_size = draw(st.integers(4, 40))
    noise = draw(st.integers(1, vocab_size - 3))
    n = draw(st.integers(1, (vocab_size - 1 - noise) // 2))
    q = draw(st.integers(1, n + 3))
    return {
        "vocab_size": vocab_size,
        "seq_len": draw(st.integers(2 * n + 2 * q, 2 * n + 2 * q + 30)),
        "num_kv_pairs": n,
        "num_queries": q,
        "noise_vocab_size": noise,
    }


@settings(max_examples=50, deadline=None)
@given(params=noisy_recall_params(), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(params, seed):
    vocab_size, noise = params["vocab_size"], params["noise_vocab_size"]
    n, q = params["num_kv_pairs"], params["num_queries"]
    valid = (
        vocab_size >= 4
        and 1 <= noise <= vocab_size - 3
        and 1 <= n <= (vocab_size - 1 - noise) // 2
        and q >= 1
        and params["seq_len"] >= 2 * n + 2 * q
    )
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("noisy_recall", **params)
        return
    task = build_task("noisy_recall", **params)
    check_noisy_recall(task, task.generate(12, seed))
