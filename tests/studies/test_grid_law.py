"""The state grid's models (`studies.grid_law`) against what they estimate: least
squares where nothing is censored, the value exponent's interval covering the truth in
simulated censored grids, and the model choice finding the model that made the data. Seeded."""

import math

import numpy as np
import pytest
from scipy import stats

from harness.readouts.censored_law import EXACT, LEFT, RIGHT, Observation
from studies.grid_law import GridRun, fit_grid_laws, fit_two_exponents

HEADS = 2
KEY_DIMS, VALUE_DIMS = (2, 4, 8), (8, 32, 128)


RANK, FLOATS_LIKE = (0.5, 1.0, 0.0), (0.4, 0.5, 0.5)
"""(c, a, b): readouts of 2-8 pairs, and of 2.3-18."""


def grid(
    rng: np.random.Generator, law: tuple, seeds: int = 3, censor: bool = True
) -> list[GridRun]:
    """A 3 x 3 grid of one-layer runs, n = c R^a d_v^b exp(e), e ~ N(0, 0.15^2) (`law` =
    (c, a, b)); read as the protocol reads them: left-censored below 2 pairs, right-censored
    within a quarter of the largest tested load 2R."""
    c, a, b = law
    runs = []
    for d in KEY_DIMS:
        bound = HEADS * d
        for dv in VALUE_DIMS:
            for n in c * bound**a * dv**b * np.exp(rng.normal(0, 0.15, seeds)):
                kind, value = EXACT, float(n)
                if censor and n < 2:
                    kind, value = LEFT, 2.0
                elif censor and n >= 1.5 * bound:
                    kind, value = RIGHT, 1.5 * bound
                observation = Observation(float(bound), kind, value, cell=f"{d}x{dv}")
                runs.append(GridRun(observation, float(dv), float(HEADS * d * dv)))
    return runs


def test_uncensored_fit_is_least_squares_with_its_exact_interval() -> None:
    runs = grid(np.random.default_rng(0), (0.4, 1.0, 0.3), seeds=1, censor=False)
    law = fit_two_exponents(runs)
    x = np.array([[1, math.log(r.observation.floats), math.log(r.value_dim)] for r in runs])
    y = np.log([r.observation.value for r in runs])
    coef, rss, *_ = np.linalg.lstsq(x, y, rcond=None)
    assert law.a == pytest.approx(coef[1], abs=1e-4)
    assert law.b == pytest.approx(coef[2], abs=1e-4)
    se = math.sqrt(rss[0] / (len(y) - 3) * np.linalg.inv(x.T @ x)[2, 2])
    half = stats.t.ppf(0.95, len(y) - 3) * se
    assert law.lack_of_fit is None  # one seed a cell: nothing to judge the cells by
    assert (law.b_low, law.b_high) == pytest.approx((coef[2] - half, coef[2] + half), rel=1e-3)


@pytest.mark.parametrize("law", [RANK, FLOATS_LIKE], ids=["rank", "floats-like"])
def test_the_90_percent_interval_covers_the_value_exponent(law: tuple) -> None:
    rng = np.random.default_rng(1)
    grids = [grid(rng, law) for _ in range(150)]
    fits = [fit_two_exponents(runs) for runs in grids]
    covered = np.mean([fit.b_low <= law[2] <= fit.b_high for fit in fits])
    assert covered >= 0.86, covered
    censored = sum(r.observation.kind != EXACT for runs in grids for r in runs)
    assert censored > 150  # the floor or the ceiling censors runs


def test_the_choice_finds_the_model_that_made_the_data() -> None:
    rng = np.random.default_rng(2)
    rank = [fit_grid_laws(grid(rng, RANK)) for _ in range(20)]
    floats = [fit_grid_laws(grid(rng, FLOATS_LIKE)) for _ in range(20)]
    assert sum(laws.chosen != "both" for laws in rank) >= 14
    assert np.mean([laws.p_value for laws in rank]) > 0.2
    assert sum(laws.chosen in ("floats", "both") for laws in floats) >= 18
    assert all(laws.p_value < 0.01 for laws in floats)
    assert all(len(laws.b_without_cell) == 9 for laws in floats)


def test_not_identified_without_two_value_dims_read() -> None:
    runs = [r for r in grid(np.random.default_rng(3), RANK) if r.value_dim == 32]
    assert fit_two_exponents(runs) is None


def test_no_choice_with_one_model_fitted() -> None:
    """One key dim: the rank and both models are not identified, the floats model is."""
    runs = [r for r in grid(np.random.default_rng(4), FLOATS_LIKE) if r.observation.floats == 8]
    laws = fit_grid_laws(runs)
    assert list(laws.aics) == ["floats"]
    assert laws.chosen is None and laws.close() == []
