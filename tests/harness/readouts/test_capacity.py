"""The load curve's readout: n(t) interpolated in log load, and the limit verdict, on curves
built by hand for every verdict: within the tested loads, every load held (right-censored),
below the judging load (left-censored), still rising, and flat at the floor."""

import math

import pytest

from harness.readouts.capacity import (
    BELOW_JUDGING_LOAD,
    CAPACITY_LIMITED,
    FALLS_WITHIN,
    FLOOR_AT_JUDGING_LOAD,
    HOLDS_EVERY_LOAD,
    INTERVAL,
    LEFT,
    NEAR_CEILING,
    NOT_LIMITED,
    RIGHT,
    RISING_BELOW_JUDGING_LOAD,
    RISING_PAST_JUDGING_LOAD,
    TRAINING_LIMITED,
    judged,
    judging_load,
    level_name,
    load_at,
    readout,
    readout_of,
    shown,
    verdict,
)
from harness.readouts.convergence import AT_FLOOR, STILL_RISING, training_state

LOADS = (1, 2, 4, 8, 16, 32, 64)
MQAR_FLOORS = {n: 1 / n for n in LOADS}  # in-context guessing: one of n values
EXAMPLES = dict.fromkeys(LOADS, 300)


def curve(*accs: float) -> dict[int, float]:
    return dict(zip(LOADS, accs, strict=True))


def test_interpolates_in_log_load():
    acc = curve(1, 1, 1, 1.0, 0.8, 0.4, 0.1)
    assert load_at(acc, 0.9) == pytest.approx(math.sqrt(8 * 16))
    assert load_at(acc, 0.5) == pytest.approx(math.exp(math.log(16) + 0.75 * math.log(2)))


def test_a_tested_load_exactly_at_the_level_is_read_there():
    assert load_at(curve(1, 1, 1, 0.9, 0.2, 0.1, 0.0), 0.9) == pytest.approx(8.0)


def test_the_largest_crossing_counts_on_a_curve_that_is_not_monotone():
    assert load_at(curve(1, 0.95, 0.85, 0.95, 0.5, 0.2, 0.1), 0.9) > 8


def test_no_load_at_the_level_reads_none_and_every_load_reads_the_largest():
    assert load_at(curve(0.5, 0.3, 0.2, 0.1, 0.1, 0.0, 0.0), 0.9) is None
    assert load_at(curve(1, 1, 1, 1, 1, 1, 0.95), 0.9) == 64.0


def test_judged_at_the_smallest_load_a_guess_cannot_pass():
    assert judging_load(MQAR_FLOORS) == 2
    assert judging_load({1: 1.0, 2: 0.6, 3: 0.5}) == 3
    assert judging_load({1: 1.0, 2: 0.505, 4: 0.25}) == 2
    assert judging_load({1: 1.0}) is None


def test_not_limited_carries_its_censoring():
    acc = curve(1, 1, 0.99, 0.98, 0.97, 0.95, 0.91)
    assert judged(acc, MQAR_FLOORS, 0.9, "converged") == (NOT_LIMITED, HOLDS_EVERY_LOAD)
    record = readout(acc, MQAR_FLOORS, 0.9, "converged", EXAMPLES)
    assert record["n90"] == 64 and record["n90_censoring"] == RIGHT
    assert record["censored"] == ["n90", "n50"] and shown(record, "n90") == ">=64"


def test_capacity_limited_within_the_tested_loads_has_a_sampling_error():
    acc = curve(1, 0.99, 0.97, 0.93, 0.7, 0.4, 0.2)
    record = readout(acc, MQAR_FLOORS, 0.9, "converged", EXAMPLES)
    assert (record["verdict"], record["why"]) == (CAPACITY_LIMITED, FALLS_WITHIN)
    assert 8 < record["n90"] < 16 and record["n90_censoring"] is None
    assert 0 < record["n90_se"] < 0.2 * record["n90"] and record["n90_se_log"] > 0
    assert shown(record, "n90", with_error=True).startswith(f"{record['n90']:.3g} ± ")


def test_a_fall_within_a_quarter_of_the_largest_load_is_read_between_its_two_loads():
    # holds 0.9 to 32 pairs and falls before 64: n90 ~ 55 >= 0.75 x 64, near the ceiling;
    # converged, the fall was seen: between 32 and 64, the loads tested, not a lower bound
    acc = curve(1, 1, 0.99, 0.98, 0.98, 0.97, 0.88)
    record = readout(acc, MQAR_FLOORS, 0.9, "converged", EXAMPLES)
    assert (record["verdict"], record["why"]) == (CAPACITY_LIMITED, NEAR_CEILING)
    assert record["n90_censoring"] == INTERVAL and shown(record, "n90") == "[32, 64)"
    assert (record["n90_low"], record["n90_high"]) == (32, 64) and 48 < record["n90"] < 64
    # a run not judged converged: the task, not the state, may hold it down there
    unknown = readout(acc, MQAR_FLOORS, 0.9, None, EXAMPLES)
    assert unknown["n90_censoring"] == RIGHT and shown(unknown, "n90").startswith(">=")
    # the same fall below the last quarter reads a value, and says so
    lower = readout(curve(1, 1, 0.99, 0.95, 0.7, 0.4, 0.2), MQAR_FLOORS, 0.9, "converged")
    assert lower["why"] == FALLS_WITHIN and lower["n90_censoring"] is None


