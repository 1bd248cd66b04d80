"""Loads written as ranges (tasks/load.py): each example at its own load meets every invariant
of the single-load task at that load, the loads follow their distribution, baselines per load
are those of the single-load task, and bad ranges are refused with one line."""

import hashlib
import math

import numpy as np
import pytest

from tasks import IGNORE, build_task
from tasks.base import Task
from tests.tasks.test_assoc_recall import check_mqar
from tests.tasks.test_baselines import simulate
from tests.tasks.test_copy import check_copy
from tests.tasks.test_needle import check_needle
from tests.tasks.test_noisy_recall import check_noisy_recall
from tests.tasks.test_selective_copy import check_selective_copy

RANGED = {
    "assoc_recall": ({"vocab_size": 64, "seq_len": 64, "num_kv_pairs": [1, 16]}, check_mqar),
    "noisy_recall": (
        {
            "vocab_size": 40,
            "seq_len": 48,
            "num_kv_pairs": [1, 9],
            "num_queries": 4,
            "noise_vocab_size": 5,
        },
        check_noisy_recall,
    ),  # fmt: skip
    "selective_copy": (
        {"vocab_size": 16, "seq_len": 40, "num_tokens": [1, 20], "noise_vocab_size": 3},
        check_selective_copy,
    ),
    "needle": ({"vocab_size": 32, "seq_len": 40, "num_distractors": [0, 12]}, check_needle),
    "copy": ({"vocab_size": 8, "seq_len": 41, "copy_len": [1, 20]}, check_copy),
}


def at_each_load(task: Task, data: dict[str, np.ndarray]):
    """(load, the single-load task, the examples at that load without the load slice; copy
    keeps `copy_len`, a slice of its own)."""
    name = task.load_param
    for load in np.unique(data[name]):
        rows = data[name] == load
        keep = {k: v[rows] for k, v in data.items() if k != name or name in task.example_slices}
        yield int(load), task.at_load(int(load)), keep


@pytest.mark.parametrize("name", RANGED)
def test_each_example_meets_the_invariants_of_its_own_load(name: str) -> None:
    params, check = RANGED[name]
    task = build_task(name, **params)
    assert task.has_load_range and task.load_param in params
    data = task.generate(3000, seed=4)
    loads = data[task.load_param]
    assert loads.shape == (3000,) and loads.dtype == np.int64
    low, high = params[task.load_param]
    assert set(np.unique(loads)) == set(range(low, high + 1)) == set(task.loads())
    for load, single, part in at_each_load(task, data):
        assert single.params()[task.load_param] == load and not single.has_load_range
        check(single, part)


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    return float(np.sum((counts - expected) ** 2 / expected))


DISTRIBUTIONS = [
    ({"load_dist": "uniform"}, {n: 1 / 31 for n in range(2, 33)}),
    (
        {"load_dist": "log_uniform"},
        {n: math.log((n + 1) / n) / math.log(33 / 2) for n in range(2, 33)},
    ),
    ({"load_dist": "log2"}, {2: 0.2, 4: 0.2, 8: 0.2, 16: 0.2, 32: 0.2}),
    ({"load_weights": {2: 5, 8: 1, 32: 2}}, {2: 5 / 8, 8: 1 / 8, 32: 2 / 8}),
]


@pytest.mark.parametrize(("params", "expected"), DISTRIBUTIONS)
@pytest.mark.parametrize(
    ("name", "load"),
    [("assoc_recall", "num_kv_pairs"), ("selective_copy", "num_tokens"), ("copy", "copy_len")],
)
def test_loads_follow_their_distribution(name, load, params, expected) -> None:
    """`loads()` states the distribution; the examples' loads match it (chi-square, 5 sigma
    above its mean): MQAR and copy draw per row, selective_copy load by load."""
    task = build_task(name, seq_len=130, **{load: [2, 32]}, **params)
    assert task.loads() == pytest.approx(expected, rel=1e-12)
    assert sum(task.loads().values()) == pytest.approx(1.0)
    loads = task.generate(6000, seed=11)[load]
    support = np.array(list(expected))
    assert np.isin(loads, support).all()
    counts = np.array([np.sum(loads == n) for n in support])
    df = len(support) - 1
    assert chi_square(counts, np.array(list(expected.values()))) < df + 5 * math.sqrt(2 * df)


