"""overwrite_recall: every invariant of tasks/overwrite_recall.py's docstring, recomputed from
the inputs one example at a time (the latest binding wins), its baselines by brute force, no
shortcut for a reader that ignores the queried key, its refusals and its load range."""

import math

import numpy as np
import pytest

from tasks import IGNORE, build_task, overwrite_recall
from tasks.load import load_bounds
from tasks.overwrite_recall import OverwriteRecall


def bucket(tokens: int) -> int:
    """The power of two at or below `tokens` (0 for 0), by halving."""
    if tokens == 0:
        return 0
    power = 1
    while power * 2 <= tokens:
        power *= 2
    return power


def read_example(task: OverwriteRecall, x: np.ndarray) -> tuple[list[int], dict[int, list]]:
    """The queried keys in order and, per key, its bindings [(slot, value), ...] in time order,
    found by scanning the context for the queried keys."""
    n, length = task.num_kv_pairs, task.seq_len
    start = (length - 2 * n) % 2
    asked = [int(k) for k in x[length - 2 * n :: 2]]
    bindings: dict[int, list] = {k: [] for k in asked}
    for slot, pos in enumerate(range(start, length - 2 * n, 2)):
        if int(x[pos]) in bindings:
            bindings[int(x[pos])].append((slot, int(x[pos + 1])))
    return asked, bindings


