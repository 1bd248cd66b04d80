"""Parameter checks that raise one clear `ValueError`: parameter name, value, what is allowed."""

from numbers import Integral
from typing import Any


def require(ok: bool, name: str, value: Any, allowed: str) -> None:
    """Raise `ValueError("<name>=<value> is invalid: must be <allowed>")` unless `ok`."""
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: must be {allowed}")


def require_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    """`value` is an int in [low, high] (high=None: no upper bound)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    is_int = isinstance(value, Integral) and not isinstance(value, bool)
    require(is_int and value >= low and (high is None or value <= high), name, value, allowed)


def require_choice(name: str, value: Any, choices: list[str] | tuple[str, ...]) -> None:
    require(value in choices, name, value, f"one of {', '.join(map(str, choices))}")