def test_log2_grid_holds_the_powers_of_two_and_both_ends() -> None:
    task = build_task("assoc_recall", seq_len=512, num_kv_pairs=[3, 100], load_dist="log2")
    assert list(task.loads()) == [3, 4, 8, 16, 32, 64, 100]
    needle = build_task("needle", seq_len=64, num_distractors=[0, 5], load_dist="log2")
    assert list(needle.loads()) == [0, 1, 2, 4, 5]


def test_mqar_query_slots_at_each_load_follow_the_power_law() -> None:
    """A row at load n of a range draws its first query's slot among its own (T - 2n) // 2
    slots with p(i) proportional to i^(a - 1), as the single-load task does (load 5: 5 of the
    8 slots that the chunk's lightest rows have)."""
    task = build_task("assoc_recall", vocab_size=16, seq_len=20, num_kv_pairs=[2, 5], power_a=0.3)
    data = task.generate(30_000, 3)
    for load in (2, 5):
        rows = data["num_kv_pairs"] == load
        r, pos = np.nonzero(data["query_index"][rows] == 0)
        assert np.all(data["labels"][rows][r, pos] != IGNORE) and r.size == rows.sum()
        num_slots = (20 - 2 * load) // 2
        p = np.arange(1, num_slots + 1) ** (0.3 - 1)
        counts = np.bincount((pos - 2 * load) // 2, minlength=num_slots)
        assert counts.size == num_slots
        df = num_slots - 1
        assert chi_square(counts, p / p.sum()) < df + 5 * math.sqrt(2 * df)


@pytest.mark.parametrize("name", RANGED)
def test_baselines_per_load_are_those_of_the_single_load_task(name: str) -> None:
    params, _ = RANGED[name]
    task = build_task(name, **params)
    data = task.generate(4000, seed=2)
    by_load = task.baselines_by_load(data)
    assert list(by_load) == sorted(task.loads())
    for load, single, part in at_each_load(task, data):
        alone = single.baselines(single.generate(2000, seed=100 + load))
        assert set(by_load[load]) == set(alone) == set(task.baselines(data))
        examples = part["inputs"].shape[0]
        for key, value in alone.items():
            stderr = math.sqrt(max(value * (1 - value), 1e-4) / examples)
            assert abs(by_load[load][key] - value) < 5 * stderr, (load, key)
    # overall: the micro average over every scored position, as test/acc
    scored = {load: int(np.sum(p["labels"] != IGNORE)) for load, _, p in at_each_load(task, data)}
    total = sum(scored.values())
    for key, value in task.baselines(data).items():
        pooled = sum(by_load[n][key] * scored[n] for n in scored) / total
        assert value == pytest.approx(pooled, rel=1e-12)


def test_copy_baselines_of_a_range_equal_the_direct_micro_average() -> None:
    """copy's candidates need no load, so its binding-free accuracy on the whole mixed set is
    the pooled value, to rounding."""
    task = build_task("copy", vocab_size=8, seq_len=41, copy_len=[1, 20])
    data = task.generate(1000, 0)
    direct = task.at_load(20)._baselines(data)
    assert task.baselines(data) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("name", RANGED)
def test_binding_free_strategies_per_load_match_a_simulation(name: str) -> None:
    """No shortcut at any load: each strategy's exact accuracy on the examples at a load is
    what guessing that way scores (the no-shortcut check of test_baselines, per load)."""
    params, _ = RANGED[name]
    task = build_task(name, **params, load_dist="log2")
    data = task.generate(300, seed=5)
    by_load = task.baselines_by_load(data)
    for load, single, part in at_each_load(task, data):
        positions = int(np.sum(part["labels"] != IGNORE))
        for strategy, value in by_load[load].items():
            simulated = simulate(single, part, strategy, guesses=20)
            stderr = math.sqrt(max(value * (1 - value), 1e-4) / (positions * 20))
            assert abs(simulated - value) < 5 * stderr, (load, strategy, simulated, value)


@pytest.mark.parametrize("name", RANGED)
def test_same_seed_same_data_other_seed_other_loads(name: str) -> None:
    params, _ = RANGED[name]
    task = build_task(name, **params)
    a, b, c = task.generate(200, 9), task.generate(200, 9), task.generate(200, 10)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a[task.load_param], c[task.load_param])
    again = type(task)(**task.params())  # the resolved params rebuild the same task
    assert np.array_equal(again.generate(200, 9)["inputs"], a["inputs"])


