"""Verdicts between mixers at equal state (docs/background.md, "Capacity and learnability"):
every two cells of different mixers trained under one protocol (task, step budget, layers) at
equal state (`harness.config.state_sizes.equal_state`: equal rank bound R with floats within
10%, or floats within 10% where R is not a mixer's knob), compared on capacity, the n90 of
each cell's best restart (`harness.readouts.restarts`).

A capacity is read as a range of n: an exact readout n exp(+-2 se_log) (its sampling error,
`harness.readouts.readout_error`; a point without one), [0, n) below the judging load
(left-censored), [n, inf) a lower bound (right-censored), [low, high) between two tested
loads (interval-censored). Of two cells A and B:

- `A holds more` where A's range lies wholly above B's (and `B holds more` the other way);
- `no difference within their readouts' errors` where the ranges overlap and both are closed;
- `undecided` otherwise, with why for each side that is open or unread (not learned: its best
  restart training-limited; a lower bound: still rising or holding every tested load; below
  the judging load) and the setting whose rerun decides it."""

import math
from itertools import combinations

import pandas as pd

from harness.config.state_sizes import Size, equal_state, fixed_bound
from harness.readouts import capacity as readouts
from harness.readouts.restarts import DESIGN_SEEDS
from harness.report.capacity_law import GROWS, PROTOCOL, capacity_shown
from harness.report.frame import missing
from harness.report.look import model_order

OWN, REFERENCE = "own", "reference"
"""A cell's `source`: this sweep's records, or a committed reference's (`references`)."""
SPREAD = 2.0
"""An exact readout's range: this many standard errors of its log either side."""
NO_DIFFERENCE = "no difference within their readouts' errors"
UNDECIDED = "undecided"
COLUMNS = ("model_a", "model_b", "state", "verdict", "why", "source", "capacity_a", "capacity_b")
"""`pairs.csv`'s columns, in order."""
CEILING = (readouts.HOLDS_EVERY_LOAD, readouts.NEAR_CEILING)


def span(cell: pd.Series) -> tuple[float, float] | None:
    """The cell's capacity as a range of n (the module docstring); None where unread."""
    n, kind = cell.get("capacity_n90"), cell.get("capacity_censoring")
    if not cell.get("capacity_readable") or missing(n):
        return None
    if kind == readouts.LEFT:
        return 0.0, n
    if kind == readouts.RIGHT:
        return n, math.inf
    if kind == readouts.INTERVAL:
        return float(cell["capacity_low"]), float(cell["capacity_high"])
    se_log = 0.0 if missing(cell.get("capacity_se_log")) else float(cell["capacity_se_log"])
    return n * math.exp(-SPREAD * se_log), n * math.exp(SPREAD * se_log)


def shown_capacity(cell: pd.Series) -> str:
    """`8.19 (7.65-8.77 at 2 se)`, `<2`, `>=16`, `[48, 64)`, or `not learned`."""
    found, text = span(cell), capacity_shown(cell)
    exact = found and missing(cell.get("capacity_censoring")) and found[0] < found[1]
    return f"{text} ({found[0]:.3g}-{found[1]:.3g} at {SPREAD:g} se)" if exact else text


def open_side(cell: pd.Series) -> str | None:
    """Why a cell's capacity does not decide a comparison, and the rerun that would; None
    where its readout is closed (exact or between two tested loads)."""
    steps, kind, text = cell.get("trainer.max_steps"), cell.get("capacity_censoring"), "more steps"
    more_steps = text if missing(steps) else f"trainer.max_steps={2 * int(steps)}"
    if not cell.get("restarts"):
        return f"no restart at the design's seeds {DESIGN_SEEDS}: rerun with seed=0,1,2"
    if span(cell) is None:
        why = readouts.WHY.get(cell.get("capacity_why"), "no finished restart")
        learned = f"{cell.get('learned', 0)} of {cell['restarts']} restarts"
        return f"not learned ({learned}; best: {why}): rerun with {more_steps} or more seeds"
    text = shown_capacity(cell)
    if kind == readouts.LEFT:
        return f"below the judging load ({text}): only a wider state reads it"
    if kind == readouts.RIGHT and cell.get("capacity_why") in CEILING:
        load = 2 * math.ceil(float(cell["capacity_n90"]))
        load = f"capacity.max_load={load}" if cell.get("capacity.protocol") else f"loads to {load}"
        return f"a lower bound ({text}, at the largest tested loads): rerun it with {load}"
    if kind == readouts.RIGHT:
        return f"a lower bound ({text}, still rising): rerun it with {more_steps}"
    return None


