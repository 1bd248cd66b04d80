"""Which mixers sit at equal state: two mixers' cells compare on what their states hold when
their stacks' rank bounds R (the bindings a linear read-out of the state recovers exactly,
docs/background.md, section 17) are equal and their floats per layer lie within `APART` of
each other, or, where R is not a mixer's knob (RetNet: one R at every head count), when their
floats alone do (`linear_d2` holds 132 floats at R 4, `deltanet_k2` 128).

`conf/state_size/sizes.csv` gives each `conf/state_size/` option's mixer, floats per layer
and R under the `capacity_law` preset (one layer of Zoology's block, d_model 64, T = 64): a
committed table, so that `python run.py --help` groups the options without building a model;
`python tests/state_sizes.py` writes it and `tests/harness/config/test_state_sizes.py` checks
it against the mixers."""

import csv
from collections.abc import Iterable
from typing import NamedTuple

from harness.config.compose import CONF_DIR

APART = 0.1
"""Floats within this fraction of the larger count are equal."""
TABLE = CONF_DIR / "state_size" / "sizes.csv"


class Size(NamedTuple):
    """A state: its name (an option, a cell's mixer), mixer, floats per layer and R."""

    name: str
    model: str
    floats: float | None
    rank_bound: float | None


def near(a: float, b: float) -> bool:
    return abs(a - b) <= APART * max(a, b)


def fixed_bound(sizes: Iterable[Size]) -> set[str]:
    """The mixers whose R is not their knob: one R over several floats."""
    floats, bounds = {}, {}
    for s in sizes:
        floats.setdefault(s.model, set()).add(s.floats)
        bounds.setdefault(s.model, set()).add(s.rank_bound)
    return {m for m in floats if len(floats[m]) > 1 and len(bounds[m]) == 1}


def equal_state(a: Size, b: Size, fixed: set[str]) -> bool:
    """Different mixers at equal state (the module docstring); `fixed`: `fixed_bound`'s."""
    if a.model == b.model or None in (a.floats, b.floats) or not near(a.floats, b.floats):
        return False
    known = None not in (a.rank_bound, b.rank_bound)
    return (known and a.rank_bound == b.rank_bound) or bool({a.model, b.model} & fixed)


def committed() -> list[Size]:
    """The options' sizes from `TABLE`."""
    with TABLE.open() as handle:
        return [
            Size(r["option"], r["model"], float(r["floats"]), float(r["rank_bound"]))
            for r in csv.DictReader(handle)
        ]


def equal_state_lines(sizes: list[Size] | None = None) -> str:
    """`R 4, 128-136 floats: deltanet_k2, gdn2_k2, linear_d2, ...`, one line a group of
    options of two mixers or more at equal state, and the options whose R is not the knob."""
    sizes = committed() if sizes is None else sizes
    fixed = fixed_bound(sizes)
    groups: list[list[Size]] = []
    by_bound = lambda s: (s.rank_bound, s.floats)  # noqa: E731
    varied = sorted((s for s in sizes if s.model not in fixed), key=by_bound)
    for s in varied:
        last = groups[-1][0] if groups else None
        if last and last.rank_bound == s.rank_bound and near(last.floats, s.floats):
            groups[-1].append(s)
        else:
            groups.append([s])
    lines = []
    for group in (g for g in groups if len({s.model for s in g}) > 1):
        low, high = group[0].floats, group[-1].floats
        floats = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        names = ", ".join(sorted(s.name for s in group))
        lines.append(f"  R {group[0].rank_bound:g}, {floats} floats: {names}")
    for model in sorted(fixed):
        mine = sorted((s for s in sizes if s.model == model), key=lambda s: s.floats)
        listed = ", ".join(f"{s.name} {s.floats:g}" for s in mine)
        lines.append(f"  {model} (R {mine[0].rank_bound:g} at every size) by floats: {listed}")
    return "\n".join(lines)