@pytest.mark.parametrize(
    ("name", "load", "value"),
    [
        ("assoc_recall", "num_kv_pairs", 6),
        ("noisy_recall", "num_kv_pairs", 5),
        ("selective_copy", "num_tokens", 7),
        ("needle", "num_distractors", 3),
        ("copy", "copy_len", 9),
    ],
)
def test_a_range_of_one_load_gives_the_examples_of_that_load(name, load, value) -> None:
    single = build_task(name, seq_len=64, **{load: value}).generate(500, 1)
    ranged = build_task(name, seq_len=64, **{load: [value, value]}).generate(500, 1)
    assert np.all(ranged[load] == value)
    for key, array in single.items():
        assert np.array_equal(ranged[key], array), key


# sha256 of every array of generate(300, seed=7): single-load data must not change without a
# `version` bump (the cache is keyed by version).
PINNED = {
    ("assoc_recall", ()): "79d33e341c307552",
    ("copy", (("min_copy_len", 3), ("seq_len", 33))): "a4ef769ab1fe05ef",
    ("noisy_recall", ()): "2c2ef511f538a447",
    ("selective_copy", ()): "d881bd7df153e59d",
    ("needle", ()): "85229af753c34a0c",
    ("induction", ()): "81591faf634a0bce",
}


def fingerprint(data: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(data[key]).tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(("name", "params"), list(PINNED))
def test_single_load_data_is_pinned(name: str, params: tuple) -> None:
    task = build_task(name, **dict(params))
    assert fingerprint(task.generate(300, seed=7)) == PINNED[(name, params)]


MQAR, TO_8 = "assoc_recall", {"num_kv_pairs": [2, 8]}
BAD_LOADS = [
    (MQAR, {"num_kv_pairs": [8, 4]}, r"^num_kv_pairs=\[8, 4\] is invalid: .*low <= high"),
    (MQAR, {"num_kv_pairs": [1, 2, 3]}, r"^num_kv_pairs=\[1, 2, 3\] is invalid"),
    (MQAR, {"num_kv_pairs": [1, "8"]}, r"^num_kv_pairs=\[1, '8'\] is invalid"),
    (MQAR, {"num_kv_pairs": [0, 8]}, r"^num_kv_pairs=\[0, 8\] is invalid: .*\[1, 127\]"),
    (MQAR, {"num_kv_pairs": [4, 32]}, r"^seq_len=64 .*>= 128 for num_kv_pairs=\[4, 32\] \(largest"),
    ("noisy_recall", {"seq_len": 48, "num_kv_pairs": [2, 20]}, r"^seq_len=48 .*>= 56 .*load 20\)"),
    ("selective_copy", {"num_tokens": [2, 40]}, r"^seq_len=64 is invalid: .*>= 80"),
    ("needle", {"num_distractors": [0, 14]}, r"^seq_len=32 is invalid: .*>= 33"),
    ("copy", {"copy_len": [2, 40]}, r"^copy_len=\[2, 40\] is invalid: .*\[1, 31\] for seq_len"),
    ("copy", {"copy_len": [2, 8], "min_copy_len": 2}, r"^min_copy_len=2 is invalid: must be null"),
    (MQAR, {**TO_8, "load_dist": "zipf"}, r"^load_dist='zipf' .*one of uniform, log_uniform, log2"),
    ("needle", {"num_distractors": [0, 4], "load_dist": "log_uniform"}, r"^load_dist=.*loads >= 1"),
    (MQAR, {"load_weights": {8: 1.0}}, r"^load_weights=\{8: 1.0\} .*null for num_kv_pairs=8"),
    (MQAR, {**TO_8, "load_weights": {9: 1}}, r"^load_weights=\{9: 1\} is invalid: .*in \[2, 8\]"),
    (MQAR, {**TO_8, "load_weights": {4: 0}}, r"^load_weights=\{4: 0\} is invalid: .*weight > 0"),
    (MQAR, {**TO_8, "load_weights": {4: -1.0, 2: 1}}, r"^load_weights=.* is invalid"),
    (MQAR, {**TO_8, "load_weights": {}}, r"^load_weights=\{\} is invalid"),
    (MQAR, {**TO_8, "load_weights": [2, 4]}, r"^load_weights=\[2, 4\] is invalid"),
    (MQAR, {**TO_8, "load_weights": {4: 1}, "load_dist": "log2"}, r"^load_dist='log2' .*uniform"),
]


@pytest.mark.parametrize(("name", "params", "message"), BAD_LOADS)
def test_bad_load_input_is_refused_with_one_line(name, params, message) -> None:
    with pytest.raises(ValueError, match=message) as error:
        build_task(name, **params)
    assert "\n" not in str(error.value)


def test_weights_keyed_by_strings_as_after_a_json_round_trip_are_the_same() -> None:
    by_int = build_task("assoc_recall", num_kv_pairs=[2, 8], load_weights={2: 3, 8: 1})
    by_str = build_task("assoc_recall", num_kv_pairs=[2, 8], load_weights={"8": 1, "2": 3})
    assert by_str.load_weights == by_int.load_weights == {2: 3.0, 8: 1.0}
    assert by_str.loads() == {2: 0.75, 8: 0.25}
    assert np.array_equal(by_str.generate(100, 0)["inputs"], by_int.generate(100, 0)["inputs"])


def test_single_load_tasks_carry_no_load_slice_and_one_load() -> None:
    task = build_task("assoc_recall")
    assert not task.has_load_range and task.loads() == {8: 1.0} and task.at_load(8) is task
    assert set(task.generate(10, 0)) == {"inputs", "labels", "query_index", "query_order"}
    assert list(task.baselines_by_load(task.generate(50, 0))) == [8]
    induction = build_task("induction")
    assert induction.load_param is None and induction.loads() == {}
    assert induction.baselines_by_load(induction.generate(10, 0)) == {}


def test_min_copy_len_is_the_range_from_min_copy_len_to_copy_len() -> None:
    old = build_task("copy", seq_len=128, copy_len=48, min_copy_len=4)
    new = build_task("copy", seq_len=128, copy_len=[4, 48])
    assert old.has_load_range and old.loads() == new.loads()
    a, b = old.generate(400, 3), new.generate(400, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert old.at_load(10).params() == {**new.at_load(10).params(), "copy_len": 10}


def test_an_unknown_parameter_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^num_pairs=4 is invalid: must be a parameter of "):
        build_task("assoc_recall").with_params(num_pairs=4)


def two_sample_chi_square(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """(statistic, degrees of freedom) of counts `a` and `b` over the same bins coming from
    one distribution (bins empty in both dropped)."""
    keep = (a + b) > 0
    a, b = a[keep].astype(float), b[keep].astype(float)
    ka, kb = math.sqrt(b.sum() / a.sum()), math.sqrt(a.sum() / b.sum())
    return float(np.sum((ka * a - kb * b) ** 2 / (a + b))), int(keep.sum()) - 1


def marked_positions(task: Task, inputs: np.ndarray) -> np.ndarray:
    """Where the data tokens (selective_copy) or the keys (noisy_recall) stand in the context."""
    if task.registry_name == "selective_copy":
        context = inputs[:, : task.seq_len - task.num_tokens]
        return np.nonzero(context >= task.first_data)[1]
    context = inputs[:, : task.seq_len - 2 * task.num_queries]
    return np.nonzero((context >= task.first_key) & (context < task.first_value))[1]


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("selective_copy", {"seq_len": 48, "num_tokens": [2, 12], "noise_vocab_size": 3}),
        ("noisy_recall", {"seq_len": 48, "num_kv_pairs": [2, 12], "num_queries": 4}),
    ],
)
def test_placements_at_each_load_are_those_of_the_single_load_task(name, params) -> None:
    """Rows at load n of a range place their tokens as the single-load task at n does
    (two-sample chi-square over positions, 5 sigma above its mean)."""
    task = build_task(name, **params)
    data = task.generate(12_000, seed=8)
    for load, single, part in at_each_load(task, data):
        if load not in (2, 7, 12):
            continue
        ranged = np.bincount(marked_positions(single, part["inputs"]), minlength=48)
        alone = single.generate(part["inputs"].shape[0], seed=9)["inputs"]
        statistic, df = two_sample_chi_square(
            ranged, np.bincount(marked_positions(single, alone), minlength=48)
        )
        assert statistic < df + 5 * math.sqrt(2 * df), (load, statistic, df)