def compared(a: pd.Series, b: pd.Series, level: str = "n90") -> tuple[str, str]:
    """(verdict, why) of cells `a` and `b` (the module docstring), their readouts named
    `level` (`n80` at threshold 0.8)."""
    span_a, span_b = span(a), span(b)
    values = f"{level} {shown_capacity(a)} against {shown_capacity(b)}"
    if span_a and span_b:
        if span_a[0] >= span_b[1] or span_b[0] >= span_a[1]:
            more = a if span_a[0] >= span_b[1] else b
            return f"{more['mixer']} holds more", f"{values}: the ranges do not overlap"
        closed = readouts.LEFT not in (a.get("capacity_censoring"), b.get("capacity_censoring"))
        if closed and math.inf not in (span_a[1], span_b[1]):
            return NO_DIFFERENCE, f"{values}: within {SPREAD:g} standard errors"
    why_a, why_b = open_side(a), open_side(b)
    if why_a == why_b:
        return UNDECIDED, f"{values}; both {why_a}"
    reasons = [f"{c['mixer']} {why}" for c, why in ((a, why_a), (b, why_b)) if why]
    return UNDECIDED, f"{values}; " + "; ".join(reasons)


def size_of(cell: pd.Series) -> Size:
    floats, bound = cell.get("state.mixer_floats_per_layer"), cell.get("state.rank_bound_stack")
    family = cell.get("family")
    return Size(cell["mixer"], cell["mixer"] if missing(family) else family, floats, bound)


def state_text(a: Size, b: Size) -> str:
    """`R 8; 256 and 264 floats`, or `256 and 264 floats (R 64 and 8)` where R differs."""
    floats = f"{a.floats:g}" if a.floats == b.floats else f"{a.floats:g} and {b.floats:g}"
    if a.rank_bound == b.rank_bound:
        return f"R {a.rank_bound:g}; {floats} floats"
    return f"{floats} floats (R {a.rank_bound:g} and {b.rank_bound:g})"


def pair_rows(cells: pd.DataFrame, level: str = "n90") -> list[dict]:
    """One row of `COLUMNS` per pair of cells at equal, fixed state (none whose state grows with
    T, as a KV cache does) under one protocol, at least one of them this sweep's (`source`
    own); a pair with a reference cell has `source` reference; `level` names the readout."""
    if cells.empty:
        return []
    own = pd.Series(OWN, index=cells.index)
    cells = cells.assign(source=cells.get("source", own).fillna(OWN)).reset_index(drop=True)
    cells = cells.dropna(subset=["state.mixer_floats_per_layer"])
    cells = cells[cells.get(GROWS, pd.Series(False, index=cells.index)).ne(True)]
    order = sorted(cells.index, key=lambda i: model_order(cells.at[i, "mixer"]))
    fixed = fixed_bound([size_of(c) for _, c in cells.iterrows()])
    rows = []
    for a, b in ((cells.loc[i], cells.loc[j]) for i, j in combinations(order, 2)):
        same = all(str(a.get(k)) == str(b.get(k)) for k in PROTOCOL)
        sources = {a["source"], b["source"]}
        if same and OWN in sources and equal_state(size_of(a), size_of(b), fixed):
            source = REFERENCE if REFERENCE in sources else OWN
            state = state_text(size_of(a), size_of(b))
            shown = (a["mixer"], b["mixer"], state, *compared(a, b, level), source)
            shown += (shown_capacity(a), shown_capacity(b))
            rows.append(dict(zip(COLUMNS, shown, strict=True)))
    return rows


def pair_lines(rows: list[dict]) -> list[str]:
    """The console's and the page's closing lines, one a pair."""
    return [
        f"At equal state ({r['state']}), {r['model_a']} against {r['model_b']}: "
        f"{r['verdict']}: {r['why']}."
        for r in rows
    ]
