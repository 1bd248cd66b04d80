"""Associative recall with re-bound keys: MQAR whose context binds some keys again later to a
new value; a query asks for the key's latest value (docs/tasks.md, `overwrite_recall`).

Layout of one example (n = num_kv_pairs, T = seq_len, V = vocab_size, S = (T - 2n) // 2):

    [f] slot slot slot ... slot | k_a f  k_b f  ...  k_z f
    `-- context: S two-token slots`   `-- n queries: 2n tokens --'

- n distinct keys of [1, V/2). r = round(rebound_fraction * n) of them (halves rounded up)
  are re-bound: key j is bound R_j + 1 times, R_j = `rebinds` (with a range [low, high],
  drawn uniformly per re-bound key); the other n - r keys are bound once;
- a binding is `key value` in one slot. The B = n + sum_j R_j values of an example are
  distinct tokens of [V/2, V): a re-bound key's new value always differs from its previous
  one (else the stale answer would equal the fresh one), and from all its earlier ones, so
  answering a re-bound key's first value is always wrong;
- a re-bound key's first and last bindings stand D slots apart (2 D tokens between their key
  tokens; distances are even), with min_distance <= 2 D <= max_distance (None: the context)
  and D >= R_j (its R_j - 1 middle bindings lie strictly between, uniformly among the free
  slots there); the r first bindings need r slots at least D before the end, so
  min_distance <= 2 (S - r). The re-bound keys are placed one after another, each at a pair
  of free slots drawn uniformly among all pairs that fit (so a short D, which fits in more
  places, is more frequent: P(D) is proportional to S - D in an empty context); then the
  once-bound keys, uniformly among the free slots left. A row where a key finds no pair is
  drawn again;
- the queries: each key once, in a uniformly random order, each followed by filler; the label
  at a query key is the value of its latest binding, every other label is -100;
- every other token (free slots, the one leading token when T is odd, the token after a
  query) is filler: uniform over [1, V) minus the example's keys, so filler never looks like
  a binding or a query. No answer is written after the context.

Positions carry no answer: the keys, their places and the query order are random, so a reader
that does not look up the queried key can do no better than guess among the values still
bound (`current`, 1/n).

Slices (per query position, -1 elsewhere): `rebound` 1 if the queried key was re-bound, else
0; `rebinds` R_j of the queried key (0 if bound once); `distance` 2 D bucketed to the power of
two at or below it (2, 4, 8, 16, ... tokens; 0 if bound once); with a range of loads,
`num_kv_pairs` [N], the example's n.

The load is `num_kv_pairs`: an integer, or a range [low, high] with `load_dist` /
`load_weights` (tasks/load.py), each example at its own n (the largest must fit:
T >= 2n + 2B).

Baselines (`baselines`): `chance` 1 / (V - V/2); `in_context` 1 / B, a uniform guess among the
values written in the context; `current` 1 / n, a uniform guess among the n values still
bound (those whose key is not written again later: it compares the context's keys with each
other, never with the query); `stale` (n - r) / n, the queried key's first value, right on
every once-bound key and on no re-bound one. `stale` is no binding-free strategy: it binds
and never replaces. It is among the baselines so that the floor, the best of them, is what a
model reaches without replacing a binding.

Failure: a state that only adds (eq. 8, and eq. 10 with gamma near 1) holds the sum of a
re-bound key's values, so unless its writes grow with position a read returns old and new
with about equal weight: near 1 / (R_j + 1) on re-bound keys. Decay (eq. 10, 11) favours
the newer binding only by its recency, at the cost of fading once-bound keys as well; the
delta rule (docs/background.md, section 8) replaces the value at the key and keeps the rest.
"""

import math

import numpy as np

from common.checks import is_real, require, require_int
from tasks.base import Task, guess_accuracy, require_int_given, token_sets
from tasks.load import (
    Load,
    describe_task_load,
    load_bounds,
    normalised,
    require_key_load,
    require_load,
)
from tasks.registry import register
from tasks.sampling import BITMAP_BUDGET, row_chunks, sample_distinct, sample_excluding

