"""The load curve's readout: n(t) interpolated in log load, and the limit verdict, on curves
built by hand for every verdict."""

import math

import pytest

from harness.readouts.capacity import (
    CAPACITY_LIMITED,
    NOT_LIMITED,
    TRAINING_LIMITED,
    judging_load,
    load_at,
    readout,
    verdict,
)

LOADS = (1, 2, 4, 8, 16, 32, 64)
MQAR_FLOORS = {n: 1 / n for n in LOADS}  # in-context guessing: one of n values


def curve(*accs: float) -> dict[int, float]:
    return dict(zip(LOADS, accs, strict=True))


def test_interpolates_in_log_load():
    # 1.0 at 8, 0.8 at 16: 0.9 is half-way in log load, at sqrt(8 * 16)
    acc = curve(1, 1, 1, 1.0, 0.8, 0.4, 0.1)
    assert load_at(acc, 0.9) == pytest.approx(math.sqrt(8 * 16))
    # 0.5 between 16 (0.8) and 32 (0.4): three quarters of the way
    assert load_at(acc, 0.5) == pytest.approx(math.exp(math.log(16) + 0.75 * math.log(2)))


def test_a_tested_load_exactly_at_the_level_is_read_there():
    assert load_at(curve(1, 1, 1, 0.9, 0.2, 0.1, 0.0), 0.9) == pytest.approx(8.0)


def test_the_largest_crossing_counts_on_a_curve_that_is_not_monotone():
    acc = curve(1, 0.95, 0.85, 0.95, 0.5, 0.2, 0.1)
    assert load_at(acc, 0.9) > 8  # the dip at 4 does not end the readout


def test_no_load_at_the_level_reads_none_and_every_load_reads_the_largest():
    assert load_at(curve(0.5, 0.3, 0.2, 0.1, 0.1, 0.0, 0.0), 0.9) is None
    assert load_at(curve(1, 1, 1, 1, 1, 1, 0.95), 0.9) == 64.0


def test_judged_at_the_smallest_load_a_guess_cannot_pass():
    assert judging_load(MQAR_FLOORS) == 2  # 1 pair: the only value in context is the answer
    assert judging_load({1: 1.0, 2: 0.6, 3: 0.5}) == 3
    assert judging_load({1: 1.0, 2: 0.505, 4: 0.25}) == 2  # 1/2 measured a point above
    assert judging_load({1: 1.0}) is None


def test_not_limited():
    acc = curve(1, 1, 0.99, 0.98, 0.97, 0.95, 0.91)
    assert verdict(acc, MQAR_FLOORS) == NOT_LIMITED
    record = readout(acc, MQAR_FLOORS)
    assert record["n90"] == 64 and record["censored"] == ["n90", "n50"]


def test_capacity_limited():
    acc = curve(1, 0.99, 0.97, 0.93, 0.7, 0.4, 0.2)
    assert verdict(acc, MQAR_FLOORS) == CAPACITY_LIMITED
    record = readout(acc, MQAR_FLOORS)
    assert 8 < record["n90"] < 16 and 16 < record["n50"] < 32
    assert record["censored"] == [] and record["judged_at"] == 2


def test_training_limited_even_when_small_loads_are_guessed():
    # 1.0 at one pair is free (in-context guessing); 0.6 at two pairs has not learned binding
    acc = curve(1.0, 0.6, 0.4, 0.3, 0.2, 0.1, 0.05)
    assert verdict(acc, MQAR_FLOORS) == TRAINING_LIMITED
    assert readout(acc, MQAR_FLOORS)["verdict"] == TRAINING_LIMITED


def test_the_threshold_is_a_setting():
    acc = curve(1, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)
    assert verdict(acc, MQAR_FLOORS, threshold=0.9) == TRAINING_LIMITED
    assert verdict(acc, MQAR_FLOORS, threshold=0.8) == CAPACITY_LIMITED
    assert readout(acc, MQAR_FLOORS, threshold=0.8)["n90"] == pytest.approx(4.0)


def test_nothing_to_judge_when_every_tested_load_can_be_guessed():
    assert verdict({1: 1.0}, {1: 1.0}) is None


def test_a_load_without_answers_counts_as_below():
    acc = {**curve(1, 1, 1, 1, 1, 1, 1), 2: float("nan")}
    assert verdict(acc, MQAR_FLOORS) == TRAINING_LIMITED
