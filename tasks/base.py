"""The task API (README "Extending"): a Task turns (params, seed) into token arrays and labels."""

import inspect
from typing import Any

import numpy as np

from common.checks import is_int, require, require_int
from tasks.sampling import chunk_rows, row_chunks

IGNORE = -100
"""Label of a position where nothing is scored (torch's cross-entropy `ignore_index`)."""


def require_int_given(name: str, value: Any, low: int, high: int | None, given: str) -> None:
    """`require_int` for a bound set by other parameters: `given` names them and their values
    (e.g. "for vocab_size=8 (...)"), so a user who changed only those sees why this one fails."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    ok = is_int(value) and value >= low and (high is None or value <= high)
    require(ok, name, value, f"{allowed} {given}")


def token_sets(tokens: np.ndarray, vocab_size: int, keep: np.ndarray | None = None) -> np.ndarray:
    """bool [N, vocab_size]: row i marks the tokens of `tokens[i]` ([N, L]) where `keep` is
    true (all of them when `keep` is None)."""
    rows = np.broadcast_to(np.arange(tokens.shape[0])[:, None], tokens.shape)
    keep = np.ones(tokens.shape, bool) if keep is None else keep
    present = np.zeros((tokens.shape[0], vocab_size), dtype=bool)
    present[rows[keep], tokens[keep]] = True
    return present


def guess_accuracy(candidates: np.ndarray, labels: np.ndarray) -> float:
    """Expected accuracy of a uniform guess among `candidates[i]` (bool [N, V]) at every scored
    position of example i: the mean over scored positions of [label in C_i] / |C_i| (0 when
    C_i is empty), the same micro average as `test/acc`."""
    rows, cols = np.nonzero(labels != IGNORE)
    answers = labels[rows, cols]
    sizes = candidates.sum(axis=1)[rows]
    hits = candidates[rows, answers] / np.maximum(sizes, 1)
    return float(hits.mean()) if hits.size else float("nan")


class Task:
    """Base class of every generator.

    Subclasses validate their parameters in `__init__` (raising the `ValueError` of
    `common.checks`), set `vocab_size` and `seq_len`, name their slices, and implement `_fill`
    (or `_generate`).
    `generate(n, seed)` returns a dict of numpy arrays:

    - `inputs` int64 [n, seq_len], tokens in [0, vocab_size)
    - `labels` int64 [n, seq_len], the token to output after reading inputs[:, :t+1]; -100 elsewhere
    - any other key is a slice: per example [n] or per position [n, seq_len] (-1 = no value);
      the harness reports accuracy sliced by each value (`test/acc_by/<key>/<value>`).
    """

    registry_name: str
    version: int = 1
    """Bump when the generator's output for a given (params, seed) changes: it keys the cache."""
    vocab_size: int
    seq_len: int

    def generate(self, num_examples: int, seed: int) -> dict[str, np.ndarray]:
        """Deterministic in (params, num_examples, seed): uses only `np.random.default_rng(seed)`.

        `num_examples` must be an int >= 1 and `seed` an int >= 0 (else the `ValueError`).
        """
        require_int("num_examples", num_examples, 1)
        require_int("seed", seed, 0)
        data = self._generate(num_examples, np.random.default_rng(seed))
        assert data["inputs"].shape == (num_examples, self.seq_len), data["inputs"].shape
        return data

    position_slices: tuple[str, ...] = ()
    """Per-position slice keys ([N, seq_len], -1 where the position has no value)."""
    example_slices: tuple[str, ...] = ()
    """Per-example slice keys ([N])."""

    def _generate(self, num_examples: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Allocate inputs (0), labels (-100) and slices (-1), then `_fill` them in chunks of
        rows, so memory stays bounded whatever `num_examples`."""
        shape = (num_examples, self.seq_len)
        out = {
            "inputs": np.zeros(shape, dtype=np.int64),
            "labels": np.full(shape, IGNORE, dtype=np.int64),
        }
        out.update({name: np.full(shape, -1, dtype=np.int64) for name in self.position_slices})
        out.update(
            {name: np.full(num_examples, -1, dtype=np.int64) for name in self.example_slices}
        )
        for rows in row_chunks(num_examples, chunk_rows(self.seq_len, self.vocab_size)):
            self._fill({key: array[rows] for key, array in out.items()}, rng)
        return out

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Write one chunk of rows of every array of `_generate` in place."""
        raise NotImplementedError

    def baselines(self, data: dict[str, np.ndarray]) -> dict[str, float]:
        """Accuracy of binding-free strategies on `data` (a set this task generated): the
        expected fraction of scored positions a strategy gets right, computed exactly (the
        mean over scored positions of P(guess = label)), never sampled.

        - `chance`: a uniform guess over the answer alphabet (`answer_tokens`);
        - `in_context`: a uniform guess among the candidate answers present in the input
          (`candidates`), with no key bound to its value.
        Tasks with more binding-free strategies add them (MQAR: `elimination`)."""
        low, high = self.answer_tokens
        return {
            "chance": 1.0 / (high - low),
            "in_context": guess_accuracy(self.candidates(data["inputs"]), data["labels"]),
        }

    @property
    def answer_tokens(self) -> tuple[int, int]:
        """The answer alphabet [low, high): every label is one of these tokens."""
        raise NotImplementedError

    def candidates(self, inputs: np.ndarray) -> np.ndarray:
        """bool [N, vocab_size]: the answers a binding-free reader of example i's input can
        see (the same for every scored position of the example)."""
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """The constructor's parameters with their current values (the resolved `task_params`)."""
        names = inspect.signature(type(self).__init__).parameters
        return {name: getattr(self, name) for name in names if name != "self"}

    def with_seq_len(self, seq_len: int) -> "Task":
        """The same task at another length (length generalisation); raises if it cannot fit."""
        return type(self)(**{**self.params(), "seq_len": seq_len})
