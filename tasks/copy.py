"""Copying a random string (Jelassi et al. 2024, "Repeat After Me: Transformers are Better than
State Space Models at Copying").

Tokens: 0 = pad, 1 = BOS, 2 = SEP, the alphabet is [3, vocab_size). Layout of one example with
a string s_1 .. s_L (L tokens drawn i.i.d. uniformly from the alphabet), right-aligned:

    pad ... pad  BOS  s_1 s_2 ... s_L  SEP  s_1 s_2 ... s_{L-1}
                                       ^ label s_1, then each copied s_i is labelled s_{i+1}

so the model reproduces the whole string after SEP: L labels per example, at SEP and at the
first L-1 copied tokens (the copy's last token is not an input: nothing is scored after it,
hence the minimum seq_len 2L + 1). Every other label is -100.

Parameters: `vocab_size` (alphabet = vocab_size - 3), `seq_len`, `copy_len` (the load: the
string length; None = the longest that fits, (seq_len - 1) // 2, so it grows with
`with_seq_len`; an integer; or a range [low, high], each example's length drawn by `load_dist`
/ `load_weights`, tasks/load.py), `min_copy_len` (None; or, with an integer copy_len, the range
[min_copy_len, copy_len]: the same examples as copy_len=[min_copy_len, copy_len]).

Slices: `copy_position` [N, T], at a scored position the index in the string of the token to
output (0 = s_1), -1 elsewhere; `copy_len` [N], the example's string length.

Binding-free baselines (`baselines`): `chance` 1 / (vocab_size - 3); `in_context`, a uniform
guess among the string's distinct symbols. No shortcut: each answer is the string's next
symbol, L + 1 tokens back (reading it is the copy), and i.i.d. symbols leave nothing to
eliminate.

Failure: a fixed-size recurrent state holds about state_bits / log2(alphabet) tokens; past that
the copy's accuracy falls with `copy_position` while softmax attention's does not.
"""

from typing import Any

import numpy as np

from common.checks import is_int, require, require_int
from tasks.base import Task, token_sets
from tasks.load import Load, is_range, load_bounds, normalised, require_load
from tasks.registry import register

PAD, BOS, SEP = 0, 1, 2
FIRST_SYMBOL = 3


@register("copy")
class Copy(Task):
    """Reproduce a random string after a separator."""

    version = 1
    load_param = "copy_len"
    fills_loads_per_row = True

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 64,
        copy_len: Load | None = None,
        min_copy_len: int | None = None,
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, FIRST_SYMBOL + 2)
        require_int("seq_len", seq_len, 3)
        longest = (seq_len - 1) // 2
        fits = f"for seq_len={seq_len} (a string of L tokens needs seq_len >= 2L + 1)"
        if is_range(copy_len):
            load_bounds("copy_len", copy_len)
            require_load("copy_len", copy_len, 1, longest, fits)
            require(
                min_copy_len is None,
                "min_copy_len",
                min_copy_len,
                f"null when copy_len is a range (copy_len={normalised(copy_len)})",
            )
            min_len, max_len = load_bounds("copy_len", copy_len)
        else:
            require(
                copy_len is None or (is_int(copy_len) and 1 <= copy_len <= longest),
                "copy_len",
                copy_len,
                f"None, an integer or a range [low, high] in [1, {longest}] {fits}",
            )
            max_len = longest if copy_len is None else int(copy_len)
            require(
                min_copy_len is None or (is_int(min_copy_len) and 1 <= min_copy_len <= max_len),
                "min_copy_len",
                min_copy_len,
                f"None or an integer in [1, {max_len}] for copy_len={copy_len} "
                f"and seq_len={seq_len} (at most the longest string)",
            )
            min_len = max_len if min_copy_len is None else int(min_copy_len)
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.min_copy_len = None if min_copy_len is None else int(min_copy_len)
        self.max_len, self.min_len = max_len, min_len
        ranged = is_range(copy_len) or min_copy_len is not None
        self._init_load([min_len, max_len] if ranged else max_len, load_dist, load_weights)
        self.copy_len = None if copy_len is None else normalised(copy_len)

    @property
    def has_load_range(self) -> bool:
        """Strings of several lengths: `copy_len` written as a range, or `min_copy_len` set
        (the range [min_copy_len, copy_len])."""
        return is_range(self.copy_len) or self.min_copy_len is not None

    def single_load_params(self, load: int) -> dict[str, Any]:
        return {**super().single_load_params(load), "min_copy_len": None}

    position_slices = ("copy_position",)

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return FIRST_SYMBOL, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """The distinct symbols of the string (all of them precede SEP, the first scored
        position)."""
        return token_sets(inputs, self.vocab_size, inputs >= FIRST_SYMBOL)

    example_slices = ("copy_len",)

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        rows, length = out["inputs"].shape
        lengths = self.draw_loads(rng, rows)
        string = rng.integers(FIRST_SYMBOL, self.vocab_size, size=(rows, self.max_len))
        index = np.arange(self.max_len)
        sep = length - lengths  # SEP sits right before the L - 1 copied tokens at the end
        row = np.broadcast_to(np.arange(rows)[:, None], string.shape)
        in_string = index < lengths[:, None]
        sep_col = sep[:, None]

        inputs = out["inputs"]
        inputs[np.arange(rows), sep - lengths - 1] = BOS
        inputs[np.arange(rows), sep] = SEP
        original = (row[in_string], (sep_col - lengths[:, None] + index)[in_string])
        inputs[original] = string[in_string]
        copied = index < lengths[:, None] - 1
        inputs[row[copied], (sep_col + 1 + index)[copied]] = string[copied]
        # The label at SEP + j (j = 0 .. L-1) is s_{j+1} = string[:, j].
        scored = (row[in_string], (sep_col + index)[in_string])
        out["labels"][scored] = string[in_string]
        out["copy_position"][scored] = np.broadcast_to(index, string.shape)[in_string]
        out["copy_len"][:] = lengths
