"""The vectorised samplers: right support, no repeats, and the distributions they claim."""

import itertools

import numpy as np
import pytest

from tasks.sampling import (
    chunk_rows,
    depth_bins,
    row_chunks,
    sample_block_starts,
    sample_distinct,
    sample_excluding,
    sample_sorted_subsets,
    sample_weighted_distinct,
)


def assert_close_counts(counts: np.ndarray, probs: np.ndarray, total: int) -> None:
    """Each count within 5 binomial standard deviations of total * p."""
    expected = total * probs
    sigma = np.sqrt(total * probs * (1 - probs)) + 1e-9
    assert np.all(np.abs(counts - expected) <= 5 * sigma), (counts, expected)


@pytest.mark.parametrize("method", ["floyd", "sort", "auto", "permutation", "auto_permutation"])
def test_sample_distinct_is_a_uniform_ordered_subset(method):
    rng = np.random.default_rng(0)
    draws = sample_distinct(rng, 40_000, 5, 2, method=method)
    assert draws.dtype == np.int64 and draws.shape == (40_000, 2)
    assert np.all(draws[:, 0] != draws[:, 1]) and draws.min() >= 0 and draws.max() < 5
    pairs = list(itertools.permutations(range(5), 2))
    counts = np.array([np.sum((draws[:, 0] == a) & (draws[:, 1] == b)) for a, b in pairs])
    assert_close_counts(counts, np.full(len(pairs), 1 / len(pairs)), len(draws))


@pytest.mark.parametrize("method", ["floyd", "sort", "permutation"])
def test_sample_distinct_full_population_is_a_permutation(method):
    draws = sample_distinct(np.random.default_rng(1), 1000, 7, 7, method=method)
    assert np.array_equal(np.sort(draws, axis=1), np.broadcast_to(np.arange(7), (1000, 7)))
    # every value lands in the first column about equally often
    counts = np.bincount(draws[:, 0], minlength=7)
    assert_close_counts(counts, np.full(7, 1 / 7), 1000)


def test_sample_distinct_rejects_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="k=6"):
        sample_distinct(rng, 3, 5, 6)
    with pytest.raises(ValueError, match="method='nope'"):
        sample_distinct(rng, 3, 5, 2, method="nope")


def test_weighted_draws_follow_sequential_sampling_without_replacement():
    weights = np.array([5.0, 3.0, 1.0, 1.0])
    p = weights / weights.sum()
    n = 60_000
    draws = sample_weighted_distinct(np.random.default_rng(2), weights, n, 3)
    assert np.all(np.sort(draws, axis=1)[:, 1:] != np.sort(draws, axis=1)[:, :-1])
    assert_close_counts(np.bincount(draws[:, 0], minlength=4), p, n)
    # second draw: P(j) = sum_{i != j} p_i p_j / (1 - p_i)
    second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j) for j in range(4)])
    assert_close_counts(np.bincount(draws[:, 1], minlength=4), second, n)


def test_sample_excluding_never_emits_an_excluded_token_and_is_uniform_otherwise():
    rng = np.random.default_rng(3)
    excluded = np.array([[1, 2, 3]] * 500 + [[4, 5, 6]] * 500)
    out = sample_excluding(rng, (1000, 200), 1, 8, excluded)
    assert out.shape == (1000, 200) and out.min() >= 1 and out.max() < 8
    assert not np.any(out[:, :, None] == excluded[:, None, :])
    first = np.bincount(out[:500].ravel(), minlength=8)[[4, 5, 6, 7]]
    assert_close_counts(first, np.full(4, 0.25), 500 * 200)


def test_row_chunks_cover_every_row_once():
    chunks = row_chunks(10, 3)
    assert [(c.start, c.stop) for c in chunks] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert chunk_rows(256, 256) >= 1 and chunk_rows(10**9, 10**9) == 1


def test_block_starts_are_uniform_over_non_overlapping_placements():
    starts = sample_block_starts(np.random.default_rng(4), 30_000, 5, 2)  # 2 pairs in 5 tokens
    configs = [(0, 2), (0, 3), (1, 3)]  # every way to place them
    counts = np.array([np.sum((starts[:, 0] == a) & (starts[:, 1] == b)) for a, b in configs])
    assert counts.sum() == 30_000
    assert_close_counts(counts, np.full(3, 1 / 3), 30_000)


def test_depth_bins_round_to_tenths():
    assert depth_bins(np.array([0, 4, 5, 20]), 20).tolist() == [0, 2, 2, 10]
    assert depth_bins(np.array([0]), 0).tolist() == [0]


