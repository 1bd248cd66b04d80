"""The capacity law's estimator (`harness.readouts.power_law`) against what it estimates: seeded
synthetic n90 = a * floats^b * exp(noise), repeated; b unbiased within Monte-Carlo error and
its 90% interval covering the true b in 90% of repetitions (within a binomial margin)."""

import math

import numpy as np
import pytest

from harness.readouts.power_law import fit_power_law

TRUE_A, TRUE_B = 0.05, 0.5
REPEATS = 2000


def synthetic(rng: np.random.Generator, sizes: list[float], seeds: int, sigma: float) -> list:
    """(floats, n90) with log n90 = log a + b log floats + N(0, sigma^2), `seeds` per size."""
    floats = np.repeat(sizes, seeds)
    n90 = TRUE_A * floats**TRUE_B * np.exp(rng.normal(0, sigma, floats.size))
    return list(zip(floats.tolist(), n90.tolist(), strict=True))


DESIGNS = {
    "8 sizes x 2 seeds": ([2.0**e for e in range(8, 16)], 2, 0.25),
    "3 sizes x 1 seed (1 dof)": ([2.0**10, 2.0**12, 2.0**14], 1, 0.3),
}


@pytest.mark.parametrize("design", DESIGNS.values(), ids=DESIGNS.keys())
def test_b_is_unbiased_and_its_90_percent_interval_covers_90_percent(design) -> None:
    sizes, seeds, sigma = design
    rng = np.random.default_rng(20240)
    fits = [fit_power_law(synthetic(rng, sizes, seeds, sigma)) for _ in range(REPEATS)]
    bs = np.array([f.b for f in fits])
    log_as = np.array([math.log(f.a) for f in fits])
    # b and log a are unbiased: their means within 4 Monte-Carlo standard errors
    assert abs(bs.mean() - TRUE_B) < 4 * bs.std(ddof=1) / math.sqrt(REPEATS)
    assert abs(log_as.mean() - math.log(TRUE_A)) < 4 * log_as.std(ddof=1) / math.sqrt(REPEATS)
    # the spread of b is the textbook sigma / sqrt(S_xx)
    x = np.log(np.repeat(sizes, seeds))
    expected_sd = sigma / math.sqrt(((x - x.mean()) ** 2).sum())
    assert bs.std(ddof=1) == pytest.approx(expected_sd, rel=0.08)
    # coverage: binomial(REPEATS, 0.9), within 4 standard deviations
    covered = sum(f.b_low <= TRUE_B <= f.b_high for f in fits)
    margin = 4 * math.sqrt(REPEATS * 0.9 * 0.1)
    assert abs(covered - 0.9 * REPEATS) < margin, covered / REPEATS
    assert all(f.n == len(sizes) * seeds and f.level == 0.9 for f in fits)


def test_the_interval_widens_with_fewer_degrees_of_freedom() -> None:
    """The t quantile, not the normal one: at 1 dof the 90% half-width is 6.31 se, not 1.64."""
    points = [(2.0**10, 10.0), (2.0**12, 25.0), (2.0**14, 35.0)]
    fit = fit_power_law(points)
    x = np.log([p[0] for p in points])
    y = np.log([p[1] for p in points])
    b, log_a = np.polyfit(x, y, 1)
    s = math.sqrt(((y - log_a - b * x) ** 2).sum() / 1)
    se = s / math.sqrt(((x - x.mean()) ** 2).sum())
    assert fit.b == pytest.approx(b)
    assert fit.b_high - fit.b == pytest.approx(6.3138 * se, rel=1e-4)
    assert fit.b - fit.b_low == pytest.approx(6.3138 * se, rel=1e-4)


def test_exact_power_law_is_recovered_exactly() -> None:
    points = [(f, 3.0 * f**0.75) for f in (128.0, 512.0, 2048.0, 2048.0, 8192.0)]
    fit = fit_power_law(points)
    assert fit.a == pytest.approx(3.0, rel=1e-9)
    assert fit.b == pytest.approx(0.75, rel=1e-12)
    assert fit.b_low == pytest.approx(0.75, rel=1e-9)
    assert fit.b_high == pytest.approx(0.75, rel=1e-9)
    assert fit.floats_range == (128.0, 8192.0)
    assert fit(4096.0) == pytest.approx(3.0 * 4096**0.75)
    assert fit.shown() == "0.75 [0.75, 0.75]"


@pytest.mark.parametrize(
    "points",
    [
        [],
        [(64.0, 4.0), (256.0, 8.0)],  # two points: no residual degree of freedom
        [(64.0, 4.0), (64.0, 5.0), (64.0, 6.0)],  # one state size: no slope
    ],
)
def test_no_fit_without_three_points_and_two_sizes(points) -> None:
    assert fit_power_law(points) is None


def test_non_positive_values_are_refused() -> None:
    with pytest.raises(ValueError, match="points"):
        fit_power_law([(64.0, 4.0), (128.0, 0.0), (256.0, 9.0)])
