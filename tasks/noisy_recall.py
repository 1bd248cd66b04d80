"""Noisy in-context recall (MAD, Poli et al. 2024 "Mechanistic Design and Scaling of Hybrid
Architectures"): associative recall whose context is interleaved with noise tokens.

Tokens: 0 is never emitted; noise tokens are [1, 1 + noise_vocab_size); the rest is split into
keys (the lower half, K = (vocab_size - 1 - noise_vocab_size) // 2 tokens) and values (the upper
part). Layout of one example (n = num_kv_pairs, q = num_queries, T = seq_len):

    noise k_1 v_1 noise noise k_2 v_2 ... k_n v_n noise | k_a noise  k_b noise ...
    `--------------- context: T - 2q tokens ----------'   `-- q queries -------'

- n distinct keys with n distinct values, each pair written as two adjacent tokens; the pairs'
  places among the T - 2q - 2n noise tokens are uniform over all non-overlapping placements;
  noise tokens are uniform over the noise vocabulary;
- then q queries, each a key of the context drawn uniformly and independently (a pair may be
  asked twice or never), followed by a noise token; the label at a query key is its value;
  every other label is -100.
Noise, keys and values are disjoint, so noise never looks like a key or a value.

No answer is written after the context: an answer teacher-forced after its query would
let a repeated query read its answer at most 2q - 3 tokens back, without looking into the
context (a third of the scored queries at the defaults), and with each key asked once it would
allow elimination (guess among the values not shown yet: H_n / n, 0.34 at n = 8).

Binding-free baselines (`baselines`): `chance` 1 / (number of value tokens); `in_context`
1 / n, a uniform guess among the values in the context.

Parameters: `vocab_size`, `seq_len`, `num_kv_pairs`, `num_queries`, `noise_vocab_size`.
The amount of noise is what seq_len leaves: T - 2q - 2n tokens.

Slice: `query_index` [N, T], at a query the index of its pair in the context (0 = the first
pair, furthest back), -1 elsewhere; with a range of loads, `num_kv_pairs` [N], the example's n.

The load is `num_kv_pairs`: an integer, or a range [low, high] with `load_dist` /
`load_weights` (tasks/load.py), each example at its own n (T >= 2 high + 2q).

Failure: as for MQAR (assoc_recall), plus noise: a model that writes every token into its state
spends capacity on noise; input-dependent gating (selective state updates) can skip it.
"""

import numpy as np

from common.checks import require_int
from tasks.base import PerRowLoadTask, require_int_given, token_sets
from tasks.load import Load, describe_task_load, load_bounds, require_load
from tasks.registry import register
from tasks.sampling import sample_block_starts, sample_distinct, sample_sorted_subsets


@register("noisy_recall")
class NoisyRecall(PerRowLoadTask):
    """Key-value pairs scattered among noise tokens, then keys queried at the end."""

    version = 2
    load_param = "num_kv_pairs"

    def __init__(
        self,
        vocab_size: int = 64,
        seq_len: int = 64,
        num_kv_pairs: Load = 8,
        num_queries: int = 8,
        noise_vocab_size: int = 16,
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, 4)
        require_int_given(
            "noise_vocab_size",
            noise_vocab_size,
            1,
            vocab_size - 3,
            f"for vocab_size={vocab_size} (token 0, a key and a value must stay)",
        )
        num_keys = (vocab_size - 1 - noise_vocab_size) // 2
        _, most = load_bounds("num_kv_pairs", num_kv_pairs)
        require_load(
            "num_kv_pairs",
            num_kv_pairs,
            1,
            num_keys,
            f"for vocab_size={vocab_size} and noise_vocab_size={noise_vocab_size} "
            "(keys are (vocab_size - 1 - noise_vocab_size) // 2 tokens)",
        )
        require_int("num_queries", num_queries, 1)
        require_int_given(
            "seq_len",
            seq_len,
            2 * most + 2 * num_queries,
            None,
            f"for {describe_task_load('num_kv_pairs', num_kv_pairs)} and num_queries={num_queries} "
            "(2 tokens per pair and per query)",
        )
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.num_queries = int(num_queries)
        self.noise_vocab_size = int(noise_vocab_size)
        self._init_load(num_kv_pairs, load_dist, load_weights)

    @property
    def num_keys(self) -> int:
        """Size of the key vocabulary [first_key, first_value)."""
        return (self.vocab_size - 1 - self.noise_vocab_size) // 2

    @property
    def first_key(self) -> int:
        return 1 + self.noise_vocab_size

    @property
    def first_value(self) -> int:
        return self.first_key + self.num_keys

    position_slices = ("query_index",)

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return self.first_value, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The values in the input: the n values of the context (noise is never a value)."""
        return token_sets(inputs, self.vocab_size, inputs >= self.first_value)

    def _fill_at(self, out: dict[str, np.ndarray], rng: np.random.Generator, n: int) -> None:
        """Every row holds n pairs."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        q = self.num_queries
        context = length - 2 * q
        row = np.arange(rows)[:, None]
        keys = self.first_key + sample_distinct(rng, rows, self.num_keys, n)
        num_values = self.vocab_size - self.first_value
        values = self.first_value + sample_distinct(rng, rows, num_values, n)
        inputs[:, :context] = rng.integers(1, self.first_key, size=(rows, context))
        starts = sample_block_starts(rng, rows, context, n)  # pair j at starts[:, j]
        inputs[row, starts] = keys
        inputs[row, starts + 1] = values
        asked = rng.integers(0, n, size=(rows, q))  # the pair of each query, in query order
        self._queries(out, rng, keys, values, asked)

    def _fill_per_row(
        self, out: dict[str, np.ndarray], rng: np.random.Generator, n: np.ndarray
    ) -> None:
        """Row r holds n[r] pairs: keys and values drawn for the largest load m, row r keeps
        its first n[r]; its pairs' places are a uniform placement of n[r] blocks in the
        context (as `sample_block_starts`: n[r] sorted places among context - n[r])."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        m, context = int(n.max()), length - 2 * self.num_queries
        keys = self.first_key + sample_distinct(rng, rows, self.num_keys, m, "auto_permutation")
        num_values = self.vocab_size - self.first_value
        values = self.first_value + sample_distinct(rng, rows, num_values, m, "auto_permutation")
        inputs[:, :context] = rng.integers(1, self.first_key, size=(rows, context))
        starts = sample_sorted_subsets(rng, context - n, n, m) + np.arange(m)
        row, j = np.nonzero(np.arange(m)[None, :] < n[:, None])
        inputs[row, starts[row, j]] = keys[row, j]
        inputs[row, starts[row, j] + 1] = values[row, j]
        asked = rng.integers(0, n[:, None], size=(rows, self.num_queries))
        self._queries(out, rng, keys, values, asked)

    def _queries(
        self,
        out: dict[str, np.ndarray],
        rng: np.random.Generator,
        keys: np.ndarray,
        values: np.ndarray,
        asked: np.ndarray,
    ) -> None:
        """The queries after the context: pair asked[r, i] of row r, then a noise token."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        q = self.num_queries
        at_key = length - 2 * q + 2 * np.arange(q)
        inputs[:, at_key] = np.take_along_axis(keys, asked, axis=1)
        inputs[:, at_key + 1] = rng.integers(1, self.first_key, size=(rows, q))
        out["labels"][:, at_key] = np.take_along_axis(values, asked, axis=1)
        out["query_index"][:, at_key] = asked
