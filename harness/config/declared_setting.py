"""One declared setting (`harness.config.settings`): its role, and what a key allows, read
off its declaration (type, range or choices, default) and checked against a value."""

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from common.checks import is_int, is_real, require

IDENTITY = "identity"
"""A setting that changes what a run measures: in the config hash, a column of the report."""
PLUMBING = "plumbing"
"""A setting that says where and how a run is carried out, every value giving the same
outcome (threads, devices, logging, a mixer's computation mode): neither in the config hash
nor a column of the report, which lists it apart."""
READOUT = "readout"
"""A setting that says how a record is read (the load curve's threshold): not in the config
hash, since the report reads a record anew under another value."""


def setting(
    default: Any,
    *,
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    none: str | None = None,
    note: str = "",
    check: typing.Callable[[Any], bool] | None = None,
    allowed: str | None = None,
    choices: typing.Callable[[], tuple] | None = None,
    needs_import: bool = False,
    role: str = IDENTITY,
) -> Any:
    """A declared field: its `default`, its range (`low <= value`, `above < value`,
    `value <= high`), what null means where null is allowed (`none`), a `note` on the
    allowed values; or its own `check` with the `allowed` text it refuses with; or the
    function that lists a framework's `choices` (as a `Literal`, read when checked;
    `needs_import`: only by importing the framework); and its `role` (`IDENTITY`, `PLUMBING`
    or `READOUT`)."""
    meta = dict(low=low, above=above, high=high, none=none, note=note)
    meta.update(check=check, choices=choices, needs_import=needs_import, role=role)
    return field(default=default, metadata={**meta, "allowed": allowed})


@dataclass(frozen=True)
class Setting:
    """One declared key: its full dotted name, type, default and what it allows."""

    key: str
    kind: Any
    default: Any
    meta: dict

    @property
    def role(self) -> str:
        """`IDENTITY` unless declared otherwise."""
        return self.meta.get("role", IDENTITY)

    @property
    def nullable(self) -> bool:
        return type(None) in typing.get_args(self.kind)

    @property
    def base(self) -> Any:
        """The type without `| None`; a framework's `choices` as a `Literal` of them."""
        if self.meta.get("choices") is not None:
            return Literal[self.meta["choices"]()]
        args = [a for a in typing.get_args(self.kind) if a is not type(None)]
        if typing.get_origin(self.kind) is Literal or len(args) != 1:
            return self.kind
        return args[0]

    def range_text(self) -> str:
        low, above, high = (self.meta.get(k) for k in ("low", "above", "high"))
        if high is not None:
            opening = "(" if above is not None else "["
            text = f"in {opening}{above if above is not None else low}, {high}]"
        elif above is not None:
            text = f"> {above}"
        elif low is not None:
            text = f">= {low}"
        else:
            text = ""
        note = self.meta.get("note")
        return f"{text} ({note})" if text and note else text or note or ""

    @property
    def allowed(self) -> str:
        """What the key allows, as the refusal says it."""
        if self.meta.get("allowed"):
            return self.meta["allowed"]
        base, rng = self.base, self.range_text()
        if typing.get_origin(base) is Literal:
            text = f"one of {', '.join(dict.fromkeys(map(str, typing.get_args(base))))}"
        elif base is bool:
            text = "true or false"
        elif base is int:
            text = f"an integer {rng}".rstrip()
        elif base is float:
            text = f"a number {rng}".rstrip()
        else:
            text = "a string (quoted if it reads as a number)"
        if self.nullable:
            text = f"null ({self.meta['none']}) or {text}"
        return text

    def type_ok(self, value: Any) -> bool:
        base = self.base
        if typing.get_origin(base) is Literal:
            return any(value == c and type(value) is type(c) for c in typing.get_args(base))
        if base is bool:
            return isinstance(value, bool)
        if base is int:
            return is_int(value)
        if base is float:
            return is_real(value)
        return isinstance(value, str)

    def range_ok(self, value: Any) -> bool:
        low, above, high = (self.meta.get(k) for k in ("low", "above", "high"))
        return (
            (low is None or value >= low)
            and (above is None or value > above)
            and (high is None or value <= high)
        )

    def check(self, value: Any) -> None:
        """Raise `ValueError("<key>=<value> is invalid: must be <allowed>")` unless allowed.

        A number of the right type out of range is refused with the range alone
        (`optim.lr=0 is invalid: must be > 0`)."""
        own = self.meta.get("check")
        if own is not None:
            require(own(value), self.key, value, self.allowed)
            return
        if value is None and self.nullable:
            return
        require(self.type_ok(value), self.key, value, self.allowed)
        plain_number = self.base is float and not self.nullable
        allowed = self.range_text() if plain_number else self.allowed
        require(self.range_ok(value), self.key, value, allowed)
