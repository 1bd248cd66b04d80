"""Needle in a haystack: find one key -> value pair at a chosen depth of a long random context
(the synthetic form of Kamradt's 2023 "needle in a haystack" test, as in RULER, Hsieh et al. 2024).

Tokens: 0 is never emitted; keys are drawn from [1, vocab_size // 2), values from
[vocab_size // 2, vocab_size). Layout of one example (T = seq_len):

    filler ... key value ... filler ... k' v' ... filler | key
    `------------- context: T - 1 tokens ---------------'   ^ label: value

- the needle `key value` starts at position p = round(depth * (T - 3)) (depth 0: the start of
  the context, 1: right before the query);
- `num_distractors` other pairs `k' v'` with keys distinct from each other and from the needle's
  (values are distinct too) sit at random 2-aligned positions that do not overlap the needle;
- the last token is the needle's key; its label is the needle's value; every other label is -100;
- filler is uniform over [1, vocab_size) minus every key of the example, so the query key
  occurs exactly twice (needle and query) and each distractor key exactly once.

Parameters: `vocab_size`, `seq_len`, `depth` (a float in [0, 1]; a list of floats, one picked
uniformly per example; or "uniform": p uniform over [0, T - 3]), `num_distractors`.

Slice: `depth_bin` [N], round(10 * p / (T - 3)) in 0..10 (the depth the needle actually got);
with a range of loads, `num_distractors` [N], the example's number of distractors.

The load is `num_distractors`: an integer, or a range [low, high] with `load_dist` /
`load_weights` (tasks/load.py), each example at its own count (T >= 2 high + 5).

Binding-free baselines (`baselines`): `chance` 1 / (vocab_size - vocab_size // 2);
`in_context`, a uniform guess among the values that follow a key token in the context (the
pairs' values and the filler's chance `key value` bigrams, which only matching the query tells
apart from real pairs). No shortcut: the answer sits right after the needle's key, wherever
the needle is; nothing near the query depends on it.

Failure: a fixed-size state that has overwritten the needle by the time the query comes gets
chance accuracy (about 1 / (vocab_size / 2)), mostly at low depth (far back); distractors test
whether the retrieval is precise (another pair's value is the typical wrong answer).
"""

from collections.abc import Sequence

import numpy as np

from common.checks import is_real, require, require_int
from tasks.base import Task, require_int_given, token_sets
from tasks.load import Load, describe_task_load, load_bounds, require_load
from tasks.registry import register
from tasks.sampling import (
    depth_bins,
    sample_distinct,
    sample_excluding,
)

Depth = float | list[float] | str


def _is_depth(value: object) -> bool:
    return is_real(value) and 0 <= value <= 1


@register("needle")
class Needle(Task):
    """One key -> value needle at a given depth, optional distractor pairs, query at the end."""

    version = 1
    load_param = "num_distractors"

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 32,
        depth: Depth = "uniform",
        num_distractors: Load = 1,
        load_dist: str = "uniform",
        load_weights: dict[int, float] | None = None,
    ) -> None:
        require_int("vocab_size", vocab_size, 4)
        _, most = load_bounds("num_distractors", num_distractors)
        require_load(
            "num_distractors",
            num_distractors,
            0,
            vocab_size // 2 - 2,
            f"for vocab_size={vocab_size} (every pair has its own key in [1, vocab_size // 2))",
        )
        # context T - 1 holds the needle and 2-aligned distractor slots, 2 of which it may block
        require_int_given(
            "seq_len",
            seq_len,
            3 if most == 0 else 2 * most + 5,
            None,
            f"for {describe_task_load('num_distractors', num_distractors)} "
            "(the needle, the pairs and the query)",
        )
        is_uniform = isinstance(depth, str) and depth == "uniform"
        is_list = isinstance(depth, Sequence) and not isinstance(depth, str)
        require(
            is_uniform
            or _is_depth(depth)
            or (is_list and len(depth) > 0 and all(_is_depth(d) for d in depth)),
            "depth",
            depth,
            'a float in [0, 1], a non-empty list of such floats, or "uniform"',
        )
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.depth: Depth = (
            "uniform" if is_uniform else [float(d) for d in depth] if is_list else float(depth)
        )
        self._init_load(num_distractors, load_dist, load_weights)

    example_slices = ("depth_bin",)

    @property
    def answer_tokens(self) -> tuple[int, int]:
        return self.vocab_size // 2, self.vocab_size

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """Every value token that follows a key token in the context: the needle's and the
        distractors' values, and the filler's chance `key value` bigrams (filler excludes only
        this example's keys, so a reader who does not match the query cannot tell them apart)."""
        half = self.vocab_size // 2
        context = inputs[:, :-1]
        after_key = (context[:, :-1] < half) & (context[:, 1:] >= half)
        return token_sets(context[:, 1:], self.vocab_size, after_key)

    def _needle_starts(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        last = self.seq_len - 3  # the latest start: the value right before the query
        if self.depth == "uniform":
            return rng.integers(0, last + 1, size=rows)
        if isinstance(self.depth, list):
            depth = np.asarray(self.depth)[rng.integers(0, len(self.depth), size=rows)]
        else:
            depth = np.full(rows, self.depth)
        return np.rint(depth * last).astype(np.int64)

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        inputs = out["inputs"]
        rows, length = inputs.shape
        vocab, half, m = self.vocab_size, self.vocab_size // 2, self.num_distractors
        row = np.arange(rows)
        keys = 1 + sample_distinct(rng, rows, half - 1, m + 1)  # column 0: the needle
        values = half + sample_distinct(rng, rows, vocab - half, m + 1)
        start = self._needle_starts(rows, rng)
        inputs[:, : length - 1] = sample_excluding(rng, (rows, length - 1), 1, vocab, keys)
        if m:
            # distractor slot s covers [2s, 2s + 1]; the slots the needle touches are excluded
            # (with an odd context the last token is on no slot: clip to the last slot)
            num_slots = (length - 1) // 2
            scores = rng.random((rows, num_slots))
            scores[row, start // 2] = np.inf
            scores[row, np.minimum((start + 1) // 2, num_slots - 1)] = np.inf
            slots = np.argpartition(scores, m - 1, axis=1)[:, :m]
            inputs[row[:, None], 2 * slots] = keys[:, 1:]
            inputs[row[:, None], 2 * slots + 1] = values[:, 1:]
        inputs[row, start] = keys[:, 0]
        inputs[row, start + 1] = values[:, 0]
        inputs[:, length - 1] = keys[:, 0]
        out["labels"][:, length - 1] = values[:, 0]
        out["depth_bin"][:] = depth_bins(start, length - 3)
