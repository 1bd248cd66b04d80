"""What the chunk forms of the gated DPLR rule and of KDA share (docs/background.md, "The
gated DPLR rule"): the pair matrices of a chunk in blocks of bounded gate span, the unit
lower-triangular solver, the tiling of a chunk Function, and the start states run chunk
after chunk. c is the cumulative log-gate inside a chunk."""

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import (
    gate_exp,
)

SPAN = 60.0
"""The widest range of cumulative log-gates (per key dimension) that one block of
`pair_blocks` takes as one product against a reference step in its middle: every factor lies
within exp(+-SPAN / 2) and every kept weight is at least exp(-SPAN), a normal float32."""


INVERSE_STEPS = 64
"""Chunks of at most this many steps invert their unit lower-triangular system once
(`UnitLower`, then products); longer ones (the parallel form) solve it."""


def one_block(L: int, min_log_gate: float | None) -> bool:
    """Whether a chunk of L steps is one block of `pair_blocks` (L >= 2 steps spanning at
    most SPAN), its pair matrices then taken inside `_KdaChunk` or `_DplrChunk`."""
    return L >= 2 and block_steps(L, min_log_gate) >= L


def block_keep(L: int, strict: tuple[bool, ...], groups: int, like: Tensor) -> Tensor:
    """The kept pairs of one block as 1 (0 elsewhere) in like's dtype: [len(strict) L,
    groups L], row group g keeping j < i where strict[g], j <= i otherwise. A product with
    it masks (the pairs it drops are finite: exponents within +-SPAN)."""
    steps = torch.arange(L, device=like.device)
    lower = [steps[:, None] > steps if s else steps[:, None] >= steps for s in strict]
    return torch.cat(lower, -2).repeat(1, groups).to(like.dtype)


class UnitLower:
    """(I + N)^{-1} for N [..., L, L] strictly lower-triangular (zero on and above the
    diagonal), applied to a right-hand side and, transposed, to a gradient. Up to
    INVERSE_STEPS steps the inverse is formed once: N is nilpotent (N^L = 0), so

        (I + N)^{-1} = sum_{p<L} (-N)^p = (I - N)(I + N^2)(I + N^4) ... (I + N^{2^m}),

    2 ceil(log2 L) - 2 products; beyond, each application is a triangular solve."""

    def __init__(self, N: Tensor | None, inverse: Tensor | None = None) -> None:
        self.N, self.inverse = N, inverse
        if inverse is None and N.shape[-1] <= INVERSE_STEPS:
            power = -N
            inverse = power + torch.eye(N.shape[-1], dtype=N.dtype, device=N.device)
            covered = 2  # the powers summed so far: 0 .. covered - 1
            while covered < N.shape[-1]:
                power = power @ power
                inverse = addmm(inverse, inverse, power)
                covered *= 2
            self.inverse = inverse

    def kept(self) -> Tensor:
        """What `restored` rebuilds it from: the inverse, or N beyond INVERSE_STEPS."""
        return self.N if self.inverse is None else self.inverse

    @staticmethod
    def restored(kept: Tensor) -> "UnitLower":
        """The solver `kept` came from."""
        if kept.shape[-1] > INVERSE_STEPS:
            return UnitLower(kept)
        return UnitLower(None, inverse=kept)

    def solve(self, R: Tensor) -> Tensor:
        """(I + N)^{-1} R."""
        if self.inverse is not None:
            return self.inverse @ R
        return torch.linalg.solve_triangular(self.N, R, upper=False, unitriangular=True)

    def solve_transposed(self, R: Tensor) -> Tensor:
        """(I + N)^{-T} R."""
        if self.inverse is not None:
            return self.inverse.transpose(-1, -2) @ R
        Nt = self.N.transpose(-1, -2)
        return torch.linalg.solve_triangular(Nt, R, upper=True, unitriangular=True)


