"""A task's load (MQAR pairs, noisy_recall pairs, selective_copy tokens, needle distractors,
copy length) written as one integer or as a range, and the distribution each example's load is
drawn from (docs/background.md, pitfall 3: accuracy against load is where a fixed state shows
its capacity).

A load is written `n` (every example at n) or `[low, high]` (inclusive: each example draws its
own load). The distribution over the range (`load_dist`):

- `uniform`: P(n) = 1 / (high - low + 1);
- `log_uniform`: the mass of [n, n + 1) under the density 1 / x on [low, high + 1), i.e.
  P(n) = log((n + 1) / n) / log((high + 1) / low) (needs low >= 1): as many examples per
  doubling of the load;
- `log2`: the powers of two within [low, high], plus low and high, equally likely (a test grid);

or explicit proportions (`load_weights`: {load: weight > 0}, loads within the range, e.g.
Zoology's shares), which then replace `load_dist`.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.checks import is_int, is_real, require, require_choice

LOAD_DISTS = ("uniform", "log_uniform", "log2")

Load = int | list[int]
"""A load as written: an integer, or a range [low, high]."""


def is_range(value: Any) -> bool:
    """`value` is written as a range (a 2-element list or tuple), not as one integer."""
    return isinstance(value, Sequence) and not isinstance(value, str)


def load_bounds(name: str, value: Any) -> tuple[int, int]:
    """(low, high) of a load written as an integer n (n, n) or a range [low, high]; otherwise
    the `ValueError` of `common.checks` naming `name`."""
    if is_int(value):
        return int(value), int(value)
    ok = is_range(value) and len(value) == 2 and all(is_int(v) for v in value)
    require(
        ok and value[0] <= value[1],
        name,
        value,
        "an integer or a range [low, high] of two integers with low <= high",
    )
    return int(value[0]), int(value[1])


def normalised(value: Any) -> Load:
    """The load as stored in a task's params: an int, or the list [low, high]."""
    return [int(v) for v in value] if is_range(value) else int(value)


def describe_task_load(name: str, value: Any) -> str:
    """`name=value` for an error message about a bound the load sets: with a range, the
    largest load is the one that must fit (`num_kv_pairs=[4, 64] (largest load 64)`)."""
    if is_range(value):
        return f"{name}={normalised(value)} (largest load {load_bounds(name, value)[1]})"
    return f"{name}={value}"


def require_load(name: str, value: Any, low: int, high: int | None, given: str) -> None:
    """Every load of `value` (already a valid integer or range) lies in [low, high]
    (high=None: no upper bound); `given` names the parameters that set the bounds."""
    first, last = load_bounds(name, value)
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    allowed = f"a range [low, high] with both {bound}" if is_range(value) else f"an integer {bound}"
    ok = first >= low and (high is None or last <= high)
    shown = normalised(value) if is_range(value) else value
    require(ok, name, shown, f"{allowed} {given}".rstrip())


def _key_as_int(key: Any) -> int | None:
    """A weight's key as an int (a JSON round trip turns int keys into strings), else None."""
    if is_int(key):
        return int(key)
    if isinstance(key, str) and key.strip().lstrip("-").isdigit():
        return int(key)
    return None


@dataclass(frozen=True)
class LoadDistribution:
    """The loads of a task and their probabilities: `probabilities` maps each load of the
    support (ascending) to P(load); one load means every example carries it."""

    low: int
    high: int
    probabilities: dict[int, float]

    @classmethod
    def build(cls, name: str, value: Any, load_dist: Any, load_weights: Any) -> "LoadDistribution":
        """Check `load_dist` and `load_weights` against the load `value` of parameter `name`
        (a valid integer or range) and build the distribution."""
        low, high = load_bounds(name, value)
        require_choice("load_dist", load_dist, LOAD_DISTS)
        if load_weights is not None:
            return cls(low, high, _weights(name, value, low, high, load_dist, load_weights))
        if load_dist == "uniform":
            p = 1.0 / (high - low + 1)
            return cls(low, high, {n: p for n in range(low, high + 1)})
        if load_dist == "log_uniform":
            require(
                low >= 1,
                "load_dist",
                load_dist,
                f"uniform or log2 for {name}={normalised(value)} (log-uniform needs loads >= 1)",
            )
            total = math.log((high + 1) / low)
            return cls(low, high, {n: math.log((n + 1) / n) / total for n in range(low, high + 1)})
        powers = {1 << k for k in range(max(high, 1).bit_length()) if low <= 1 << k <= high}
        support = sorted(powers | {low, high})
        return cls(low, high, {n: 1.0 / len(support) for n in support})

    @property
    def support(self) -> np.ndarray:
        """int64 [K]: the loads that occur, ascending."""
        return np.fromiter(self.probabilities, dtype=np.int64)

    def draw(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """int64 [rows]: one load per example. One load draws nothing from `rng` (a task with
        a single load generates the same data as before ranges existed); the uniform range
        is `rng.integers(low, high + 1)`, any other distribution one `rng.choice`."""
        support = self.support
        if support.size == 1:
            return np.full(rows, support[0], dtype=np.int64)
        p = np.fromiter(self.probabilities.values(), dtype=np.float64)
        if support.size == self.high - self.low + 1 and np.all(p == p[0]):
            return rng.integers(self.low, self.high + 1, size=rows)
        return rng.choice(support, size=rows, p=p / p.sum())


def _weights(
    name: str, value: Any, low: int, high: int, load_dist: str, weights: Any
) -> dict[int, float]:
    """`load_weights` normalised to probabilities, ascending by load, after the checks."""
    require(
        is_range(value),
        "load_weights",
        weights,
        f"null for {name}={value} (weights need a range [low, high] of loads)",
    )
    require(
        load_dist == "uniform",
        "load_dist",
        load_dist,
        "uniform (the default) when load_weights is given: the weights are the distribution",
    )
    allowed = f"a mapping {{load: weight > 0}} with every load in [{low}, {high}] for {name}"
    require(isinstance(weights, Mapping) and len(weights) > 0, "load_weights", weights, allowed)
    parsed: dict[int, float] = {}
    for key, weight in weights.items():
        load = _key_as_int(key)
        ok = load is not None and low <= load <= high and load not in parsed
        ok = ok and is_real(weight) and math.isfinite(weight) and weight > 0
        require(ok, "load_weights", dict(weights), f"{allowed} (not {key!r}: {weight!r})")
        parsed[load] = float(weight)
    total = sum(parsed.values())
    return {load: parsed[load] / total for load in sorted(parsed)}


def stored_weights(weights: Mapping | None) -> dict[int, float] | None:
    """`load_weights` as a task stores it (int keys, ascending, the weights as given)."""
    if weights is None:
        return None
    return {_key_as_int(k): float(v) for k, v in sorted(weights.items(), key=lambda kv: int(kv[0]))}


def require_key_load(num_kv_pairs: Any, vocab_size: int) -> int:
    """Check the number of key-value pairs of a recall task whose keys are the tokens
    [1, vocab_size // 2) (an integer or a range, `require_load`); returns the largest."""
    _, most = load_bounds("num_kv_pairs", num_kv_pairs)
    require_load(
        "num_kv_pairs",
        num_kv_pairs,
        1,
        vocab_size // 2 - 1,
        f"for vocab_size={vocab_size} (keys are the tokens [1, vocab_size // 2))",
    )
    return most
