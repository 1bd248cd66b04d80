"""Multi-query associative recall (MQAR), as defined by Zoology (Arora et al. 2023).

Layout of one example (n = num_kv_pairs, T = seq_len, V = vocab_size):

    k1 v1 k2 v2 ... kn vn | slot slot slot ... [one filler token if T is odd]
    `-- context, 2n ----'   `-- (T - 2n) // 2 two-token slots ------------'

- keys are n distinct tokens of [1, V//2), values n distinct tokens of [V//2, V); token 0 is
  never emitted;
- each key is queried exactly once, in its own slot; the label at the query key's position is
  the value paired with that key in the context, every other label is -100;
- `layout="zoology"` (the default, Zoology's): the token after a query key is filler, so the
  answer appears nowhere after the context; `layout="teacher_forced"`: the slot holds
  `key value`, the answer written into the input right after the query. That layout has a
  binding-free shortcut, elimination: the values already shown by earlier queries cannot be
  the answer, so guessing among the values not yet shown scores H_n / n on average
  (H_n = 1 + 1/2 + ... + 1/n: 0.34 at n = 8, 0.52 at n = 4) without binding a single key;
- slots are drawn without replacement with p(slot i) proportional to i^(power_a - 1),
  i = 1 .. num_slots counted from the end of the context (short gaps are likely);
- every other position is filler: uniform over [1, V) minus this example's keys, so filler
  never looks like a query (it may equal a value).

Slices: `query_index` [N, T], at a query position the index of the queried pair in the context
(0 = the first pair written, furthest back), -1 elsewhere; `query_order` [N, T], the rank of
the query among the example's queries in time (0 = first), -1 elsewhere; with a range of loads,
`num_kv_pairs` [N], the example's n.

The load is `num_kv_pairs`: an integer, or a range [low, high] with `load_dist` /
`load_weights` (tasks/load.py), each example at its own n (the largest must fit: T >= 4 high).

Binding-free baselines (`baselines`): `chance` 1 / (V - V//2), a uniform guess among the
value tokens; `in_context` 1 / n, a uniform guess among the context's n values; `elimination`,
a uniform guess among the context's values minus those that stand right after an earlier query
key (the answers shown by the teacher-forced layout; by chance only, in Zoology's).

Failure: a model that cannot store n key-value bindings in its state (a fixed-size recurrent
state once n grows: pitfall 3, docs/background.md) scores near 1/n (`in_context`) on the
queries it cannot recall.
"""

import numpy as np

from common.checks import is_real, require, require_choice, require_int
from tasks.base import IGNORE, Task, require_int_given, token_sets
from tasks.load import Load, describe_task_load, require_key_load
from tasks.registry import register
from tasks.sampling import (
    BITMAP_BUDGET,
    row_chunks,
    sample_distinct,
    sample_excluding,
    sample_weighted_distinct,
)

LAYOUTS = ("zoology", "teacher_forced")


