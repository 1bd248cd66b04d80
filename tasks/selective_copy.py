"""Selective copying (MAD, Poli et al. 2024 "Mechanistic Design and Scaling of Hybrid
Architectures"; also Gu & Dao 2023, Mamba): copy only the data tokens, in order, ignoring noise.

Tokens: 0 is never emitted, 1 = SEP, noise tokens are [2, 2 + noise_vocab_size), data tokens
[2 + noise_vocab_size, vocab_size). Layout of one example (k = num_tokens, T = seq_len):

    noise d_1 noise noise d_2 ... d_k noise | SEP  d_1 d_2 ... d_{k-1}
    `------- context: T - k tokens -------'    ^ label d_1, then each d_i is labelled d_{i+1}

- the k data tokens are drawn i.i.d. uniformly from the data tokens (repeats allowed) and put at
  k distinct positions of the context chosen uniformly; every other context position is noise
  (one blank token when noise_vocab_size = 1, as in MAD; uniform noise tokens otherwise);
- after SEP the data tokens are teacher-forced in order; k labels per example, at SEP and at the
  first k - 1 copied tokens (so seq_len >= 2k); every other label is -100.
Noise and data tokens are disjoint, so noise never looks like something to copy.

Parameters: `vocab_size`, `seq_len`, `num_tokens` (k), `noise_vocab_size`.

Slice: `copy_position` [N, T], at a scored position the index (0 = d_1) of the data token to
output, -1 elsewhere; with a range of loads, `num_tokens` [N], the example's k.

The load is `num_tokens`: an integer, or a range [low, high] with `load_dist` / `load_weights`
(tasks/load.py), each example at its own k (T >= 2 high).

Binding-free baselines (`baselines`): `chance` 1 / (number of data tokens); `in_context`, a
uniform guess among the distinct data tokens of the input. No shortcut: as in `copy`, each
answer is the next data token of the context, and i.i.d. tokens leave nothing to eliminate.

Failure: copying needs the data tokens' content *and* order kept while skipping a variable
amount of noise; models whose state update cannot depend on the input (time-invariant
recurrences) cannot select, and a fixed-size state loses tokens once k outgrows it.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from common.checks import require_int
from tasks.base import IGNORE, PerRowLoadTask, require_int_given, token_sets
from tasks.load import Load, describe_task_load, load_bounds, require_load
from tasks.registry import register
from tasks.sampling import sample_distinct, sample_sorted_subsets

SEP = 1
FIRST_NOISE = 2


@register("selective_copy")
class SelectiveCopy(PerRowLoadTask):
    """Copy the data tokens scattered among noise, in order, after a separator."""

    version = 1
    load_param = "num_tokens"

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 64,
        num_tokens: Load = 8,
        noise_vocab_size: int = 1,
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, FIRST_NOISE + 3)
        require_int_given(
            "noise_vocab_size",
            noise_vocab_size,
            1,
            vocab_size - FIRST_NOISE - 2,
            f"for vocab_size={vocab_size} (at least two data tokens must stay)",
        )
        _, most = load_bounds("num_tokens", num_tokens)
        require_load("num_tokens", num_tokens, 1, None, "")
        require_int_given(
            "seq_len",
            seq_len,
            2 * most,
            None,
            f"for {describe_task_load('num_tokens', num_tokens)} (the tokens, then their copy)",
        )
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.noise_vocab_size = int(noise_vocab_size)
        self._init_load(num_tokens, load_dist, load_weights)

    @property
    def first_data(self) -> int:
        return FIRST_NOISE + self.noise_vocab_size

    position_slices = ("copy_position",)

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return self.first_data, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The distinct data tokens of the input (all of them precede SEP)."""
        return token_sets(inputs, self.vocab_size, inputs >= self.first_data)

    def _fill_per_row(
        self, out: dict[str, np.ndarray], rng: np.random.Generator, k: np.ndarray
    ) -> None:
        """Row r copies k[r] tokens: data drawn for the largest k, row r keeps its first k[r]
        and places them at a uniform sorted k[r]-subset of its own context T - k[r].

        The last m positions of row r hold, right-aligned, its SEP and copy (k[r] of them):
        each is a window starting at column k[r] of a row of length 2m that holds m columns
        of padding and then the m values the positions would hold at k = m, so the copy is
        one gather of m contiguous values per row (no per-position index arithmetic)."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        m, fewest = int(k.max()), int(k.min())
        context = length - k
        data = rng.integers(self.first_data, self.vocab_size, size=(rows, m))
        where = sample_sorted_subsets(rng, context, k, m)
        if self.noise_vocab_size == 1:
            inputs[:] = FIRST_NOISE
        else:  # every position from the shortest context on is SEP or the copy
            inputs[:, : length - fewest] = rng.integers(
                FIRST_NOISE, self.first_data, size=(rows, length - fewest)
            )
        # padding columns of `where` hold T - fewest: in every row, SEP or the copy, both
        # written below
        np.put(inputs, where + (np.arange(rows) * length)[:, None], data)
        # tail column c of row r is column c + k[r] of its padded row
        chosen = np.arange(rows), k
        padded = np.empty((rows, 2 * m), dtype=np.int64)
        padded[:, :m], padded[:, m:] = IGNORE, data
        out["labels"][:, length - m :] = sliding_window_view(padded, m, axis=1)[chosen]
        padded[:, m] = SEP
        padded[:, m + 1 :] = data[:, : m - 1]
        shown = sliding_window_view(padded, m, axis=1)[chosen]
        np.copyto(inputs[:, length - m :], shown, where=shown != IGNORE)
        index = np.concatenate([np.full(m, -1), np.arange(m)])
        out["copy_position"][:, length - m :] = sliding_window_view(index, m)[k]

    def _fill_at(self, out: dict[str, np.ndarray], rng: np.random.Generator, k: int) -> None:
        """Every row copies k tokens."""
        inputs = out["inputs"]
        rows, length = inputs.shape
        context = length - k
        data = rng.integers(self.first_data, self.vocab_size, size=(rows, k))
        where = np.sort(sample_distinct(rng, rows, context, k), axis=1)
        if self.noise_vocab_size == 1:
            inputs[:, :context] = FIRST_NOISE
        else:
            inputs[:, :context] = rng.integers(FIRST_NOISE, self.first_data, size=(rows, context))
        inputs[np.arange(rows)[:, None], where] = data
        inputs[:, context] = SEP
        inputs[:, context + 1 :] = data[:, : k - 1]
        out["labels"][:, context:] = data
        out["copy_position"][:, context:] = np.arange(k)
