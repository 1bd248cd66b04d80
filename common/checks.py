"""Parameter checks that raise one clear `ValueError`: parameter name, value, what is allowed."""

import difflib
from numbers import Integral, Real
from typing import Any


class InvalidValue(ValueError):
    """`<name>=<value> is invalid: must be <allowed>`, with its parts as fields (so that the
    harness names the full key, `model.feature_dim`, without reading the message)."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        super().__init__(f"{name}={value!r} is invalid: must be {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


def require(ok: bool, name: str, value: Any, allowed: str) -> None:
    """Raise `InvalidValue` (a `ValueError`: "<name>=<value> is invalid: must be <allowed>")
    unless `ok`."""
    if not ok:
        raise InvalidValue(name, value, allowed)


def is_int(value: Any) -> bool:
    """`value` is an integer (int, numpy integer), not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """`value` is a real number (int, float, numpy scalar), not a bool; NaN counts (compare it)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def require_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    """`value` is an int in [low, high] (high=None: no upper bound)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    ok = is_int(value) and value >= low and (high is None or value <= high)
    require(ok, name, value, allowed)


def require_choice(name: str, value: Any, choices: list[str] | tuple[str, ...]) -> None:
    """`value` is one of `choices`; the refusal lists them, and names the nearest to a
    mistyped string (difflib's closest match)."""
    allowed = f"one of {', '.join(map(str, choices))}"
    if value not in choices and isinstance(value, str):
        close = difflib.get_close_matches(value, [str(c) for c in choices], n=1)
        allowed += f" (did you mean {close[0]}?)" if close else ""
    require(value in choices, name, value, allowed)
