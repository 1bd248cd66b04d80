"""The law's interval against what it estimates (`harness.readouts.censored_law.slope_interval`):
300 simulated sweeps of 3 seeds a width (`studies.law_coverage.sweep`), read as the capacity
protocol reads them (below the judging load 2: left-censored; within a quarter of the largest
tested load 2R: right-censored), the nominal 90% interval of b covering the true exponent at
least 88% of the time; with a random effect per width (a law that misses a step) as well; and
the lack-of-fit test holding its size when the law is right. Seeded."""

import numpy as np
import pytest

from harness.readouts.censored_law import EXACT, LEFT, RIGHT, Observation, fit_censored_law
from harness.readouts.drop_one_width import held_out, predicted_share
from studies.law_coverage import BOUNDS, TRUE_B, sweep

SWEEPS = 300


def coverage(width_sd: float, bounds=BOUNDS, seed: int = 0) -> tuple[float, list]:
    rng = np.random.default_rng(seed)
    laws = [fit_censored_law(sweep(rng, width_sd, bounds)) for _ in range(SWEEPS)]
    return float(np.mean([law.b_low <= TRUE_B <= law.b_high for law in laws])), laws


@pytest.mark.parametrize("bounds", [BOUNDS, (2, 4, 6, 8, 12)], ids=["4 widths", "5 widths"])
def test_the_90_percent_interval_covers_the_true_exponent(bounds) -> None:
    covered, laws = coverage(0.0, bounds)
    assert covered >= 0.88, covered
    assert sum(law.counts[RIGHT] for law in laws) > SWEEPS / 2  # the ceiling censors runs
    if min(bounds) == 2:
        assert sum(law.counts[LEFT] for law in laws) > SWEEPS / 4  # so does the floor


def test_the_interval_covers_when_the_widths_scatter_about_the_law() -> None:
    covered, _ = coverage(0.15, seed=1)
    assert covered >= 0.88, covered


def test_the_lack_of_fit_test_holds_its_size_when_the_law_is_right() -> None:
    _, laws = coverage(0.0, seed=2)
    ps = [law.lack_of_fit.p for law in laws if law.lack_of_fit is not None]
    assert len(ps) > 0.9 * SWEEPS
    rejected = np.mean(np.array(ps) < 0.1)
    assert rejected < 0.1 + 4 * (0.1 * 0.9 / len(ps)) ** 0.5, rejected  # censoring aside


def test_the_lack_of_fit_test_finds_a_step() -> None:
    """DeltaNet's published T = 64 shape: key dim 3 reads ~3.5 pairs, key dim 4 ~14."""
    rng = np.random.default_rng(3)
    found = 0
    for _ in range(100):
        data = []
        for bound, level in ((4, 2.5), (6, 3.5), (8, 14.0), (12, 20.0)):
            for n in level * np.exp(rng.normal(0, 0.13, 3)):
                data.append(Observation(float(bound), EXACT, float(n), cell=str(bound)))
        found += fit_censored_law(data).lack_of_fit.p < 0.05
    assert found > 90


def test_a_law_predicts_the_width_it_has_not_seen() -> None:
    rng = np.random.default_rng(4)
    inside = judged = 0
    for _ in range(60):
        share = predicted_share(held_out(sweep(rng, 0.0, (2, 4, 6, 8, 12))))
        inside, judged = inside + share[0], judged + share[1]
    assert inside / judged >= 0.85, inside / judged
