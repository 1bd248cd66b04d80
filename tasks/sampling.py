"""Vectorised sampling helpers shared by the task generators.

Every function takes the caller's `np.random.Generator` (never the global RNG) and works on a
block of rows (examples) at once; callers bound memory by filling their output arrays in
chunks of rows (`chunk_rows`, `row_chunks`), so nothing here loops over examples in Python.
A chunk size derived from the task's parameters keeps (params, seed) -> data deterministic.
"""

import numpy as np

ROW_BUDGET = 1 << 20
"""Elements per chunk of a [rows, seq_len] array (8 MiB of int64)."""
BITMAP_BUDGET = 1 << 24
"""Elements per chunk of a [rows, vocab_size] bitmap (16 MiB of bool)."""
EXCLUDE_BLOCK = 1 << 16
"""Draws per block of `sample_excluding`'s first check (512 KiB of int64 index)."""


def chunk_rows(seq_len: int, vocab_size: int) -> int:
    """How many examples to generate at once: bounds the per-chunk arrays' memory."""
    return max(1, min(ROW_BUDGET // max(1, seq_len), BITMAP_BUDGET // max(1, vocab_size)))


def row_chunks(num_examples: int, chunk_size: int) -> list[slice]:
    """Consecutive row slices of at most `chunk_size` covering range(num_examples)."""
    return [slice(a, min(a + chunk_size, num_examples)) for a in range(0, num_examples, chunk_size)]


def sample_weighted_distinct(
    rng: np.random.Generator,
    weights: np.ndarray,
    num_rows: int,
    k: int,
    sizes: np.ndarray | None = None,
) -> np.ndarray:
    """[num_rows, k] indices into `weights`, distinct within a row, in order of drawing.

    Exponential race (Gumbel-top-k in another form): with E_i ~ Exp(1) i.i.d., the k smallest
    E_i / weights[i], sorted ascending, have the distribution of k sequential draws without
    replacement with p(i) proportional to weights[i] (column j = draw j); -log(E_i / w_i) is
    log w_i plus Gumbel noise. `sizes` (int [num_rows], each >= k): row r draws from the
    first sizes[r] entries only (the others get the score +inf).
    """
    size = weights.shape[0]
    scores = rng.standard_exponential(size=(num_rows, size))
    scores *= 1.0 / weights  # E_i / w_i
    if sizes is not None:  # +inf past a row's size (only columns from the smallest size on)
        sizes = np.asarray(sizes)
        least = int(sizes.min())
        tail = scores[:, least:]
        np.copyto(tail, np.inf, where=np.arange(least, size)[None, :] >= sizes[:, None])
    if 4 * k >= size:  # dense: one full sort is cheaper than a partition, then a sort
        return np.argsort(scores, axis=1)[:, :k]
    top = np.argpartition(scores, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def sample_distinct(
    rng: np.random.Generator, num_rows: int, population: int, k: int, method: str = "auto"
) -> np.ndarray:
    """[num_rows, k] int64 draws from range(population), distinct within a row, uniformly ordered.

    Each row is a uniformly random ordered k-subset. `method`: "floyd" (Floyd's algorithm over
    the k slots, O(k^2) per row, best when k is small next to the population), "sort" (the k
    smallest of `population` random scores, O(population) per row), "permutation" (the first
    k of a random permutation: the argsort of `population` uniform scores, O(population log
    population) per row, the fastest for k near a small population), "auto" picks floyd or
    sort (the choice that fixes the generators' single-load data), "auto_permutation" floyd or
    permutation.
    """
    if not 0 <= k <= population:
        raise ValueError(f"k={k!r} is invalid: must be an integer in [0, population={population}]")
    if method in ("auto", "auto_permutation"):
        dense = "sort" if method == "auto" else "permutation"
        method = "floyd" if k * k <= 20 * population else dense
    if method == "sort":
        return sample_weighted_distinct(rng, np.ones(population), num_rows, k).astype(np.int64)
    if method == "permutation":
        return np.argsort(rng.random((num_rows, population)), axis=1)[:, :k]
    if method != "floyd":
        raise ValueError(
            f"method={method!r} is invalid: must be one of auto, auto_permutation, floyd, "
            "permutation, sort"
        )
    chosen = np.empty((num_rows, k), dtype=np.int64)
    for m, top in enumerate(range(population - k, population)):
        draw = rng.integers(0, top + 1, size=num_rows)
        if m:  # Floyd: a draw already taken is replaced by `top`, which no earlier step could take
            draw = np.where((chosen[:, :m] == draw[:, None]).any(axis=1), top, draw)
        chosen[:, m] = draw
    # Floyd gives a uniform subset but not a uniform order: shuffle each row.
    return rng.permuted(chosen, axis=1)


def sample_sorted_subsets(
    rng: np.random.Generator,
    populations: np.ndarray,
    counts: np.ndarray,
    width: int,
    method: str = "auto",
) -> np.ndarray:
    """int64 [rows, width]: in row r, the first counts[r] columns are a uniformly random
    counts[r]-subset of range(populations[r]), ascending; the other columns hold
    max(populations) (sorted last). Needs counts[r] <= width <= populations[r].

    One vectorised draw for rows of different sizes: Floyd's algorithm run on every row at
    once, step i of row r drawing from [0, populations[r] - counts[r] + i] (rows with
    counts[r] <= i sit it out), when width is small next to the populations; otherwise the
    columns of the counts[r] smallest of populations[r] uniform scores (the rest of the row
    scored 2, above every uniform score), a uniform counts[r]-subset. `method`:
    "floyd", "scores", or "auto" (floyd when width^2 <= 20 * min(populations))."""
    rows, top = populations.shape[0], int(populations.max())
    if method == "auto":
        method = "floyd" if width * width <= 20 * int(populations.min()) else "scores"
    if method not in ("floyd", "scores"):
        raise ValueError(f"method={method!r} is invalid: must be one of auto, floyd, scores")
    if method == "floyd":
        picked = np.full((rows, width), top, dtype=np.int64)
        for i in range(width):
            last = populations - counts + i  # Floyd's step i draws from [0, last]
            draw = rng.integers(0, last + 1)
            if i:  # a draw already taken is replaced by `last`, which no earlier step could take
                draw = np.where((picked[:, :i] == draw[:, None]).any(axis=1), last, draw)
            picked[:, i] = np.where(i < counts, draw, top)
        return np.sort(picked, axis=1)
    scores = rng.random((rows, top))
    least = int(populations.min())  # columns before it are inside every row's population
    tail = scores[:, least:]
    np.copyto(tail, 2.0, where=np.arange(least, top)[None, :] >= populations[:, None])
    # The counts[r] smallest scores of row r are those <= its counts[r]-th smallest, and
    # their columns, read in order, come ascending: a sort of the values and one threshold
    # per row, not an argsort. A tie at a threshold (a chance of about top^2 / 2^53 per row)
    # would pick more than counts[r]: then the argsort decides, as it would without ties.
    threshold = np.sort(scores, axis=1)[np.arange(rows), np.maximum(counts - 1, 0)]
    threshold[counts == 0] = -1.0  # below every score: the row picks nothing
    chosen = np.flatnonzero(scores <= threshold[:, None])  # flat in [rows, top], row by row
    if chosen.size != int(counts.sum()):
        picked = np.argsort(scores, axis=1)[:, :width]
        np.copyto(picked, top, where=np.arange(width)[None, :] >= counts[:, None])
        return np.sort(picked, axis=1)
    # the i-th chosen (flat in [rows, top]) goes to flat place i + r * width - first[r] of
    # [rows, width], first[r] = how many rows before r chose; its column is i - r * top
    first = np.cumsum(counts) - counts
    shift = np.repeat(np.arange(rows) * width - first, counts)
    picked = np.full((rows, width), top, dtype=np.int64)
    picked.reshape(-1)[np.arange(chosen.size) + shift] = chosen - np.repeat(
        np.arange(rows) * top, counts
    )
    return picked


def sample_excluding(
    rng: np.random.Generator, shape: tuple[int, int], low: int, high: int, excluded: np.ndarray
) -> np.ndarray:
    """int64 array of `shape`: uniform over [low, high) minus the tokens in `excluded[row]`.

    `excluded` is int [shape[0], m] with entries in [0, high); at least one token of [low, high)
    must stay allowed in each row. Rejection sampling: forbidden draws are redrawn until none is
    left, so every kept token is uniform over the allowed set. Memory: a [rows, high] bitmap.
    The first check against the bitmap goes a block of rows at a time, so that its index
    array stays in cache.
    """
    rows, width = shape
    banned = np.zeros((rows, high), dtype=bool)
    offsets = np.arange(rows)[:, None] * high  # flat index of row r, token t: r * high + t
    banned.ravel()[(offsets + excluded).ravel()] = True
    banned = banned.ravel()
    out = rng.integers(low, high, size=shape)
    block = max(1, EXCLUDE_BLOCK // max(1, width))
    bad = np.concatenate(
        [
            np.flatnonzero(banned[offsets[a : a + block] + out[a : a + block]]) + a * width
            for a in range(0, rows, block)
        ]
    )
    where = (bad // width) * high  # row r's start in the bitmap
    flat = out.reshape(-1)
    while bad.size:
        redraw = rng.integers(low, high, size=bad.size)
        flat[bad] = redraw
        still = banned[where + redraw]
        bad, where = bad[still], where[still]
    return out


def sample_block_starts(
    rng: np.random.Generator, num_rows: int, length: int, num_blocks: int, block: int = 2
) -> np.ndarray:
    """[num_rows, num_blocks] sorted starts of non-overlapping `block`-token spans in [0, length).

    Uniform over all such placements: choosing the blocks' positions in a line where each block
    is shrunk to one token (length - num_blocks * (block - 1) places) and re-expanding them is a
    bijection. Needs length >= num_blocks * block.
    """
    places = length - num_blocks * (block - 1)
    picked = np.sort(sample_distinct(rng, num_rows, places, num_blocks), axis=1)
    return picked + np.arange(num_blocks) * (block - 1)


def depth_bins(position: np.ndarray, last: int, bins: int = 10) -> np.ndarray:
    """int64 round(bins * position / last): 0 = at the start, `bins` = at `last` (last 0 -> 0)."""
    return np.rint(bins * position / max(last, 1)).astype(np.int64)
