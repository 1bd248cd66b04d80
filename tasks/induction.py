"""A single induction head: "... A B ... A -> B" (Olsson et al. 2022, "In-context Learning and
Induction Heads"; the associative-recall form of Ba et al. 2016 / H3, Fu et al. 2023).

Tokens: 0 is never emitted, everything else is [1, vocab_size). Layout (T = seq_len):

    x_0 ... x_{p-1}  A  B  x_{p+2} ... x_{T-2} | A
                                                 ^ label: B

- the trigger A is uniform over [1, vocab_size); it occurs exactly twice: at a position p
  uniform over [0, T - 3] and at the last position;
- every other token (B included) is uniform over [1, vocab_size) minus A, so the only earlier A
  is the trigger and the answer is unambiguous; the label at the last position is the token
  after the earlier A, every other label is -100.

Parameters: `vocab_size`, `seq_len`.

Slice: `depth_bin` [N], round(10 * p / (T - 3)) in 0..10: where the earlier A is (0 = the
start, 10 = right before the query).

Binding-free baselines (`baselines`): `chance` 1 / (vocab_size - 1); `in_context`, a uniform
guess among the distinct tokens before the query other than A. When p = T - 3 (one example in
T - 2) the answer is the token right before the query: still the induction step, not a leak.

Failure: the model must match the current token against every earlier one and copy the token
that followed it; a state that keeps no token identity for long answers near chance
(1 / (vocab_size - 2)), mostly at low `depth_bin`.
"""

import numpy as np

from common.checks import require_int
from tasks.base import Task, token_sets
from tasks.registry import register
from tasks.sampling import depth_bins, sample_excluding


@register("induction")
class Induction(Task):
    """Random tokens with one repeated trigger; predict what followed its first occurrence."""

    version = 1

    def __init__(self, vocab_size: int = 32, seq_len: int = 32) -> None:
        require_int("vocab_size", vocab_size, 3)
        require_int("seq_len", seq_len, 3)
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)

    example_slices = ("depth_bin",)

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return 1, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The distinct tokens before the query, except the trigger itself (B never equals A)."""
        present = token_sets(inputs[:, :-1], self.vocab_size)
        present[np.arange(inputs.shape[0]), inputs[:, -1]] = False
        return present

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        inputs = out["inputs"]
        rows, length = inputs.shape
        row = np.arange(rows)
        trigger = rng.integers(1, self.vocab_size, size=rows)
        first = rng.integers(0, length - 2, size=rows)  # p in [0, T - 3]
        inputs[:] = sample_excluding(rng, (rows, length), 1, self.vocab_size, trigger[:, None])
        inputs[row, first] = trigger
        inputs[:, length - 1] = trigger
        out["labels"][:, length - 1] = inputs[row, first + 1]
        out["depth_bin"][:] = depth_bins(first, length - 3)
