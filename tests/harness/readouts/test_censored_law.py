"""The censored capacity law (`harness.readouts.censored_law`) against what it estimates:
seeded synthetic laws n = a floats^b exp(N(0, sigma^2)) read as the presets read them (left-
censored below the judging load, right-censored at the largest tested load), repeated: b and a
unbiased within Monte-Carlo error, the gradient the likelihood's. The interval's coverage is
tests/harness/readouts/test_law_coverage.py. Seeded; a few seconds."""

import math

import numpy as np
import pytest

from harness.readouts.censored_law import (
    EXACT,
    INTERVAL,
    LEFT,
    RIGHT,
    Design,
    Observation,
    fit_censored_law,
    maximise,
)
from harness.readouts.tobit_likelihood import likelihood_and_gradient

TRUE_A, TRUE_B, SIGMA = 0.0024, 1.25, 0.15
SIZES = (132, 198, 264, 396, 528, 792, 1056)  # linear attention at D = 2 ... 16
JUDGED, LARGEST = 2.0, 16.0


def synthetic(rng: np.random.Generator, seeds: int = 5, censor: bool = True) -> list:
    """`seeds` runs per state size, each read as the readouts are: < 2 left-censored, >= 16
    right-censored, exact between."""
    out = []
    for floats in SIZES:
        for n in TRUE_A * floats**TRUE_B * np.exp(rng.normal(0, SIGMA, seeds)):
            kind = EXACT
            if censor and n < JUDGED:
                kind, n = LEFT, JUDGED
            elif censor and n >= LARGEST:
                kind, n = RIGHT, LARGEST
            out.append(Observation(float(floats), kind, float(n), cell=str(floats)))
    return out


def test_the_gradient_is_the_likelihoods() -> None:
    rng = np.random.default_rng(1)
    data = synthetic(rng)
    data.append(Observation(300.0, INTERVAL, 2.0, high=3.0, cell="300"))
    design = Design(data)
    theta = np.array([-5.5, 1.1, -1.6])
    value, grad = likelihood_and_gradient(theta, design)
    step = 1e-6
    for k in range(3):
        e = np.zeros(3)
        e[k] = step
        numeric = (
            likelihood_and_gradient(theta + e, design)[0]
            - likelihood_and_gradient(theta - e, design)[0]
        ) / (2 * step)
        assert grad[k] == pytest.approx(numeric, rel=1e-4, abs=1e-4)
    assert math.isfinite(value)


@pytest.mark.parametrize("censor", [True, False], ids=["censored", "uncensored"])
def test_b_and_a_are_unbiased(censor: bool) -> None:
    rng = np.random.default_rng(20260)
    fits = [maximise(Design(synthetic(rng, censor=censor)))[0] for _ in range(300)]
    log_as, bs = np.array([f[0] for f in fits]), np.array([f[1] for f in fits])
    assert abs(bs.mean() - TRUE_B) < 4 * bs.std(ddof=1) / math.sqrt(len(bs))
    assert abs(log_as.mean() - math.log(TRUE_A)) < 4 * log_as.std(ddof=1) / math.sqrt(len(bs))


def test_dropping_the_censored_runs_biases_b() -> None:
    """What the fit keeps matters: least squares on the exact runs alone flattens the law
    (the smallest states' runs that fell below 2 pairs are the low ones)."""
    rng = np.random.default_rng(3)
    dropped, kept = [], []
    for _ in range(100):
        data = synthetic(rng)
        exact = [o for o in data if o.kind == EXACT]
        x, y = np.log([o.floats for o in exact]), np.log([o.value for o in exact])
        dropped.append(np.polyfit(x, y, 1)[0])
        kept.append(maximise(Design(data))[0][1])
    assert abs(np.mean(kept) - TRUE_B) < 0.02
    assert np.mean(dropped) < TRUE_B - 0.05


def test_no_law_without_readings_at_two_state_sizes() -> None:
    one = [Observation(264.0, EXACT, 2.4), Observation(264.0, EXACT, 2.6)]
    assert fit_censored_law([*one, Observation(528.0, RIGHT, 16.0)]) is None
    with pytest.raises(ValueError, match="kind"):
        Observation(264.0, "sideways", 2.0)
