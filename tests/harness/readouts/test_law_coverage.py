"""The law's interval against what it estimates (`harness.readouts.censored_law.slope_interval`),
on simulated sweeps built like the committed ones (`studies.law_coverage`: restarts that learn
or level off, chosen on validation, censored as the protocol censors them, read by
`harness.readouts.restarts.cells`): the nominal 90% interval of b covers the true exponent at
least 88% of the time; it is narrower than 0.5 on a 5 x 5 sweep with no lack of fit; it moves
continuously with the data, and a width censored instead of read never narrows it. Seeded."""

import math

import numpy as np
import pytest

from harness.readouts.censored_law import EXACT, LEFT, RIGHT, Observation, fit_censored_law
from harness.readouts.proportional_law import fit_proportional_law
from harness.readouts.restarts import CAPACITY, TYPICAL
from studies.law_coverage import DESIGNS, cell_laws, restart_rows, simulate

SWEEPS = 200
LINEAR, DELTANET, PUBLISHED, SCATTER, EIGHT_THOUSAND, FIVE_BY_FIVE = DESIGNS


@pytest.mark.parametrize(
    ("design", "estimand"),
    [(LINEAR, CAPACITY), (DELTANET, CAPACITY), (PUBLISHED, CAPACITY), (LINEAR, TYPICAL)],
    ids=["linear capacity", "deltanet capacity", "published capacity", "linear typical"],
)
def test_the_90_percent_interval_covers_the_true_exponent(design, estimand) -> None:
    found = simulate(design, SWEEPS, rules=(estimand,))[estimand]
    assert found["coverage"] >= 0.88, found
    assert found["fitted"] > 0.95, found


def test_the_interval_on_a_five_by_five_sweep_is_narrower_than_half() -> None:
    """5 widths x 5 seeds, true b = 1, seed spread 0.12, no lack of fit: the narrowest width
    below the judging load, the widest past the largest tested load."""
    found = simulate(FIVE_BY_FIVE, 100, rules=(CAPACITY, TYPICAL))
    for estimand in (CAPACITY, TYPICAL):
        assert found[estimand]["width"] < 0.5, (estimand, found[estimand])
        assert found[estimand]["coverage"] >= 0.85, (estimand, found[estimand])


def law_of(readings: dict[float, tuple[str, float]]) -> tuple[float, float]:
    law = fit_censored_law(
        [Observation(r, kind, n, cell=str(r)) for r, (kind, n) in readings.items()]
    )
    return law.b_low, law.b_high


READINGS = {4: (LEFT, 2.0), 6: (EXACT, 2.1), 8: (EXACT, 2.6), 12: (EXACT, 3.7), 16: (EXACT, 5.3)}


def test_the_interval_moves_continuously_with_the_data() -> None:
    """No switch: moving one reading by small steps moves the interval by small steps."""
    ends = []
    for value in np.linspace(3.4, 4.2, 41):
        ends.append(law_of({**READINGS, 12: (EXACT, float(value))}))
    steps = np.abs(np.diff(np.array(ends), axis=0))
    assert steps.max() < 0.1, steps.max()


def test_a_width_censored_instead_of_read_never_narrows_the_interval() -> None:
    low, high = law_of(READINGS)
    for r in (6, 16):
        kind = LEFT if r == 6 else RIGHT
        value = 2.2 if r == 6 else 5.0
        censored_low, censored_high = law_of({**READINGS, r: (kind, value)})
        assert not censored_high - censored_low < high - low, r


def test_two_readings_give_no_interval() -> None:
    """A line through two readings is fitted exactly: nothing says how far widths scatter."""
    low, high = law_of({4: (LEFT, 2.0), 8: (EXACT, 2.6), 16: (EXACT, 5.3), 32: (RIGHT, 24.0)})
    assert math.isnan(low) and math.isnan(high)


def test_the_capacity_of_restarts_that_split_estimates_the_state_law() -> None:
    """Half the restarts level off at a fraction of the capacity: the typical restart's law
    moves with them, the best restart's stays on the state's law (median b within 0.1)."""
    rng = np.random.default_rng(5)
    bs = [cell_laws(restart_rows(rng, DELTANET))[CAPACITY].b for _ in range(60)]
    assert abs(float(np.median(bs)) - DELTANET.b) < 0.1, np.median(bs)


def test_the_line_predicts_a_new_width_within_its_interval() -> None:
    """n90 = 0.5 (R - 2) with a restart spread of 0.1 on log scale, read at R = 4-16: the
    primary line's 90% interval for one new readout at R = 24 holds it in at least 85% of
    simulated sweeps (`ProportionalLaw.prediction_interval`)."""
    rng = np.random.default_rng(6)
    inside = 0
    for _ in range(150):
        data = [
            Observation(float(r), EXACT, float(0.5 * (r - 2) * np.exp(rng.normal(0, 0.1))))
            for r in (4, 6, 8, 12, 16)
            for _ in range(4)
        ]
        low, high = fit_proportional_law(data).prediction_interval(24.0, 1)
        inside += low <= 0.5 * 22 * np.exp(rng.normal(0, 0.1)) <= high
    assert inside / 150 >= 0.85, inside / 150
