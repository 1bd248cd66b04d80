"""The task API (README "Extending"): a Task turns (params, seed) into token arrays and labels."""

import inspect
from typing import Any

import numpy as np

from common.checks import is_int, require, require_int
from tasks.load import LoadDistribution, is_range, normalised, stored_weights
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


def scored_positions(data: dict[str, np.ndarray]) -> int:
    """How many positions of `data` are scored (labels != -100): the weight of the set in a
    micro average over several sets."""
    return int(np.count_nonzero(data["labels"] != IGNORE))


def pool_baselines(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Baselines of the union of several sets from each set's baselines and its number of
    scored positions: sum_s n_s b_s / sum_s n_s, the micro average `test/acc` uses (exact,
    since each b_s is a mean over the set's scored positions). Keys: those of every part."""
    total = sum(count for _, count in parts)
    names = [name for name in parts[0][0] if all(name in b for b, _ in parts)]
    return {name: sum(b[name] * count for b, count in parts) / total for name in names}


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

    A task with a load (`load_param`, see tasks/load.py) takes it as an integer or a range
    [low, high] with `load_dist` and `load_weights`; with a range every example draws its own
    load, carried in the per-example slice named `load_param` (so `test/acc_by/<load_param>/
    <load>` is accuracy against load), and the examples at load n are distributed as those of
    the task with the single load n (`at_load(n)`), whose invariants and baselines they meet.
    """

    registry_name: str
    version: int = 1
    """Bump when the generator's output for a given (params, seed) changes: it keys the cache."""
    vocab_size: int
    seq_len: int

    load_param: str | None = None
    """The constructor parameter that sets the load (e.g. "num_kv_pairs"); None: no load."""
    fills_loads_per_row: bool = False
    """True when `_fill` draws a load per row itself (`draw_loads`); otherwise a range is
    generated load by load, each group of rows by the single-load task (`at_load`)."""
    load_dist: str = "uniform"
    load_weights: dict[int, float] | None = None
    _loads: LoadDistribution | None = None

    def _init_load(self, value: Any, load_dist: Any, load_weights: Any) -> None:
        """Store the load `value` (already checked: an integer or a range whose largest load
        fits), `load_dist` and `load_weights` (checked here: tasks/load.py)."""
        self._loads = LoadDistribution.build(self.load_param, value, load_dist, load_weights)
        setattr(self, self.load_param, normalised(value))
        self.load_dist = load_dist
        self.load_weights = stored_weights(load_weights)

    def loads(self) -> dict[int, float]:
        """The loads the examples carry and their probabilities (ascending by load; one entry
        for a single load, none for a task without a load)."""
        return {} if self._loads is None else dict(self._loads.probabilities)

    @property
    def has_load_range(self) -> bool:
        """The load is written as a range: every example carries its load in the slice
        `load_param`."""
        return self.load_param is not None and is_range(getattr(self, self.load_param))

    def single_load_params(self, load: int) -> dict[str, Any]:
        """The parameters of this task at the single load `load`."""
        single = {self.load_param: int(load), "load_dist": "uniform", "load_weights": None}
        return {**self.params(), **single}

    def at_load(self, load: int) -> "Task":
        """This task with every example at `load` (one of `loads()`)."""
        if not self.has_load_range and self.loads() == {load: 1.0}:
            return self
        cache = self.__dict__.setdefault("_at_load", {})
        if load not in cache:
            cache[load] = type(self)(**self.single_load_params(load))
        return cache[load]

    def draw_loads(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """int64 [rows]: each example's load (nothing drawn from `rng` for a single load)."""
        return self._loads.draw(rng, rows)

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

    def _allocate(self, num_examples: int, prefill: bool = True) -> dict[str, np.ndarray]:
        """inputs (0), labels (-100) and every slice (-1) of `num_examples` examples (left
        uninitialised unless `prefill`); with a load range, the per-example slice
        `load_param` too."""
        shape = (num_examples, self.seq_len)
        names = self.example_slices
        if self.has_load_range and self.load_param not in names:
            names = (*names, self.load_param)
        if not prefill:
            arrays = ["inputs", "labels", *self.position_slices]
            return {
                **{name: np.empty(shape, np.int64) for name in arrays},
                **{name: np.empty(num_examples, np.int64) for name in names},
            }
        return {
            "inputs": np.zeros(shape, dtype=np.int64),
            "labels": np.full(shape, IGNORE, dtype=np.int64),
            **{name: np.full(shape, -1, dtype=np.int64) for name in self.position_slices},
            **{name: np.full(num_examples, -1, dtype=np.int64) for name in names},
        }

    def _generate(self, num_examples: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Allocate the arrays, then `_fill` them in chunks of rows, so memory stays bounded
        whatever `num_examples`; a load range goes through `_generate_by_load` (unless the
        task's `_fill` draws the loads itself: `fills_loads_per_row`)."""
        if self.has_load_range and not self.fills_loads_per_row:
            return self._generate_by_load(num_examples, rng)
        out = self._allocate(num_examples)
        for rows in row_chunks(num_examples, chunk_rows(self.seq_len, self.vocab_size)):
            self._fill({key: array[rows] for key, array in out.items()}, rng)
        return out

    def _generate_by_load(
        self, num_examples: int, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Every example's load first (`draw_loads`), then the examples in order of load, in
        chunks of rows: a chunk's runs of equal load are filled by the single-load task
        `at_load(n)` into one reused buffer, which is then scattered to the examples' rows.
        One vectorised call per (load, chunk), never a Python loop over examples; each array
        is written once more than with a single load."""
        loads = self.draw_loads(rng, num_examples)
        order = np.argsort(loads, kind="stable")  # the examples, load by load
        by_load = loads[order]
        out = self._allocate(num_examples, prefill=False)
        out[self.load_param][:] = loads
        chunk = chunk_rows(self.seq_len, self.vocab_size)
        buffer = self.at_load(int(by_load[0]))._allocate(min(chunk, num_examples), prefill=False)
        for rows in row_chunks(num_examples, chunk):
            size = rows.stop - rows.start
            part = {key: array[:size] for key, array in buffer.items()}
            for name, array in part.items():
                array.fill(0 if name == "inputs" else IGNORE if name == "labels" else -1)
            run_loads = by_load[rows]
            edges = [0, *(np.flatnonzero(np.diff(run_loads)) + 1), size]
            for a, b in zip(edges[:-1], edges[1:], strict=True):
                run = {key: array[a:b] for key, array in part.items()}
                self.at_load(int(run_loads[a]))._fill(run, rng)
            for key, array in part.items():
                out[key][order[rows]] = array
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
        Tasks with more binding-free strategies add them (MQAR: `elimination`).
        With a load range: the micro average over every load of `baselines_by_load`
        (`pool_baselines`), the same average as `test/acc`."""
        if not self.has_load_range:
            return self._baselines(data)
        by_load = self.baselines_by_load(data)
        counts = np.bincount(
            data[self.load_param][np.nonzero(data["labels"] != IGNORE)[0]],
            minlength=max(by_load) + 1,
        )
        return pool_baselines([(by_load[n], int(counts[n])) for n in by_load])

    def baselines_by_load(self, data: dict[str, np.ndarray]) -> dict[int, dict[str, float]]:
        """{load: {name: accuracy}}: `baselines` of the examples at each load that occurs in
        `data`, ascending, each computed by the single-load task `at_load(load)` (the same
        names as `baselines`). A set without the slice `load_param` (a single load) gives its
        one load. The harness records them as `test/baseline_by/<load_param>/<load>/<name>`."""
        if self.load_param is None:
            return {}
        if self.load_param not in data or not self.has_load_range:
            (load,) = self.loads()
            return {load: self.at_load(load)._baselines(data)}
        loads = data[self.load_param]
        out = {}
        for load in np.unique(loads):
            rows = loads == load
            part = {key: array[rows] for key, array in data.items() if key != self.load_param}
            out[int(load)] = self.at_load(int(load))._baselines(part)
        return out

    def _baselines(self, data: dict[str, np.ndarray]) -> dict[str, float]:
        """`baselines` of a set at a single load (or of a task without a load)."""
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

    def with_params(self, **overrides: Any) -> "Task":
        """The same task with some parameters changed (checked as at construction); an
        unknown parameter name raises the `ValueError` that lists the known ones. A new load
        comes with its own distribution: `load_dist` and `load_weights` return to their
        defaults unless `overrides` sets them too."""
        known = self.params()
        if self.load_param is not None and self.load_param in overrides:
            overrides = {"load_dist": "uniform", "load_weights": None, **overrides}
        for name, value in overrides.items():
            allowed = f"a parameter of {self.registry_name}: one of {', '.join(known)}"
            require(name in known, name, value, allowed)
        return type(self)(**{**known, **overrides})

    def with_seq_len(self, seq_len: int) -> "Task":
        """The same task at another length (length generalisation); raises if it cannot fit."""
        return self.with_params(seq_len=seq_len)


class PerRowLoadTask(Task):
    """A task whose rows may hold different loads in one vectorised fill: `_fill_at(out, rng,
    load)` fills rows all at one load, `_fill_per_row(out, rng, loads)` rows at loads[r]
    (int64 [rows]); a chunk whose rows drew one load goes to `_fill_at`, so a range of one
    load gives the examples of that load."""

    fills_loads_per_row = True

    def _fill(self, out: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        if not self.has_load_range:
            return self._fill_at(out, rng, getattr(self, self.load_param))
        loads = self.draw_loads(rng, out["inputs"].shape[0])
        out[self.load_param][:] = loads
        if loads.min() == loads.max():
            return self._fill_at(out, rng, int(loads[0]))
        return self._fill_per_row(out, rng, loads)

    def _fill_at(self, out: dict[str, np.ndarray], rng: np.random.Generator, load: int) -> None:
        raise NotImplementedError

    def _fill_per_row(
        self, out: dict[str, np.ndarray], rng: np.random.Generator, loads: np.ndarray
    ) -> None:
        raise NotImplementedError
