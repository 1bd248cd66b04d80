"""A power law fitted to capacity against state: n90 = a * floats^b (docs/background.md,
section 17).

Least squares on the logarithms: with x_i = log floats_i and y_i = log n90_i (i = 1..n),

    b = S_xy / S_xx,   log a = ybar - b xbar,
    S_xx = sum (x_i - xbar)^2,   S_xy = sum (x_i - xbar)(y_i - ybar),

the residual variance s^2 = sum (y_i - log a - b x_i)^2 / (n - 2), the standard error of b
se = s / sqrt(S_xx), and its two-sided interval at `level`

    b +- t_{(1 + level) / 2, n - 2} * se

(Student's t with n - 2 degrees of freedom). Where log n90 = log a + b log floats + e with
independent e ~ N(0, sigma^2), b is unbiased and the interval covers the true b with
probability `level`. Seeds of one state size are separate points (they share x)."""

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.9
"""The confidence level of the interval the report prints."""


@dataclass(frozen=True)
class PowerLaw:
    """n90 = a * floats^b, fitted on `n` points; [b_low, b_high] is b's interval at `level`."""

    a: float
    b: float
    b_low: float
    b_high: float
    n: int
    level: float = LEVEL
    floats_range: tuple[float, float] = (math.nan, math.nan)
    """The smallest and largest state size fitted (where the law was measured)."""

    def __call__(self, floats: float) -> float:
        return self.a * floats**self.b

    def shown(self) -> str:
        """`0.52 [0.41, 0.63]`."""
        return f"{self.b:.2f} [{self.b_low:.2f}, {self.b_high:.2f}]"


def fit_power_law(points: Iterable[tuple[float, float]], level: float = LEVEL) -> PowerLaw | None:
    """Fit log n90 = log a + b log floats to `points` (floats, n90), both > 0 (module
    docstring); None with fewer than 3 points or fewer than 2 distinct state sizes, where
    b or its interval is undefined."""
    pairs = [(float(f), float(n)) for f, n in points]
    if any(not (f > 0 and n > 0) for f, n in pairs):
        raise ValueError(f"points: every floats and n90 must be > 0, got {pairs}")
    if len(pairs) < 3 or len({f for f, _ in pairs}) < 2:
        return None
    xs = [math.log(f) for f, _ in pairs]
    ys = [math.log(n) for _, n in pairs]
    count = len(pairs)
    x_mean, y_mean = sum(xs) / count, sum(ys) / count
    s_xx = sum((x - x_mean) ** 2 for x in xs)
    s_xy = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
    b = s_xy / s_xx
    log_a = y_mean - b * x_mean
    residual = sum((y - log_a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    se = math.sqrt(residual / (count - 2) / s_xx)
    half = float(stats.t.ppf((1 + level) / 2, count - 2)) * se
    floats = [f for f, _ in pairs]
    return PowerLaw(
        a=math.exp(log_a),
        b=b,
        b_low=b - half,
        b_high=b + half,
        n=count,
        level=level,
        floats_range=(min(floats), max(floats)),
    )
