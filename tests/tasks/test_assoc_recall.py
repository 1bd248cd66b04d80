"""MQAR: every invariant of tasks/assoc_recall.py's docstring, recomputed from the inputs."""

import math

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tasks import IGNORE, build_task
from tasks.assoc_recall import AssocRecall


def check_mqar(task: AssocRecall, data: dict[str, np.ndarray]) -> None:
    """Recompute labels and slices from `inputs` alone and compare (one example at a time)."""
    n, length, vocab = task.num_kv_pairs, task.seq_len, task.vocab_size
    inputs, labels = data["inputs"], data["labels"]
    num = inputs.shape[0]
    assert set(data) == {"inputs", "labels", "query_index", "query_order"}
    for key in data:
        assert data[key].dtype == np.int64 and data[key].shape == (num, length), key
    assert inputs.min() >= 1 and inputs.max() < vocab  # token 0 never appears
    slices = zip(inputs, labels, data["query_index"], data["query_order"], strict=True)
    for x, y, index, order in slices:
        keys, values = list(x[0 : 2 * n : 2]), list(x[1 : 2 * n : 2])
        assert len(set(keys)) == n and len(set(values)) == n
        assert all(1 <= k < vocab // 2 for k in keys)
        assert all(vocab // 2 <= v < vocab for v in values)
        scored = np.flatnonzero(y != IGNORE)
        assert len(scored) == n
        queried = []
        for rank, pos in enumerate(scored):
            assert pos >= 2 * n and (pos - 2 * n) % 2 == 0 and pos + 1 < length
            j = keys.index(x[pos])  # the pair this query asks for, found in the context
            assert y[pos] == values[j]
            if task.layout == "teacher_forced":
                assert x[pos + 1] == values[j]
            else:  # filler: never a key; the answer is nowhere after the context but by chance
                assert x[pos + 1] not in keys
            assert index[pos] == j and order[pos] == rank
            queried.append(j)
        assert sorted(queried) == list(range(n))  # each key queried exactly once
        query_slots = set(scored) | (set(scored + 1) if task.layout == "teacher_forced" else set())
        filler = [t for t in range(2 * n, length) if t not in query_slots]
        assert not set(x[filler]) & set(keys)  # filler never looks like a query
        unscored = np.ones(length, bool)
        unscored[scored] = False
        assert np.all(index[unscored] == -1) and np.all(order[unscored] == -1)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"vocab_size": 16, "seq_len": 21, "num_kv_pairs": 3},  # odd length: one trailing filler
        {"vocab_size": 8, "seq_len": 12, "num_kv_pairs": 3},  # every key used, no free slot
        {"vocab_size": 300, "seq_len": 128, "num_kv_pairs": 32, "power_a": 1.0},
        {"layout": "teacher_forced"},
        {"vocab_size": 16, "seq_len": 21, "num_kv_pairs": 3, "layout": "teacher_forced"},
    ],
)
def test_examples_meet_every_invariant(params):
    task = build_task("assoc_recall", **params)
    check_mqar(task, task.generate(300, seed=0))


def test_defaults_and_params_round_trip():
    task = build_task("assoc_recall")
    assert task.params() == {
        "vocab_size": 256,
        "seq_len": 64,
        "num_kv_pairs": 8,
        "power_a": 0.01,
        "layout": "zoology",
        "load_dist": "uniform",
        "load_weights": None,
    }
    assert task.with_seq_len(128).params()["seq_len"] == 128
    assert AssocRecall.version == 2 and task.registry_name == "assoc_recall"


def test_large_vocab_generates_in_chunks_and_stays_valid():
    task = build_task("assoc_recall", vocab_size=8192, seq_len=96, num_kv_pairs=24)
    check_mqar(task, task.generate(2500, seed=1))  # more rows than one chunk (2048)


def slot_of_each_query(task: AssocRecall, data: dict[str, np.ndarray]) -> np.ndarray:
    """[N, n]: the slot (0 = right after the context) where pair j is queried."""
    rows, pos = np.nonzero(data["query_index"] >= 0)
    slots = np.empty((data["inputs"].shape[0], task.num_kv_pairs), np.int64)
    slots[rows, data["query_index"][rows, pos]] = (pos - 2 * task.num_kv_pairs) // 2
    return slots


def test_query_gaps_skew_short_for_small_power_a_and_are_uniform_for_one():
    skewed = build_task("assoc_recall", seq_len=256, num_kv_pairs=8, power_a=0.01)
    uniform = build_task("assoc_recall", seq_len=256, num_kv_pairs=8, power_a=1.0)
    middle = (skewed.num_slots - 1) / 2  # mean slot index under uniform sampling
    skew_mean = slot_of_each_query(skewed, skewed.generate(4000, 0)).mean()
    uniform_mean = slot_of_each_query(uniform, uniform.generate(4000, 0)).mean()
    assert skew_mean < 0.6 * middle
    assert abs(uniform_mean - middle) < 0.03 * middle


