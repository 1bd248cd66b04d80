"""Multi-query associative recall (MQAR), as defined by Zoology (Arora et al. 2023).

Layout of one example (n = num_kv_pairs, T = seq_len, V = vocab_size):

    k1 v1 k2 v2 ... kn vn | slot slot slot ... [one filler token if T is odd]
    `-- context, 2n ----'   `-- (T - 2n) // 2 two-token slots ------------'

- keys are n distinct tokens of [1, V//2), values n distinct tokens of [V//2, V); token 0 is
  never emitted;
- each key is queried exactly once, in its own slot, which then holds `key value` (the value
  is teacher-forced into the input); the label at the query key's position is the value paired
  with that key in the context, every other label is -100;
- slots are drawn without replacement with p(slot i) proportional to i^(power_a - 1),
  i = 1 .. num_slots counted from the end of the context (short gaps are likely);
- every other position is filler: uniform over [1, V) minus this example's keys, so filler
  never looks like a query (it may equal a value).

Slices: `query_index` [N, T], at a query position the index of the queried pair in the context
(0 = the first pair written, furthest back), -1 elsewhere; `query_order` [N, T], the rank of
the query among the example's queries in time (0 = first), -1 elsewhere.

Failure: a model that cannot store n key-value bindings in its state (a fixed-size recurrent
state once n grows: pitfall 3, docs/background.md) scores near 1/(V/2) on the queries it
cannot recall.
"""

import numpy as np

from common.checks import is_real, require, require_int
from tasks import register
from tasks.base import Task
from tasks.sampling import (
    sample_distinct,
    sample_excluding,
    sample_weighted_distinct,
)


@register("assoc_recall")
class AssocRecall(Task):
    """MQAR: n key-value pairs, then each key queried once after a power-law gap."""

    version = 1

    def __init__(
        self,
        vocab_size: int = 256,
        seq_len: int = 64,
        num_kv_pairs: int = 8,
        power_a: float = 0.01,
    ) -> None:
        require_int("vocab_size", vocab_size, 4)
        require_int("num_kv_pairs", num_kv_pairs, 1, vocab_size // 2 - 1)
        require_int("seq_len", seq_len, 4 * num_kv_pairs)
        require(is_real(power_a) and 0 < power_a <= 1, "power_a", power_a, "a float in (0, 1]")
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.num_kv_pairs = int(num_kv_pairs)
        self.power_a = float(power_a)

    @property
    def num_slots(self) -> int:
        """Two-token query slots after the context."""
        return (self.seq_len - 2 * self.num_kv_pairs) // 2

    position_slices = ("query_index", "query_order")

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Write one chunk of examples into the views `out` (labels/slices prefilled)."""
        n, vocab = self.num_kv_pairs, self.vocab_size
        inputs = out["inputs"]
        rows = inputs.shape[0]
        half = vocab // 2
        keys = 1 + sample_distinct(rng, rows, half - 1, n)
        values = half + sample_distinct(rng, rows, vocab - half, n)
        inputs[:, 0 : 2 * n : 2] = keys
        inputs[:, 1 : 2 * n : 2] = values
        inputs[:, 2 * n :] = sample_excluding(rng, (rows, self.seq_len - 2 * n), 1, vocab, keys)

        # Column j = the slot of key j; slot i (0-based) is the gap i + 1 of the power law.
        weights = np.arange(1, self.num_slots + 1, dtype=np.float64) ** (self.power_a - 1.0)
        slots = sample_weighted_distinct(rng, weights, rows, n)
        at_key = (np.arange(rows)[:, None], 2 * n + 2 * slots)
        inputs[at_key] = keys
        inputs[at_key[0], at_key[1] + 1] = values
        out["labels"][at_key] = values
        out["query_index"][at_key] = np.arange(n)
        out["query_order"][at_key] = np.argsort(np.argsort(slots, axis=1), axis=1)