@pytest.mark.parametrize("method", ["floyd", "scores", "auto"])
@pytest.mark.parametrize("width", [3, 5])
def test_sorted_subsets_of_rows_of_different_sizes_are_uniform(width: int, method: str) -> None:
    """Rows of (population, count) (5, 2), (7, 3), (6, 1) mixed in one call: each row's first
    `count` columns are a uniform sorted subset of its own population, the rest padding."""
    kinds = np.array([(5, 2), (7, 3), (6, 1)])
    pick = np.random.default_rng(2).integers(0, 3, size=60_000)
    populations, counts = kinds[pick, 0], kinds[pick, 1]
    out = sample_sorted_subsets(np.random.default_rng(3), populations, counts, width, method)
    assert out.shape == (60_000, width) and out.dtype == np.int64
    for population, count in kinds:
        rows = out[(populations == population) & (counts == count)]
        assert np.all(rows[:, count:] == 7) and np.all(np.diff(rows[:, :count], axis=1) > 0)
        subsets = list(itertools.combinations(range(population), count))
        found = np.array([np.sum(np.all(rows[:, :count] == s, axis=1)) for s in subsets])
        assert found.sum() == len(rows)
        assert_close_counts(found, np.full(len(subsets), 1 / len(subsets)), len(rows))


class FixedScores:
    """A stand-in for the generator whose `random` returns the given scores."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def random(self, shape: tuple[int, int]) -> np.ndarray:
        assert shape == self.scores.shape
        return self.scores.copy()


def argsort_subsets(scores: np.ndarray, populations, counts, width: int) -> np.ndarray:
    """The definition: the columns of the counts[r] smallest scores of row r (the row's
    columns from populations[r] on excluded), ascending, padded with max(populations)."""
    top = scores.shape[1]
    scores = np.where(np.arange(top) >= populations[:, None], 2.0, scores)
    picked = np.argsort(scores, axis=1)[:, :width]
    return np.sort(np.where(np.arange(width) >= counts[:, None], top, picked), axis=1)


@pytest.mark.parametrize("tie", [False, True])
def test_sorted_subsets_by_scores_are_the_smallest_scores_columns(tie: bool) -> None:
    """The scores method picks exactly the columns of each row's counts[r] smallest scores
    (rows with count 0 included); with a tie at a row's threshold, counts[r] of them still."""
    rng = np.random.default_rng(4)
    populations = rng.integers(12, 30, size=500)
    counts = rng.integers(0, 11, size=500)
    scores = rng.random((500, 29))
    if tie:  # row 0: its 3rd and 4th smallest scores equal
        populations[0], counts[0] = 29, 3
        scores[0, :5] = [0.1, 0.2, 0.3, 0.3, 0.05]
        scores[0, 5:] = 0.5
    out = sample_sorted_subsets(FixedScores(scores), populations, counts, 10, "scores")
    assert np.array_equal(out, argsort_subsets(scores, populations, counts, 10))
    assert np.all((out < 29).sum(axis=1) == counts)


def test_weighted_draws_with_sizes_are_the_race_over_each_rows_own_entries():
    """With `sizes`, row r is the exponential race over its first sizes[r] entries: the
    columns of the k smallest E_i / w_i among them, in order, from the generator's own
    exponentials; and never an entry past sizes[r]."""
    rng = np.random.default_rng(5)
    weights = np.arange(1, 41, dtype=np.float64) ** -0.7
    sizes = rng.integers(6, 41, size=2000)
    draws = sample_weighted_distinct(np.random.default_rng(6), weights, 2000, 6, sizes)
    exponentials = np.random.default_rng(6).standard_exponential((2000, 40))
    scores = np.where(np.arange(40) >= sizes[:, None], np.inf, exponentials / weights)
    assert np.array_equal(draws, np.argsort(scores, axis=1)[:, :6])
    assert np.all(draws < sizes[:, None])


def test_sample_excluding_is_the_plain_rejection_loop():
    """Checked a block of rows at a time or not, the draws are those of the plain loop: every
    token drawn at once, then each forbidden one redrawn in order until none is left."""
    rows, width, high = 700, 300, 50  # several blocks of the first check
    excluded = np.random.default_rng(7).integers(0, high, size=(rows, 20))
    rng = np.random.default_rng(8)
    expected = rng.integers(1, high, size=(rows, width))
    banned = np.zeros((rows, high), dtype=bool)
    banned[np.arange(rows)[:, None], excluded] = True
    bad = np.flatnonzero(banned[np.arange(rows)[:, None], expected])
    while bad.size:
        expected.flat[bad] = rng.integers(1, high, size=bad.size)
        bad = bad[banned[bad // width, expected.flat[bad]]]
    out = sample_excluding(np.random.default_rng(8), (rows, width), 1, high, excluded)
    assert out.dtype == np.int64 and np.array_equal(out, expected)