MAX_DRAWS = 1000
"""Rounds of drawing again the rows whose re-bound keys found no pair of slots."""
LAYOUT_BUDGET = 1 << 22
"""Elements of one block's [rows, distances, slots] arrays of feasible pairs."""


def rebound_count(num_keys: int, fraction: float) -> int:
    """r = round(fraction * num_keys), halves rounded up: how many keys are re-bound."""
    return int(math.floor(fraction * num_keys + 0.5))


def distance_bucket(tokens: np.ndarray) -> np.ndarray:
    """int64: the power of two at or below `tokens` (> 0), 0 where `tokens` is 0."""
    bucket = np.zeros_like(tokens)
    positive = tokens > 0
    bucket[positive] = 1 << (np.log2(tokens[positive]).astype(np.int64))
    return bucket


@register("overwrite_recall")
class OverwriteRecall(Task):
    """MQAR where some keys are bound again later; the answer is the latest value."""

    load_param = "num_kv_pairs"

    def __init__(
        self,
        vocab_size: int = 256,
        seq_len: int = 64,
        num_kv_pairs: Load = 8,
        rebound_fraction: float = 0.5,
        rebinds: Load = 1,
        min_distance: int = 2,
        max_distance: int | None = None,
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, 4)
        most = require_key_load(num_kv_pairs, vocab_size)
        ok = is_real(rebound_fraction) and 0 <= rebound_fraction <= 1
        require(ok, "rebound_fraction", rebound_fraction, "a float in [0, 1]")
        _, most_rebinds = load_bounds("rebinds", rebinds)
        require_load("rebinds", rebinds, 1, None, "")
        r = rebound_count(most, rebound_fraction)
        bindings = most + r * most_rebinds
        given = (
            f"for {describe_task_load('num_kv_pairs', num_kv_pairs)}, rebound_fraction="
            f"{rebound_fraction} and rebinds={normalised(rebinds)} ({bindings} bindings"
        )
        require_int_given(
            "vocab_size", vocab_size, 2 * bindings - 1, None, f"{given}, each a new value)"
        )
        require_int_given(
            "seq_len",
            seq_len,
            2 * most + 2 * bindings,
            None,
            f"{given} and {most} queries, 2 tokens each)",
        )
        slots = (seq_len - 2 * most) // 2
        require_int_given(
            "min_distance",
            min_distance,
            2,
            2 * (slots - r) if r else None,
            f"for seq_len={seq_len} and {describe_task_load('num_kv_pairs', num_kv_pairs)} "
            f"({r} re-bound keys: each first binding at least min_distance / 2 slots before "
            f"the end of the context's {slots} two-token slots)",
        )
        if max_distance is not None:
            least = 2 * max(math.ceil(min_distance / 2), most_rebinds)
            require_int_given(
                "max_distance",
                max_distance,
                least,
                None,
                f"or null for min_distance={min_distance} and rebinds={normalised(rebinds)} "
                "(distances are even; a key re-bound R times spans at least 2 R tokens)",
            )
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.rebound_fraction = float(rebound_fraction)
        self.rebinds = normalised(rebinds)
        self.min_distance = int(min_distance)
        self.max_distance = None if max_distance is None else int(max_distance)
        self._init_load(num_kv_pairs, load_dist, load_weights)

    position_slices = ("rebound", "rebinds", "distance")

    @property
    def num_rebound(self) -> int:
        """r: the keys bound more than once (at a single load)."""
        return rebound_count(self.num_kv_pairs, self.rebound_fraction)

    @property
    def num_slots(self) -> int:
        """S: two-token slots of the context (at a single load)."""
        return (self.seq_len - 2 * self.num_kv_pairs) // 2

    @property
    def context_start(self) -> int:
        """Position of the first slot: 1 when T is odd (one leading filler token), else 0."""
        return (self.seq_len - 2 * self.num_kv_pairs) % 2

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return self.vocab_size // 2, self.vocab_size

    def _bindings(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The slots' key and value tokens [N, S] and, per query, [N, n, S]: which slots bind
        the queried key (read from the inputs alone: filler is never one of the keys)."""
        start, end = self.context_start, self.seq_len - 2 * self.num_kv_pairs
        keys, values = inputs[:, start:end:2], inputs[:, start + 1 : end : 2]
        asked = inputs[:, end::2]
        return keys, values, keys[:, None, :] == asked[:, :, None]

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The B values written in the context: the slots that bind one of the example's keys."""
        out = np.zeros((inputs.shape[0], self.vocab_size), dtype=bool)
        for rows in row_chunks(inputs.shape[0], self._chunk()):
            _, values, binds = self._bindings(inputs[rows])
            out[rows] = token_sets(values, self.vocab_size, binds.any(axis=1))
        return out

    def _chunk(self) -> int:
        """Rows per block of the [rows, n, S] and [rows, V] arrays of the baselines."""
        per_row = max(self.num_kv_pairs * self.num_slots, self.vocab_size)
        return max(1, BITMAP_BUDGET // per_row)

    def _baselines(self, data: dict[str, np.ndarray]) -> dict[str, float]:
        """`chance`, `in_context` (1 / B), `current` (1 / n) and `stale` ((n - r) / n)."""
        inputs, labels = data["inputs"], data["labels"]
        n, num = self.num_kv_pairs, inputs.shape[0]
        current = np.zeros((num, self.vocab_size), dtype=bool)
        stale = np.empty((num, n), dtype=bool)
        for rows in row_chunks(num, self._chunk()):
            _, values, binds = self._bindings(inputs[rows])
            first = np.argmax(binds, axis=2)
            last = binds.shape[2] - 1 - np.argmax(binds[:, :, ::-1], axis=2)
            current[rows] = token_sets(np.take_along_axis(values, last, axis=1), self.vocab_size)
            answers = labels[rows, self.seq_len - 2 * n :: 2]
            stale[rows] = np.take_along_axis(values, first, axis=1) == answers
        return {
            **super()._baselines(data),
            "current": guess_accuracy(current, labels),
            "stale": float(stale.mean()),
        }

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Write one chunk of rows, all at this task's single load n."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        n, r, half = self.num_kv_pairs, self.num_rebound, self.vocab_size // 2
        low, high = load_bounds("rebinds", self.rebinds)
        keys = 1 + sample_distinct(rng, rows, half - 1, n)  # keys[:, :r] are re-bound
        values = half + sample_distinct(rng, rows, self.vocab_size - half, n + r * high)
        counts = np.zeros((rows, n), dtype=np.int64)  # R_j, 0 for a once-bound key
        counts[:, :r] = rng.integers(low, high + 1, size=(rows, r))
        # slots[i, j, t]: the slot of key j's binding t in time order (-1: none)
        slots, spans = self._layout(rng, counts)
        inputs[:] = sample_excluding(rng, (rows, length), 1, self.vocab_size, keys)
        # binding t of key j takes value column j (t = 0) or n + j * high + t - 1
        column = n + np.arange(n)[:, None] * high + np.arange(high + 1)[None, :] - 1
        column[:, 0] = np.arange(n)
        row, j, t = np.nonzero(slots >= 0)
        at = self.context_start + 2 * slots[row, j, t]
        inputs[row, at] = keys[row, j]
        inputs[row, at + 1] = values[row, column[j, t]]
        # the queries: key order[:, i] at position T - 2n + 2i
        order = np.argsort(rng.random((rows, n)), axis=1)
        asked = length - 2 * n + 2 * np.arange(n)
        inputs[:, asked] = np.take_along_axis(keys, order, axis=1)
        latest = np.take_along_axis(values, column[order, np.take_along_axis(counts, order, 1)], 1)
        out["labels"][:, asked] = latest
        rebinds = np.take_along_axis(counts, order, axis=1)
        out["rebound"][:, asked] = rebinds > 0
        out["rebinds"][:, asked] = rebinds
        out["distance"][:, asked] = distance_bucket(2 * np.take_along_axis(spans, order, axis=1))

    def _layout(
        self, rng: np.random.Generator, counts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Slots [rows, n, max R + 1] of every binding in time order (-1: none) and each key's
        span D [rows, n] (0 if bound once), drawn as the docstring says; rows whose re-bound
        keys found no pair are drawn again (at most `MAX_DRAWS` rounds)."""
        rows, n = counts.shape
        slots = np.full((rows, n, int(counts.max(initial=0)) + 1), -1, dtype=np.int64)
        spans = np.zeros((rows, n), dtype=np.int64)
        pending = np.arange(rows)
        for _ in range(MAX_DRAWS):
            if not pending.size:
                return slots, spans
            s, d, ok = self._layout_block(rng, counts[pending], slots.shape[2])
            slots[pending[ok]], spans[pending[ok]] = s[ok], d[ok]
            pending = pending[~ok]
        raise ValueError(
            f"min_distance={self.min_distance} and max_distance={self.max_distance} leave "
            f"too few ways to place {self.num_rebound} re-bound keys in {self.num_slots} slots: "
            "lower min_distance, or raise max_distance or seq_len"
        )

    def _layout_block(
        self, rng: np.random.Generator, counts: np.ndarray, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One draw of `_layout` for every row of `counts`, in blocks bounded by
        `LAYOUT_BUDGET`; also returns which rows succeeded."""
        rows, n = counts.shape
        size = self.num_slots
        shortest = max(1, math.ceil(self.min_distance / 2))
        longest = size - 1 if self.max_distance is None else min(size - 1, self.max_distance // 2)
        gaps = np.arange(shortest, max(longest, shortest - 1) + 1)  # D in slots
        slots = np.full((rows, n, width), -1, dtype=np.int64)
        spans = np.zeros((rows, n), dtype=np.int64)
        ok = np.ones(rows, dtype=bool)
        free = np.ones((rows, size), dtype=bool)
        place = np.arange(size)
        ends = place[None, :] + gaps[:, None]  # [G, S]: the last binding's slot for (D, a)
        inside = ends < size
        ends = np.minimum(ends, size - 1)
        block = max(1, LAYOUT_BUDGET // max(1, gaps.size * size))
        for j in range(self.num_rebound):
            need = counts[:, j]
            for part in row_chunks(rows, block):
                f = free[part]
                tally = np.concatenate([np.zeros((f.shape[0], 1), np.int64), f.cumsum(1)], 1)
                between = tally[:, ends] - tally[:, np.minimum(place + 1, size)][:, None, :]
                fits = inside[None] & f[:, None, :] & f[:, ends]
                fits &= gaps[None, :, None] >= need[part, None, None]
                fits &= between >= need[part, None, None] - 1
                score = np.where(fits, rng.random(fits.shape), -1.0).reshape(f.shape[0], -1)
                pick = np.argmax(score, axis=1)
                ok[part] &= score[np.arange(f.shape[0]), pick] >= 0
                spans[part, j] = gaps[pick // size]
                slots[part, j, 0] = pick % size
            first = slots[:, j, 0]
            last = np.where(ok, first + spans[:, j], first)  # a failed row: anything in range
            free[np.arange(rows), first] = False
            free[np.arange(rows), last] = False
            # the middle bindings: need - 1 of the free slots strictly between, uniformly
            middle = free & (place > first[:, None]) & (place < last[:, None])
            score = np.where(middle, rng.random((rows, size)), -1.0)
            chosen = np.argsort(-score, axis=1)[:, : width - 2]  # in random order
            chosen = np.sort(np.where(np.arange(width - 2) < need[:, None] - 1, chosen, size), 1)
            row, column = np.nonzero(chosen < size)
            free[row, chosen[row, column]] = False
            slots[:, j, 1 : width - 1] = np.where(chosen < size, chosen, -1)
            slots[np.arange(rows), j, need] = last
        # the once-bound keys: uniformly among the free slots left
        score = np.where(free, rng.random((rows, size)), -1.0)
        slots[:, self.num_rebound :, 0] = np.argsort(-score, axis=1)[:, : n - self.num_rebound]
        return slots, spans, ok
