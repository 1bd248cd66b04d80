"""The capacity law's nulls (`harness.readouts.proportional_law`): the rank bound's exponent
across a sweep's cells, and the proportional law with an overhead, on synthetic laws."""

import math

import numpy as np
import pytest

from harness.readouts.censored_law import EXACT, Design, Observation, maximise
from harness.readouts.proportional_law import fit_proportional_law, rank_bound_exponent


def test_the_rank_bound_exponent_of_linear_attention_is_one() -> None:
    cells = [(2 * (d * 32 + d), 2 * d) for d in (2, 3, 4, 6, 8, 12, 16)]  # H (D d_v + D), H D
    assert rank_bound_exponent(cells) == pytest.approx(1.0)
    square = [(2 * d * d, 2 * d) for d in (8, 16, 32)]  # a square state: bound ~ floats^(1/2)
    assert rank_bound_exponent(square) == pytest.approx(0.5)
    assert rank_bound_exponent([(264, 8), (264, 8)]) is None


def proportional(rng: np.random.Generator, c: float, overhead: float) -> list:
    sizes = (200.0, 300.0, 400.0, 600.0, 800.0, 1200.0)
    return [
        Observation(f, EXACT, c * (f - overhead) * math.exp(rng.normal(0, 0.05)), cell=str(f))
        for f in sizes
        for _ in range(4)
    ]


def test_the_proportional_law_finds_its_overhead_and_beats_the_power_law_on_its_data() -> None:
    rng = np.random.default_rng(4)
    data = proportional(rng, c=0.02, overhead=120.0)
    law = fit_proportional_law(data)
    assert law.overhead == pytest.approx(120.0, abs=15.0)
    assert law.c == pytest.approx(0.02, rel=0.1)
    _, power_log_l = maximise(Design(data))
    assert law.log_likelihood > power_log_l + 2  # its own shape fits better
    assert law(1000.0) == pytest.approx(law.c * (1000.0 - law.overhead))