def test_converged_above_the_floor_below_the_threshold_is_left_censored():
    # converged at 0.70 at 2 pairs, where a guess scores 0.5: the state ran out below 2
    acc = curve(0.85, 0.70, 0.49, 0.29, 0.15, 0.08, 0.04)
    record = readout(acc, MQAR_FLOORS, 0.9, "converged", EXAMPLES)
    assert (record["verdict"], record["why"]) == (CAPACITY_LIMITED, BELOW_JUDGING_LOAD)
    assert record["n90"] == 2.0 and record["n90_censoring"] == LEFT
    assert shown(record, "n90") == "<2" and record["n50"] == pytest.approx(3.9, abs=0.1)


def test_the_same_curve_still_rising_is_training_limited():
    acc = curve(0.85, 0.70, 0.49, 0.29, 0.15, 0.08, 0.04)
    assert judged(acc, MQAR_FLOORS, 0.9, STILL_RISING) == (
        TRAINING_LIMITED,
        RISING_BELOW_JUDGING_LOAD,
    )
    assert judged(acc, MQAR_FLOORS, 0.9, None) == (TRAINING_LIMITED, RISING_BELOW_JUDGING_LOAD)


def test_a_flat_curve_at_the_floor_is_labelled_so_never_still_rising():
    acc = {n: 1 / n + 0.01 for n in LOADS}
    for training in ("converged", STILL_RISING, AT_FLOOR, None):
        assert judged(acc, MQAR_FLOORS, 0.9, training) == (TRAINING_LIMITED, FLOOR_AT_JUDGING_LOAD)
    flat = {"converged": False, "val_curve": [[250, 0.15], [2000, 0.16]], "floor": 0.156}
    assert training_state(flat) == AT_FLOOR
    rising = {**flat, "val_curve": [[250, 0.15], [2000, 0.6]]}
    assert training_state(rising) == STILL_RISING
    assert training_state({"converged": True}) == "converged"


def test_above_the_floor_only_by_its_sampling_error_counts_as_the_floor():
    acc = curve(0.95, 0.56, 0.3, 0.15, 0.08, 0.04, 0.02)  # 0.06 above 1/2
    assert verdict(acc, MQAR_FLOORS, 0.9, "converged", dict.fromkeys(LOADS, 20)) == TRAINING_LIMITED
    assert verdict(acc, MQAR_FLOORS, 0.9, "converged", EXAMPLES) == CAPACITY_LIMITED


def test_a_run_still_rising_reads_a_lower_bound():
    acc = curve(1, 0.99, 0.97, 0.93, 0.7, 0.4, 0.2)
    record = readout(acc, MQAR_FLOORS, 0.9, STILL_RISING, EXAMPLES)
    assert record["verdict"] == TRAINING_LIMITED and record["n90_censoring"] == RIGHT
    assert record["why"] == RISING_PAST_JUDGING_LOAD
    assert shown(record, "n90").startswith(">=") and record["n90_se"] is not None


def test_the_threshold_is_read_and_named():
    acc = curve(1, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)
    assert verdict(acc, MQAR_FLOORS, 0.9, "converged") == CAPACITY_LIMITED
    assert readout(acc, MQAR_FLOORS, 0.9, "converged")["n90_censoring"] == LEFT
    assert readout(acc, MQAR_FLOORS, 0.8, "converged")["n90"] == pytest.approx(4.0)
    assert (level_name(0.9), level_name(0.8), level_name(0.95)) == ("n90", "n80", "n95")


def test_nothing_to_judge_when_every_tested_load_can_be_guessed():
    assert verdict({1: 1.0}, {1: 1.0}, 0.9) is None


def test_a_load_without_answers_counts_as_below():
    acc = {**curve(1, 1, 1, 1, 1, 1, 1), 2: float("nan")}
    assert verdict(acc, MQAR_FLOORS, 0.9, "converged") == TRAINING_LIMITED


def test_readout_of_a_record_uses_its_training_and_test_size():
    metrics = {
        f"test/acc_by/num_kv_pairs/{n}": a
        for n, a in curve(0.85, 0.7, 0.49, 0.29, 0.15, 0.08, 0.04).items()
    }
    metrics.update({f"test/baseline_by/num_kv_pairs/{n}/in_context": 1 / n for n in LOADS})
    stored = readout_of(metrics, 0.9, {"converged": True}, num_test=2100)
    assert stored["load"] == "num_kv_pairs" and stored["verdict"] == CAPACITY_LIMITED
    assert stored["n50_se"] > 0
    assert readout_of(metrics, 0.9)["verdict"] == TRAINING_LIMITED  # training unknown
