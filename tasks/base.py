"""The task API (README "Extending"): a Task turns (params, seed) into token arrays and labels."""

import inspect
from typing import Any

import numpy as np

from common.checks import require_int
from tasks.sampling import chunk_rows, row_chunks

IGNORE = -100
"""Label of a position where nothing is scored (torch's cross-entropy `ignore_index`)."""


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

    def params(self) -> dict[str, Any]:
        """The constructor's parameters with their current values (the resolved `task_params`)."""
        names = inspect.signature(type(self).__init__).parameters
        return {name: getattr(self, name) for name in names if name != "self"}

    def with_seq_len(self, seq_len: int) -> "Task":
        """The same task at another length (length generalisation); raises if it cannot fit."""
        return type(self)(**{**self.params(), "seq_len": seq_len})