def addmm(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """x + a @ b over any leading dimensions (one batched product-and-add)."""
    out = torch.baddbmm(x.flatten(0, -3), a.flatten(0, -3), b.flatten(0, -3))
    return out.view(x.shape)


DPLR_TILE_BYTES = 1 << 19
"""The most bytes of one [L, D] input per tile of `_KdaChunk` and `_DplrChunk`: each tile's
temporaries stay small (in a core's L2, and reused from tile to tile rather than newly
mapped), and the backward recomputes them from the inputs and the tile's inverse."""


def row_tiles(rows: int, row_bytes: int) -> list[slice]:
    """Tiles of whole chunks (rows), at most DPLR_TILE_BYTES of one input each (at least one row);
    one tile while torch.compile traces (a graph, not a Python loop unrolled)."""
    per = rows if torch.compiler.is_compiling() else max(1, DPLR_TILE_BYTES // row_bytes)
    return [slice(r, min(r + per, rows)) for r in range(0, rows, per)]


def by_rows(*xs: Tensor | None) -> list[Tensor | None]:
    """[..., L, F] -> [R, L, F] (R chunks, one row each)."""
    return [None if x is None else x.reshape(-1, *x.shape[-2:]) for x in xs]


def tiled_forward(ctx: Any, kind: type, inputs: tuple, ends: bool) -> tuple[Tensor, ...]:
    """A chunk Function's forward, tile by tile of `kind` (`_KdaTile`, `_DplrTile`): the
    outputs O [..., L, Dv], and with `ends` Q_s [..., L, D], the transitions [..., D, D] and
    the updates [..., D, Dv]; saves the inputs and each tile's inverse (or strictly lower
    matrix, `UnitLower.kept`)."""
    k, v = inputs[2], inputs[3]
    lead, (L, D), Dv = k.shape[:-2], k.shape[-2:], v.shape[-1]
    rows = by_rows(*inputs)
    R = rows[2].shape[0]
    outs = [v.new_empty(R, L, Dv)]
    if ends:
        outs += [k.new_empty(R, L, D), k.new_empty(R, D, D), v.new_empty(R, D, Dv)]
    ctx.tiles = row_tiles(R, L * D * k.element_size())
    kept = k.new_empty(R, L, L)
    for t in ctx.tiles:
        tile = kind(*(None if x is None else x[t] for x in rows))
        tile.forward(*(out[t] for out in outs))
        kept[t] = tile.solver.kept()
    ctx.save_for_backward(kept, *rows)
    ctx.lead = lead
    return tuple(out.view(*lead, *out.shape[1:]) for out in outs)


def tiled_backward(ctx: Any, kind: type, grads: tuple) -> list[Tensor | None]:
    """A chunk Function's backward, tile by tile, each tile's intermediates recomputed from
    the inputs and its saved inverse: the gradients of the inputs (None for pairs taken
    inside)."""
    kept, *rows = ctx.saved_tensors
    grads = by_rows(*grads)
    outs = [None if x is None else torch.empty_like(x) for x in rows]
    for t in ctx.tiles:
        solver = UnitLower.restored(kept[t])
        tile = kind(*(None if x is None else x[t] for x in rows), solver=solver)
        for out, grad in zip(outs, tile.backward(*(g[t] for g in grads)), strict=True):
            if out is not None:
                out[t] = grad
    return [None if x is None else x.view(*ctx.lead, *x.shape[1:]) for x in outs]


def across_chunks(
    o: Tensor, q_start: Tensor, transition: Tensor, update: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The chunks' outputs from a zero start, o [B, H, n, L, Dv], completed by their start
    states: S runs chunk after chunk, S <- transition S + update (transition [B, H, n, D, D],
    update [B, H, n, D, Dv]; `_StartStates`), and o += q_start S_start (q_start
    [B, H, n, L, D]: the queries as they read the start state). Returns (o [B, H, n L, Dv],
    the state after the last chunk); one chunk from the empty state is its update."""
    B, H, n, L, Dv = o.shape
    if S is None and n == 1:
        return o.reshape(B, H, L, Dv), update[:, :, 0]
    if S is None:
        S = o.new_zeros(B, H, transition.shape[-1], Dv)
    starts, S = _StartStates.apply(transition, update, S)
    return (o + q_start @ starts).reshape(B, H, n * L, Dv), S


class _StartStates(torch.autograd.Function):
    """The chunks' start states S_0 = S, S_{c+1} = T_c S_c + U_c: (starts [B, H, n, D, Dv],
    S_n) from T [B, H, n, D, D], U [B, H, n, D, Dv] and S [B, H, D, Dv]. Backward, from the
    last chunk back: G_n = dS_n, G_c = dstarts_c + T_c^T G_{c+1}; dU_c = G_{c+1},
    dS = G_0, and then at once dT_c = G_{c+1} S_c^T."""

    @staticmethod
    def forward(ctx: Any, T: Tensor, U: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
        B, H, n, D, Dv = U.shape
        starts = U.new_empty(B, H, n, D, Dv)
        S = S.reshape(B * H, D, Dv)
        for c in range(n):
            starts[:, :, c] = S.view(B, H, D, Dv)
            S = torch.baddbmm(U[:, :, c].flatten(0, 1), T[:, :, c].flatten(0, 1), S)
        ctx.save_for_backward(T, starts)
        return starts, S.view(B, H, D, Dv)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_starts: Tensor, grad_S: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        T, starts = ctx.saved_tensors
        B, H, n, D, Dv = starts.shape
        grad_U = torch.empty_like(starts)
        G = grad_S.reshape(B * H, D, Dv)
        for c in reversed(range(n)):
            grad_U[:, :, c] = G.view(B, H, D, Dv)
            T_c = T[:, :, c].flatten(0, 1).transpose(-1, -2)
            G = torch.baddbmm(grad_starts[:, :, c].flatten(0, 1), T_c, G)
        return grad_U @ starts.transpose(-1, -2), grad_U, G.view(B, H, D, Dv)


def block_steps(L: int, min_log_gate: float | None) -> int:
    """The steps of one block of `pair_blocks` in a chunk of L: L where L steps of the
    steepest gate span at most SPAN, else the largest power of two that does (at least 1);
    1 without a bound."""
    if min_log_gate is None:
        return 1
    step = -min_log_gate
    if L * step <= SPAN:
        return L
    return 1 << (max(1, int(SPAN / step)).bit_length() - 1)


def pair_blocks(
    x: Tensor,
    y: Tensor,
    cx: Tensor,
    cy: Tensor,
    strict: tuple[bool, ...],
    min_log_gate: float | None,
) -> Tensor:
    """M[..., (g, i), (h, j)] = sum_d x_gid y_hjd exp(cx_gid - cy_jd) for j < i where
    strict[g], j <= i otherwise, else 0: row groups x [..., Gx, L, D] (cx the same, or one
    group for all), column groups y [..., Gy, L, D], cy [..., L, D] -> M [..., Gx L, Gy L].
    cy is a cumulative log-gate (non-increasing along the steps, by at most -min_log_gate a
    step) and cx_gi lies between cy_i and cy_{i-1} (cy_{-1} = 0), so cx_gi <= cy_j on every
    kept pair.

    The steps are cut into blocks of `block_steps` (padded to a power of two of blocks), each
    spanning at most SPAN of cumulative log-gate. Inside a block, against its middle step m,

        exp(cx_i - cy_j) = exp(cx_i - cy_m) exp(cy_m - cy_j),   each factor within exp(+-SPAN/2),

    so its pairs are one product, the pairs not kept masked (a strict group's first row in a
    block pairs with nothing there and is zeroed, so that a one-step block holds no factor
    exp(-log_gate)). Then blocks are joined two by two, up to the chunk: for i in the second
    half of a joined block and j in its first, the last step r of the first half lies
    between them and

        exp(cx_i - cy_j) = exp(cx_i - cy_r) exp(cy_r - cy_j),   both factors <= 1,

    one product for all those pairs (docs/background.md, section 14's reference point). No
    exponential overflows, whatever the gates."""
    Gx, L, D = x.shape[-3:]
    Gy = y.shape[-3]
    s = min(block_steps(L, min_log_gate), L)
    nb = 1 if s == L else 1 << (math.ceil(L / s) - 1).bit_length()
    P = nb * s
    if P != L:  # steps that neither write nor read, the log-gates kept flat
        x, y = (F.pad(t, (0, 0, 0, P - L)) for t in (x, y))
        cx, cy = (
            torch.cat([t, t[..., -1:, :].expand(*t.shape[:-2], P - L, D)], -2) for t in (cx, cy)
        )
    steps = torch.arange(s, device=x.device)
    strict_rows = torch.tensor(strict, device=x.device)
    below = steps[:, None] > steps  # j < i
    keep = below | ~strict_rows[:, None, None] & (steps[:, None] == steps)  # [Gx, s, s]
    m = (s - 1) // 2
    cyb = cy.unflatten(-2, (nb, s)).unsqueeze(-4)  # [..., 1, nb, s, D]
    ref = cyb[..., m : m + 1, :].detach()  # the weights do not depend on it: no gradient
    up = cx.unflatten(-2, (nb, s)) - ref  # [..., Gx or 1, nb, s, D]
    if s == 1:  # a strict row pairs with nothing in its block (and may hold exp(-log_gate))
        up = up.expand(*x.shape[:-2], nb, s, D).masked_fill(
            strict_rows[:, None, None, None], -math.inf
        )
    x_ref = x.unflatten(-2, (nb, s)) * up.exp()  # the exponents within +-SPAN/2 + one step
    y_ref = y.unflatten(-2, (nb, s)) * (ref - cyb).exp()
    blocks = grouped_products(x_ref, y_ref).masked_fill(~keep[:, :, None, :], 0.0)
    while blocks.shape[-5] > 1:  # [..., blocks, Gx, s, Gy, s], joined two by two
        half, joined = blocks.shape[-1], blocks.shape[-5] // 2
        xs, cxs, ys, cys = (t.unflatten(-2, (joined, 2, half)) for t in (x, cx, y, cy))
        ref = cys[..., 0, half - 1 :, :].unsqueeze(-4).detach()  # the last of each first half
        x_ref = xs[..., 1, :, :] * gate_exp(cxs[..., 1, :, :] - ref)
        y_ref = ys[..., 0, :, :] * gate_exp(ref - cys[..., 0, :, :].unsqueeze(-4))
        across = grouped_products(x_ref, y_ref)  # second halves' rows, first halves' columns
        early, late = blocks.unflatten(-5, (joined, 2)).unbind(-5)
        top = torch.cat([early, torch.zeros_like(early)], -1)
        blocks = torch.cat([top, torch.cat([across, late], -1)], -3)
    M = blocks.squeeze(-5)[..., :L, :, :L]  # [..., Gx, L, Gy, L]
    return M.reshape(*M.shape[:-4], Gx * L, Gy * L)


def grouped_products(x: Tensor, y: Tensor) -> Tensor:
    """x [..., Gx, nb, s, D], y [..., Gy, nb, s, D] -> [..., nb, Gx, s, Gy, s]: every row
    of every group against every column, block by block, as one product."""
    Gx, Gy, s = x.shape[-4], y.shape[-4], x.shape[-2]
    rows, cols = (t.movedim(-4, -3).flatten(-3, -2) for t in (x, y))  # [..., nb, G s, D]
    return (rows @ cols.transpose(-1, -2)).unflatten(-1, (Gy, s)).unflatten(-3, (Gx, s))
