"""A plateau's gain is judged against the validation set's noise: the standard-error bound
holds statistically, and a gain inside the noise is no rise."""

import numpy as np
import pytest

from harness.readouts.convergence import required_gain, standard_error, still_rising


@pytest.mark.parametrize("answers_per_example", [1, 8, 32])
def test_the_bound_covers_the_spread_of_a_validation_accuracy(answers_per_example: int) -> None:
    """Validation sets of 500 examples whose answers share a per-example skill (correlated,
    as one lookup circuit serves an example's answers): the spread of the measured accuracy
    over 2,000 resampled sets stays within the bound sqrt(p (1 - p) / n)."""
    rng = np.random.default_rng(0)
    n, p = 500, 0.86
    skill = rng.beta(2 * p, 2 * (1 - p), size=(2000, n))  # per-example accuracy, mean p
    hits = rng.binomial(answers_per_example, skill) / answers_per_example
    measured = hits.mean(axis=1)
    assert measured.mean() == pytest.approx(p, abs=0.005)
    assert measured.std() <= standard_error(p, n) * 1.05  # 5%: the std's sampling error


def test_a_gain_inside_the_noise_is_no_rise() -> None:
    curve = [[100, 0.5], [200, 0.84], [300, 0.84], [400, 0.86], [500, 0.85]]
    # the last third (steps 400, 500) gains +0.02 over 0.84: above min_delta, inside 2 SE of a
    # 500-example set (0.033)
    assert still_rising(curve, min_delta=0.01)
    assert not still_rising(curve, min_delta=0.01, num_examples=500)
    assert still_rising(curve, min_delta=0.01, num_examples=100_000)


def test_the_required_gain_is_twice_the_noise_or_min_delta_without_a_size() -> None:
    assert required_gain(0.86, 0.01, None) == 0.01
    assert required_gain(0.86, 0.01, 500) == pytest.approx(2 * (0.86 * 0.14 / 500) ** 0.5)
    assert required_gain(0.999, 0.01, 500) == pytest.approx(2 * (0.999 * 0.001 / 500) ** 0.5)