def test_first_two_queries_follow_the_power_law_drawn_without_replacement():
    task = build_task("assoc_recall", vocab_size=16, seq_len=14, num_kv_pairs=2, power_a=0.3)
    num = 40_000
    slots = slot_of_each_query(task, task.generate(num, 3))  # 5 slots
    p = np.arange(1, 6) ** (0.3 - 1)
    p /= p.sum()
    second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j) for j in range(5)])
    for column, probs in ((0, p), (1, second)):
        counts = np.bincount(slots[:, column], minlength=5)
        sigma = np.sqrt(num * probs * (1 - probs))
        assert np.all(np.abs(counts - num * probs) < 5 * sigma), (column, counts, num * probs)


def test_filler_is_uniform_over_the_non_key_tokens():
    # vocab 16, 3 keys in [1, 8): each filler token is uniform over 15 - 3 = 12 tokens, 8 of
    # which are in the value half [8, 16).
    task = build_task("assoc_recall", vocab_size=16, seq_len=64, num_kv_pairs=3)
    data = task.generate(2000, 5)
    mask = np.ones_like(data["inputs"], bool)
    mask[:, :6] = False
    rows, pos = np.nonzero(data["labels"] != IGNORE)
    mask[rows, pos] = False  # the token after a query is filler too (Zoology's layout)
    filler = data["inputs"][mask]
    assert abs(np.mean(filler >= 8) - 8 / 12) < 0.01


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 3}, "vocab_size"),
        ({"vocab_size": 64.0}, "vocab_size"),
        ({"vocab_size": True}, "vocab_size"),
        ({"num_kv_pairs": 0}, "num_kv_pairs"),
        ({"num_kv_pairs": 128}, "num_kv_pairs"),  # only 127 keys in [1, 128)
        ({"num_kv_pairs": "8"}, "num_kv_pairs"),
        ({"seq_len": 31}, "seq_len"),
        ({"seq_len": 64.5}, "seq_len"),
        ({"power_a": 0.0}, "power_a"),
        ({"power_a": 1.5}, "power_a"),
        ({"power_a": math.nan}, "power_a"),
        ({"power_a": "0.1"}, "power_a"),
        ({"layout": "answers"}, "layout"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("assoc_recall", **params)


def test_seq_len_error_states_the_minimum_for_this_num_kv_pairs():
    with pytest.raises(ValueError, match=r"seq_len=63 is invalid: .*>= 64"):
        build_task("assoc_recall", seq_len=63, num_kv_pairs=16)


@pytest.mark.parametrize(
    ("args", "name"), [((0, 1), "num_examples"), ((2.0, 1), "num_examples"), ((4, -1), "seed")]
)
def test_invalid_generate_arguments_raise(args, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("assoc_recall").generate(*args)


@st.composite
def mqar_params(draw: st.DrawFn) -> dict:
    """Two thirds valid parameters (often at the edges), one third anything nearby."""
    if draw(st.integers(0, 2)) == 0:
        vocab_size = draw(st.integers(-2, 70))
        num_kv_pairs = draw(st.integers(-1, 36))
        seq_len = draw(st.integers(-2, 90))
        power_a = draw(st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, math.nan])))
    else:
        vocab_size = draw(st.integers(4, 70))
        num_kv_pairs = draw(st.integers(1, vocab_size // 2 - 1))
        seq_len = draw(st.integers(4 * num_kv_pairs, 4 * num_kv_pairs + 40))
        power_a = draw(st.one_of(st.floats(1e-6, 1.0), st.sampled_from([1e-6, 1, 1.0])))
    return {
        "vocab_size": vocab_size,
        "seq_len": seq_len,
        "num_kv_pairs": num_kv_pairs,
        "power_a": power_a,
    }


@settings(max_examples=50, deadline=None)
@given(params=mqar_params(), seed=st.integers(0, 2**32))
def test_any_parameters_give_valid_data_or_a_value_error(params, seed):
    vocab_size, num_kv_pairs = params["vocab_size"], params["num_kv_pairs"]
    valid = (
        vocab_size >= 4
        and 1 <= num_kv_pairs <= vocab_size // 2 - 1
        and params["seq_len"] >= 4 * num_kv_pairs
        and 0 < params["power_a"] <= 1
    )
    event("valid" if valid else "invalid")
    if not valid:
        with pytest.raises(ValueError):
            build_task("assoc_recall", **params)
        return
    task = build_task("assoc_recall", **params)
    check_mqar(task, task.generate(12, seed))