@register("assoc_recall")
class AssocRecall(Task):
    """MQAR: n key-value pairs, then each key queried once after a power-law gap."""

    version = 2
    load_param = "num_kv_pairs"

    def __init__(
        self,
        vocab_size: int = 256,
        seq_len: int = 64,
        num_kv_pairs: Load = 8,
        power_a: float = 0.01,
        layout: str = "zoology",
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, 4)
        most = require_key_load(num_kv_pairs, vocab_size)
        require_int_given(
            "seq_len",
            seq_len,
            4 * most,
            None,
            f"for {describe_task_load('num_kv_pairs', num_kv_pairs)} "
            "(4 tokens per pair: the pair and its query slot)",
        )
        require(is_real(power_a) and 0 < power_a <= 1, "power_a", power_a, "a float in (0, 1]")
        require_choice("layout", layout, LAYOUTS)
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.power_a = float(power_a)
        self.layout = layout
        self._init_load(num_kv_pairs, load_dist, load_weights)

    @property
    def num_slots(self) -> int:
        """Two-token query slots after the context."""
        return (self.seq_len - 2 * self.num_kv_pairs) // 2

    position_slices = ("query_index", "query_order")

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return self.vocab_size // 2, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The n values of the context (positions 1, 3, ..., 2n - 1)."""
        return token_sets(inputs[:, 1 : 2 * self.num_kv_pairs : 2], self.vocab_size)

    def _baselines(self, data: dict[str, np.ndarray]) -> dict[str, float]:
        """`chance`, `in_context` (1 / n) and `elimination`: at each query, a uniform guess
        among the context's values minus those standing right after an earlier query key
        (what the teacher-forced layout shows: H_n / n on average; in Zoology's layout only
        filler stands there, so it stays near 1 / n)."""
        return {**super()._baselines(data), "elimination": self.elimination(data)}

    def elimination(self, data: dict[str, np.ndarray]) -> float:
        inputs, labels = data["inputs"], data["labels"]
        n = self.num_kv_pairs
        # each example has n queries; their positions in time order
        queries = np.nonzero(labels != IGNORE)[1].reshape(inputs.shape[0], n)
        hits = np.empty(queries.shape)
        for rows in row_chunks(inputs.shape[0], max(1, BITMAP_BUDGET // (n * n))):
            context_values = inputs[rows, 1 : 2 * n : 2]  # [R, n], distinct per row
            shown = np.take_along_axis(inputs[rows], queries[rows] + 1, axis=1)  # after a query
            # shown_at[r, i, k]: the token after query i is context value k
            shown_at = shown[:, :, None] == context_values[:, None, :]
            # gone[r, j, k]: value k stood after a query before query j (exclusive running OR)
            gone = np.cumsum(shown_at, axis=1) - shown_at > 0
            answers = np.take_along_axis(labels[rows], queries[rows], axis=1)
            answer_gone = (gone & (context_values[:, None, :] == answers[:, :, None])).any(axis=2)
            hits[rows] = ~answer_gone / np.maximum(n - gone.sum(axis=2), 1)
        return float(hits.mean())

    fills_loads_per_row = True

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Write one chunk of examples into the views `out` (labels/slices prefilled).

        Row r holds n_r pairs (`draw_loads`; all equal for a single load): keys and values
        are drawn for the largest load m of the chunk and row r keeps its first n_r (the
        first n_r of a uniformly ordered m-subset are a uniformly ordered n_r-subset); its
        slots are the first n_r of m draws among its own (T - 2 n_r) // 2 slots. Only the
        pairs a row keeps are written: one scatter per array over the kept pairs' flat
        positions."""
        vocab, half, length = self.vocab_size, self.vocab_size // 2, self.seq_len
        inputs = out["inputs"]
        rows = inputs.shape[0]
        n = self.draw_loads(rng, rows)
        m, fewest = int(n.max()), int(n.min())
        ranged = m > fewest
        method = "auto_permutation" if ranged else "auto"
        keys = 1 + sample_distinct(rng, rows, half - 1, m, method)
        values = half + sample_distinct(rng, rows, vocab - half, m, method)
        kept = np.arange(m) < n[:, None]  # [rows, m]: the pairs each row keeps
        # filler after the shortest context; 0 (never emitted) stands for a pair not kept
        held = np.where(kept, keys, 0) if ranged else keys
        inputs[:, 2 * fewest :] = sample_excluding(rng, (rows, length - 2 * fewest), 1, vocab, held)
        # Column j = the slot of key j; slot i (0-based) is the gap i + 1 of the power law.
        num_slots = (length - 2 * n) // 2
        weights = np.arange(1, num_slots.max() + 1, dtype=np.float64) ** (self.power_a - 1.0)
        slots = sample_weighted_distinct(rng, weights, rows, m, num_slots if ranged else None)
        # query_order: the rank of each kept slot among its row's kept slots (the inverse of
        # the permutation that sorts them; pairs not kept sort last)
        by_time = np.argsort(np.where(kept, slots, slots.max() + 1) if ranged else slots, axis=1)
        by_time += (np.arange(rows) * m)[:, None]  # flat in [rows, m]
        order = np.empty_like(by_time)
        order.reshape(-1)[by_time.reshape(-1)] = np.tile(np.arange(m), rows)
        head = inputs[:, : 2 * m]  # k1 v1 k2 v2 ...: the kept pairs over the filler
        if ranged:
            np.copyto(head[:, 0::2], keys, where=kept)
            np.copyto(head[:, 1::2], values, where=kept)
        else:
            head[:, 0::2], head[:, 1::2] = keys, values
        # flat positions (row-major in the chunk) of the kept pairs' queries
        at = 2 * slots
        at += (2 * n + np.arange(rows) * length)[:, None]
        picked = np.flatnonzero(kept) if ranged else slice(None)
        at, keys, values, order = (a.reshape(-1)[picked] for a in (at, keys, values, order))
        np.put(inputs, at, keys)
        if self.layout == "teacher_forced":
            np.put(inputs, at + 1, values)
        np.put(out["labels"], at, values)
        pair = picked % m if ranged else np.broadcast_to(np.arange(m), (rows, m))
        np.put(out["query_index"], at, pair)
        np.put(out["query_order"], at, order)
        if self.has_load_range:
            out["num_kv_pairs"][:] = n