def check_overwrite(task: OverwriteRecall, data: dict[str, np.ndarray]) -> list[list[int]]:
    """Check every example against the docstring; return each example's spans 2 D (tokens)
    of its re-bound keys."""
    n, length, vocab = task.num_kv_pairs, task.seq_len, task.vocab_size
    r = math.floor(task.rebound_fraction * n + 0.5)
    low, high = load_bounds("rebinds", task.rebinds)
    longest = math.inf if task.max_distance is None else task.max_distance
    assert set(data) == {"inputs", "labels", "rebound", "rebinds", "distance"}
    for key, array in data.items():
        assert array.dtype == np.int64 and array.shape == (len(data["inputs"]), length), key
    assert data["inputs"].min() >= 1 and data["inputs"].max() < vocab  # token 0 never appears
    spans = []
    arrays = zip(
        *(data[k] for k in ("inputs", "labels", "rebound", "rebinds", "distance")), strict=True
    )
    for x, y, rebound, rebinds, distance in arrays:
        asked, bindings = read_example(task, x)
        assert len(set(asked)) == n and all(1 <= k < vocab // 2 for k in asked)
        values = [v for k in asked for _, v in bindings[k]]
        assert len(values) == len(set(values))  # every binding writes a new value
        assert all(vocab // 2 <= v < vocab for v in values)
        counts = [len(bindings[k]) - 1 for k in asked]
        assert sum(c > 0 for c in counts) == r
        assert all(c == 0 or low <= c <= high for c in counts)
        mine = []
        for i, key in enumerate(asked):
            pos = length - 2 * n + 2 * i
            first, last = bindings[key][0][0], bindings[key][-1][0]
            span = 2 * (last - first)
            if counts[i]:
                assert max(task.min_distance, 2 * counts[i]) <= span <= longest
                mine.append(span)
            assert y[pos] == bindings[key][-1][1]  # the latest binding wins
            assert x[pos + 1] not in asked  # filler after a query
            assert (rebound[pos], rebinds[pos]) == (int(counts[i] > 0), counts[i])
            assert distance[pos] == bucket(span)
        spans.append(mine)
        scored = length - 2 * n + 2 * np.arange(n)
        unscored = np.ones(length, bool)
        unscored[scored] = False
        assert np.all(y[unscored] == IGNORE)
        for s in (rebound, rebinds, distance):
            assert np.all(s[unscored] == -1)
        # filler (every token outside bindings and query keys) is never one of the keys
        used = {pos for k in asked for slot, _ in bindings[k] for pos in (2 * slot, 2 * slot + 1)}
        start = (length - 2 * n) % 2
        filler = [t for t in range(length - 2 * n) if t - start not in used]
        assert not {int(t) for t in x[filler]} & set(asked)
        assert sum(len(b) for b in bindings.values()) == n + sum(counts)
    return spans


CASES = [
    {},
    {"vocab_size": 16, "seq_len": 21, "num_kv_pairs": 3},  # odd length: one leading filler
    {"vocab_size": 64, "seq_len": 64, "num_kv_pairs": 6, "rebinds": [1, 3]},
    {"seq_len": 48, "num_kv_pairs": 5, "rebound_fraction": 1.0, "rebinds": 2},
    {"seq_len": 32, "num_kv_pairs": 8, "rebound_fraction": 0.0},  # plain MQAR, queries last
    {"seq_len": 96, "num_kv_pairs": 4, "min_distance": 40, "max_distance": 40},
    {"seq_len": 96, "num_kv_pairs": 6, "rebinds": 3, "min_distance": 9, "max_distance": 20},
    {"vocab_size": 14, "seq_len": 24, "num_kv_pairs": 3, "rebinds": 2},  # every value used
]


@pytest.mark.parametrize("params", CASES)
def test_examples_meet_every_invariant(params: dict) -> None:
    task = build_task("overwrite_recall", **params)
    check_overwrite(task, task.generate(300, seed=0))


def test_defaults_and_params_round_trip() -> None:
    task = build_task("overwrite_recall")
    assert task.params() == {
        "vocab_size": 256,
        "seq_len": 64,
        "num_kv_pairs": 8,
        "rebound_fraction": 0.5,
        "rebinds": 1,
        "min_distance": 2,
        "max_distance": None,
        "load_dist": "uniform",
        "load_weights": None,
    }
    assert task.with_seq_len(80).params()["seq_len"] == 80
    assert task.num_rebound == 4 and task.num_slots == 24
    assert build_task("overwrite_recall", rebinds=(1, 3)).rebinds == [1, 3]


def test_fixed_distance_and_rebinds_range_are_met_and_drawn_evenly() -> None:
    task = build_task("overwrite_recall", seq_len=96, num_kv_pairs=6, rebinds=[1, 3])
    data = task.generate(3000, seed=2)
    counts = np.bincount(data["rebinds"][data["rebinds"] > 0], minlength=4)[1:]
    assert np.all(np.abs(counts - 3000 * 3 / 3) < 5 * math.sqrt(3000 * 3 * 2 / 9))
    fixed = build_task("overwrite_recall", seq_len=96, num_kv_pairs=4, min_distance=30)
    fixed = fixed.with_params(max_distance=31)  # distances are even: 30
    spans = check_overwrite(fixed, fixed.generate(200, seed=3))
    assert {s for row in spans for s in row} == {30}


def test_a_single_key_spans_a_pair_of_slots_drawn_uniformly() -> None:
    """One re-bound key in an empty context of S = 10 slots: its pair (a, a + D) is uniform
    over the 45 pairs, so P(D) = (S - D) / 45."""
    task = build_task("overwrite_recall", seq_len=22, num_kv_pairs=1, rebound_fraction=1.0)
    assert task.num_slots == 10
    num = 9000
    data = task.generate(num, seed=4)
    span = np.array([row[0] for row in check_overwrite(task, data)]) // 2
    counts = np.bincount(span, minlength=10)[1:]
    expected = num * (10 - np.arange(1, 10)) / 45
    chi = np.sum((counts - expected) ** 2 / expected)
    assert chi < 8 + 5 * 4, (counts, expected)


def brute_baselines(task: OverwriteRecall, data: dict[str, np.ndarray]) -> dict[str, float]:
    """Each baseline's definition, one scored position at a time: in_context, a guess among
    the values written in the context; current, among the latest value of each key; stale,
    the queried key's first value."""
    hits = {"in_context": [], "current": [], "stale": []}
    for x, y in zip(data["inputs"], data["labels"], strict=True):
        asked, bindings = read_example(task, x)
        written = {v for b in bindings.values() for _, v in b}
        latest = {b[-1][1] for b in bindings.values()}
        for i, key in enumerate(asked):
            answer = y[task.seq_len - 2 * task.num_kv_pairs + 2 * i]
            hits["in_context"].append((answer in written) / len(written))
            hits["current"].append((answer in latest) / len(latest))
            hits["stale"].append(float(bindings[key][0][1] == answer))
    half = task.vocab_size // 2
    return {
        "chance": 1 / (task.vocab_size - half),
        **{k: float(np.mean(v)) for k, v in hits.items()},
    }


@pytest.mark.parametrize("params", [CASES[0], CASES[2], CASES[3], CASES[4]])
def test_baselines_equal_their_definitions(params: dict) -> None:
    task = build_task("overwrite_recall", **params)
    data = task.generate(200, seed=5)
    exact = task.baselines(data)
    assert exact == pytest.approx(brute_baselines(task, data), abs=1e-12)
    n, r = task.num_kv_pairs, task.num_rebound
    assert exact["current"] == pytest.approx(1 / n, abs=1e-12)
    assert exact["stale"] == pytest.approx((n - r) / n, abs=1e-12)
    assert exact["chance"] < exact["in_context"] <= exact["current"]


def test_no_reader_that_ignores_the_key_beats_the_current_guess() -> None:
    """Strategies that read positions but never the queried key: the latest binding's value,
    the latest value of a re-bound key, and the i-th still-bound value (by place) for the
    i-th query; none beats current = 1 / n by more than noise. And the queried key's latest
    binding is uniform among the still-bound values' places at every query rank."""
    task = build_task("overwrite_recall", vocab_size=64, seq_len=40, num_kv_pairs=4)
    num, n = 6000, 4
    data = task.generate(num, seed=6)
    scores = {"last": 0, "last_rebound": 0, "by_rank": 0}
    table = np.zeros((n, n))
    for x, y in zip(data["inputs"], data["labels"], strict=True):
        asked, bindings = read_example(task, x)
        timeline = sorted((slot, v, k) for k, b in bindings.items() for slot, v in b)
        still = sorted(b[-1] for b in bindings.values())  # (slot, value) of the bound values
        rebound_latest = max(b[-1] for b in bindings.values() if len(b) > 1)
        for i in range(n):
            answer = y[task.seq_len - 2 * n + 2 * i]
            scores["last"] += timeline[-1][1] == answer
            scores["last_rebound"] += rebound_latest[1] == answer
            scores["by_rank"] += still[i][1] == answer
            table[i, [v for _, v in still].index(answer)] += 1
    sigma = math.sqrt((1 / n) * (1 - 1 / n) / (num * n))
    for name, hits in scores.items():
        assert hits / (num * n) < 1 / n + 4 * sigma, name
    expected = num / n
    chi = np.sum((table - expected) ** 2 / expected)  # 9 degrees of freedom
    assert chi < 9 + 5 * math.sqrt(18), table


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"vocab_size": 3}, "vocab_size"),
        ({"vocab_size": 16}, "num_kv_pairs"),  # 7 keys in [1, 8)
        ({"vocab_size": 22}, "vocab_size"),  # 12 bindings need 12 values: V >= 23
        ({"num_kv_pairs": 0}, "num_kv_pairs"),
        ({"num_kv_pairs": "8"}, "num_kv_pairs"),
        ({"rebound_fraction": 1.5}, "rebound_fraction"),
        ({"rebound_fraction": -0.1}, "rebound_fraction"),
        ({"rebound_fraction": math.nan}, "rebound_fraction"),
        ({"rebound_fraction": True}, "rebound_fraction"),
        ({"rebinds": 0}, "rebinds"),
        ({"rebinds": [0, 2]}, "rebinds"),
        ({"rebinds": [3, 2]}, "rebinds"),
        ({"rebinds": 2.0}, "rebinds"),
        ({"seq_len": 39}, "seq_len"),  # 8 queries and 12 bindings: 40 tokens
        ({"min_distance": 1}, "min_distance"),
        ({"min_distance": 42}, "min_distance"),  # 24 slots, 4 re-bound keys: at most 40
        ({"min_distance": 4.0}, "min_distance"),
        ({"min_distance": 6, "max_distance": 5}, "max_distance"),
        ({"rebinds": 3, "max_distance": 4}, "max_distance"),
        ({"max_distance": "8"}, "max_distance"),
        ({"load_dist": "normal"}, "load_dist"),
    ],
)
def test_invalid_parameters_raise_a_value_error_naming_them(params: dict, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}="):
        build_task("overwrite_recall", **params)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"seq_len": 39}, r"seq_len=39 is invalid: .*>= 40 for num_kv_pairs=8, rebound_fraction"),
        ({"num_kv_pairs": [1, 14]}, r"seq_len=64 is invalid: .*>= 70 .*largest load 14"),
        ({"vocab_size": 22}, r"vocab_size=22 is invalid: .*>= 23 .*rebinds=1 \(12 bindings"),
        ({"min_distance": 42}, r"min_distance=42 is invalid: .*\[2, 40\] for seq_len=64"),
        ({"rebinds": 3, "max_distance": 4}, r"max_distance=4 is invalid: .*>= 6 .*rebinds=3"),
    ],
)
def test_a_bound_set_by_other_parameters_names_them(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_task("overwrite_recall", **params)


def test_a_layout_the_draw_cannot_find_is_refused_with_one_line(monkeypatch) -> None:
    """Three re-bound keys at least 34 tokens (17 slots) apart in 20 slots: the pairs (0, 17),
    (1, 18), (2, 19) are the only way; a row that picks (0, 18) first is drawn again. With a
    single round allowed, some rows fail and the draw gives up naming the distances."""
    params = {"seq_len": 46, "num_kv_pairs": 3, "rebound_fraction": 1.0, "min_distance": 34}
    task = build_task("overwrite_recall", **params)
    spans = check_overwrite(task, task.generate(100, seed=7))
    assert {s for row in spans for s in row} == {34}
    monkeypatch.setattr(overwrite_recall, "MAX_DRAWS", 1)
    with pytest.raises(ValueError, match=r"^min_distance=34 and max_distance=None leave"):
        task.generate(100, seed=7)


def test_a_load_range_gives_each_load_the_examples_of_that_load() -> None:
    task = build_task(
        "overwrite_recall", seq_len=72, num_kv_pairs=[1, 10], rebinds=[1, 2], min_distance=4
    )
    data = task.generate(1500, seed=8)
    loads = data["num_kv_pairs"]
    assert set(np.unique(loads)) == set(range(1, 11)) == set(task.loads())
    by_load = task.baselines_by_load(data)
    for load in range(1, 11):
        rows = loads == load
        part = {k: v[rows] for k, v in data.items() if k != "num_kv_pairs"}
        single = task.at_load(load)
        assert single.num_kv_pairs == load and not single.has_load_range
        check_overwrite(single, part)
        assert by_load[load] == pytest.approx(brute_baselines(single, part), abs=1e-12)
