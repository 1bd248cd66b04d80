"""Binding-free baselines: each task's exact `baselines` against a brute-force simulation of
the same strategy (plain Python sets, random guesses), and the values the docstrings state."""

import math

import numpy as np
import pytest

from tasks import IGNORE, TASKS, build_task
from tasks.base import Task


def slow_candidates(task: Task, x: np.ndarray, position: int, earlier: list[int]) -> set[int]:
    """The `in_context` candidates (or MQAR's `elimination` ones, via `earlier` queries) of
    one scored position, from each task's docstring, one token at a time."""
    name, length = task.registry_name, len(x)
    if name == "assoc_recall":
        shown = {int(x[q + 1]) for q in earlier}
        return {int(v) for v in x[1 : 2 * task.num_kv_pairs : 2]} - shown
    if name == "noisy_recall":
        return {int(t) for t in x if t >= task.first_value}
    if name == "copy":
        return {int(t) for t in x if t >= 3}
    if name == "selective_copy":
        return {int(t) for t in x if t >= task.first_data}
    if name == "needle":
        half = task.vocab_size // 2
        return {int(x[t + 1]) for t in range(length - 2) if x[t] < half <= x[t + 1]}
    if name == "induction":
        return {int(t) for t in x[:-1]} - {int(x[-1])}
    raise AssertionError(f"no slow definition for {name}")


def simulate(task: Task, data: dict[str, np.ndarray], strategy: str, guesses: int) -> float:
    """Accuracy of `guesses` uniform random guesses per scored position."""
    rng = np.random.default_rng(0)
    low, high = task.answer_tokens
    hits = total = 0
    for x, y in zip(data["inputs"], data["labels"], strict=True):
        scored = [int(t) for t in np.flatnonzero(y != IGNORE)]
        for rank, position in enumerate(scored):
            if strategy == "chance":
                pool = list(range(low, high))
            else:
                earlier = scored[:rank] if strategy == "elimination" else []
                pool = sorted(slow_candidates(task, x, position, earlier))
            if pool:
                picks = np.asarray(pool)[rng.integers(0, len(pool), size=guesses)]
                hits += int(np.sum(picks == y[position]))
            total += guesses
    return hits / total


CASES = [
    ("assoc_recall", {"vocab_size": 32, "seq_len": 40, "num_kv_pairs": 6}),
    (
        "assoc_recall",
        {"vocab_size": 32, "seq_len": 40, "num_kv_pairs": 6, "layout": "teacher_forced"},
    ),
    ("assoc_recall", {"vocab_size": 12, "seq_len": 33, "num_kv_pairs": 4}),  # filler hits values
    (
        "noisy_recall",
        {
            "vocab_size": 24,
            "seq_len": 40,
            "num_kv_pairs": 5,
            "num_queries": 9,
            "noise_vocab_size": 5,
        },
    ),
    ("copy", {"vocab_size": 8, "seq_len": 21, "min_copy_len": 2}),
    ("selective_copy", {"vocab_size": 10, "seq_len": 24, "num_tokens": 6, "noise_vocab_size": 3}),
    ("needle", {"vocab_size": 16, "seq_len": 24, "num_distractors": 2}),
    ("induction", {"vocab_size": 8, "seq_len": 16}),
]


@pytest.mark.parametrize(("name", "params"), CASES)
def test_exact_baselines_match_a_simulation_of_each_strategy(name: str, params: dict) -> None:
    task = build_task(name, **params)
    data = task.generate(150, seed=3)
    exact = task.baselines(data)
    expected = {"chance", "in_context"} | ({"elimination"} if name == "assoc_recall" else set())
    assert set(exact) == expected
    positions = int(np.sum(data["labels"] != IGNORE))
    guesses = 40
    for strategy, value in exact.items():
        simulated = simulate(task, data, strategy, guesses)
        stderr = math.sqrt(max(value * (1 - value), 1e-4) / (positions * guesses))
        assert abs(simulated - value) < 4 * stderr, (strategy, simulated, value, stderr)


def harmonic(n: int) -> float:
    return sum(1 / i for i in range(1, n + 1))


@pytest.mark.parametrize("n", [4, 8])
def test_mqar_elimination_is_h_n_over_n_teacher_forced_and_about_1_over_n_in_zoology(n: int):
    forced = build_task("assoc_recall", num_kv_pairs=n, layout="teacher_forced")
    zoology = build_task("assoc_recall", num_kv_pairs=n)
    forced_baselines = forced.baselines(forced.generate(500, 0))
    zoology_baselines = zoology.baselines(zoology.generate(500, 0))
    assert forced_baselines["elimination"] == pytest.approx(harmonic(n) / n, abs=1e-12)
    assert zoology_baselines["in_context"] == forced_baselines["in_context"] == 1 / n
    assert zoology_baselines["elimination"] == pytest.approx(1 / n, abs=0.005)
    assert zoology_baselines["chance"] == 1 / 128


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_has_baselines_above_chance_and_at_most_one(name: str) -> None:
    task = build_task(name)
    found = task.baselines(task.generate(200, 1))
    assert 0 < found["chance"] < found["in_context"] <= 1
