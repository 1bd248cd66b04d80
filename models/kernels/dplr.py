"""The gated DPLR rule (diagonal plus low rank; docs/background.md, "The gated DPLR
rule"): a state whose transition is a per-key-dimension gate plus a rank-one correction, the
recurrence behind KDA and RWKV-7. "gate" in this module is w_t = exp(log_gate_t) in
(0, 1]^D; c = the cumulative sum of the log-gates inside a chunk (c_i the log of the product
of the gates up to step i)."""

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import (
    check_log_gate,
    check_mode,
    check_qkv,
    check_shape,
    gate_exp,
    in_blocks,
)

SPAN = 60.0
"""The widest range of cumulative log-gates (per key dimension) that one block of
`pair_blocks` takes as one product against a reference step in its middle: every factor lies
within exp(+-SPAN / 2) and every kept weight is at least exp(-SPAN), a normal float32."""

INVERSE_STEPS = 64
"""Chunks of at most this many steps invert their unit lower-triangular system once
(`UnitLower`, then products); longer ones (the parallel form) solve it."""


def gated_dplr(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 16,
    min_log_gate: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The gated diagonal-plus-low-rank rule, per head (state S: key dims x value dims):

        S_t = (diag(w_t) + a_t b_t^T) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t,
        w_t = exp(log_gate_t)

    b_t^T S_{t-1} reads the state before the step (not decayed), a_t writes that read back:
    RWKV-7 is a = kk * a_rate, b = -kk (remove a share of what is stored at kk); the gated
    delta rule with a gate per key dimension (KDA) is k -> beta k, a = -beta k,
    b = w * k (`kda_rule`, which has its own chunk form). No scaling inside.

    Args:
        q: queries.
        k: the keys written with the values.
        v: values.
        a: the rank-one correction's write direction.
        b: the rank-one correction's read direction.
        log_gate: log w_t, finite and <= 0, per key dimension.
        mode: "recurrent" (the step loop, the specification), "chunk" (chunks of
            `chunk_size` steps: a unit lower-triangular system for the corrections inside a
            chunk, the state carried from chunk to chunk by a loop; docs/background.md, "The
            gated DPLR rule"), "parallel" (the chunk form with one chunk covering the whole
            sequence).
        chunk_size: the chunk length of "chunk".
        min_log_gate: a lower bound on every log-gate (RWKV-7: -e^{-1/2}); it sets how many
            steps `pair_blocks` takes as one product. The log-gates' own minimum, read by
            the input check, is used where it can be read (a ValueError if it breaks the
            bound); under torch.compile, where nothing is read, this bound, or without one
            blocks of one step.
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k, a, b, log_gate: [B, H, T, D];  v: [B, H, T, Dv];  state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    for name, x in (("a", a), ("b", b), ("log_gate", log_gate)):
        check_shape(name, x, q.shape)
    bound = gate_bound(log_gate, min_log_gate)
    B, H, T, D = q.shape
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = dplr_recurrent(q, k, v, a, b, log_gate, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        chunks = partial(dplr_chunks, return_state=return_state, min_log_gate=bound)
        o, state = in_blocks(chunks, (q, k, v, a, b, log_gate), 2, size, initial_state)
    return (o, state) if return_state else o


def kda_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 16,
    min_log_gate: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The gated delta rule with a gate per key dimension (Kimi Delta Attention): the state
    first decays by w_t, then is corrected towards v_t at k_t with rate beta_t,

        S_t = (I - beta_t k_t k_t^T) diag(w_t) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t,
        w_t = exp(log_gate_t)

    With one gate per head (every key dimension the same) this is `gated_delta_rule`. No
    scaling inside (the caller scales q and L2-normalises k).

    Args:
        q: queries.
        k: keys.
        v: values.
        beta: the write rates, in (0, 1).
        log_gate: log w_t, finite and <= 0, per key dimension.
        mode: "recurrent" (its own step loop, the specification), "chunk" and "parallel"
            (`kda_chunks`: the gated DPLR rule's chunk form with k -> beta k, a = -beta k,
            b = w k, since (I - beta k k^T) diag(w) = diag(w) - beta k (w k)^T, reduced to
            one pair matrix of keys and one of queries).
        chunk_size: the chunk length of "chunk".
        min_log_gate: a lower bound on every log-gate, as in `gated_dplr`.
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k, log_gate: [B, H, T, D];  v: [B, H, T, Dv];  beta: [B, H, T]
        state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    check_shape("beta", beta, (B, H, T))
    check_shape("log_gate", log_gate, q.shape)
    bound = gate_bound(log_gate, min_log_gate)
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = kda_recurrent(q, k, v, beta, log_gate, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        chunks = partial(kda_chunks, return_state=return_state, min_log_gate=bound)
        o, state = in_blocks(chunks, (q, k, v, beta, log_gate), 2, size, initial_state)
    return (o, state) if return_state else o


def gate_bound(log_gate: Tensor, min_log_gate: float | None) -> float | None:
    """Checks the log-gates (`check_log_gate`) and returns the lower bound the chunk form
    works with: their minimum where it is read, else `min_log_gate`. A minimum below
    `min_log_gate` (beyond float32 rounding) is a ValueError."""
    low = check_log_gate("log_gate", log_gate)
    if low is None:
        return min_log_gate
    if min_log_gate is not None and low < min_log_gate * (1 + 1e-5):
        raise ValueError(f"log_gate must be >= min_log_gate={min_log_gate:.6g}, got {low:.6g}")
    return low


def kda_recurrent(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """KDA's specification: per token, decay each key row of S by its gate, then one
    delta-rule correction of what the decayed state holds at k_t."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    for q_t, k_t, v_t, b_t, g_t in zip(
        q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), log_gate.unbind(2), strict=True
    ):
        S = torch.exp(g_t)[..., None] * S
        recalled = torch.einsum("bhd,bhde->bhe", k_t, S)  # S^T k_t after the decay
        S = S + b_t[..., None, None] * k_t[..., :, None] * (v_t - recalled)[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S


def dplr_recurrent(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, log_gate: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The specification: one gated DPLR update per token."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    steps = (x.unbind(2) for x in (q, k, v, a, b, log_gate))
    for q_t, k_t, v_t, a_t, b_t, g_t in zip(*steps, strict=True):
        read = torch.einsum("bhd,bhde->bhe", b_t, S)  # b_t^T S_{t-1}
        S = (
            torch.exp(g_t)[..., None] * S
            + a_t[..., :, None] * read[..., None, :]
            + k_t[..., :, None] * v_t[..., None, :]
        )
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S


def dplr_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    log_gate: Tensor,
    *,
    L: int,
    state: Tensor | None,
    last: bool,
    return_state: bool = True,
    min_log_gate: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """T = n*L steps as n chunks (docs/background.md, "The gated DPLR rule"). Inside a chunk,
    with c_i the cumulative log-gate up to step i (c_{-1} = 0) and u_i = b_i^T S_{i-1} the
    corrections' reads,

        S_i = diag(exp(c_i)) S_start + sum_{j<=i} diag(exp(c_i - c_j)) (a_j u_j + k_j v_j^T)

    so the reads satisfy one unit lower-triangular system,

        (I - A_ab) U = diag(exp(c_prev)) B S_start + A_ak V,
        A_ab[i, j] = sum_d b_id exp(c_{i-1,d} - c_jd) a_jd,  A_ak likewise with k,  j < i,

    solved as U = U0 + W S_start. With P_qa, P_qk the query-side weights (c_i - c_j, j <= i):

        O = P_qa U0 + P_qk V + (diag(exp(c)) Q + P_qa W) S_start
        S_end = (diag(exp(c_end)) + A_end^T W) S_start + A_end^T U0 + K_end^T V

    with A_end, K_end the rows a_j, k_j times exp(c_end - c_j); only the last line runs
    chunk after chunk (`across_chunks`). The four pair matrices are the rows (b, q) against
    the columns (a, k): inside `_DplrChunk` where the chunk is one block of `pair_blocks`,
    else `pair_blocks` first."""
    B, H, T, D = q.shape
    Dv, n = v.shape[-1], T // L
    qc, kc, ac, bc, gc = (x.reshape(B, H, n, L, D) for x in (q, k, a, b, log_gate))
    vc = v.reshape(B, H, n, L, Dv)
    c = gc.cumsum(-2)
    pairs = None
    if not one_block(L, min_log_gate):
        c_prev = F.pad(c[..., :-1, :], (0, 0, 1, 0))  # c_{i-1}, 0 before the chunk
        rows, cx = torch.stack([bc, qc], -3), torch.stack([c_prev, c], -3)
        pairs = pair_blocks(rows, torch.stack([ac, kc], -3), cx, c, (True, False), min_log_gate)
    ends = state is not None or n > 1 or return_state or not last
    outs = _DplrChunk.apply(pairs, qc, kc, vc, ac, bc, c, ends)
    if not ends:
        return outs[0].reshape(B, H, T, Dv), None
    return across_chunks(*outs, state)


def kda_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    *,
    L: int,
    state: Tensor | None,
    last: bool,
    return_state: bool = True,
    min_log_gate: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """`dplr_chunks` for KDA (k -> beta k, a = -beta k, b = w k). With c the cumulative
    log-gate, K[i, j] = sum_d k_id exp(c_id - c_jd) k_jd for j < i and P[i, j] the same with
    q_i for j <= i (b_i exp(c_{i-1}) = k_i exp(c_i), so both are keys' columns),

        A_ab = -K diag(beta),   A_ak = K diag(beta),   P_qa = -P diag(beta),   P_qk = P diag(beta)

    and with T = (I + K diag(beta))^{-1}, T K diag(beta) = I - T gives W = T diag(exp(c)) K,
    U0 = V - T V. Every product of `dplr_chunks` then goes through one matrix,

        Y = diag(beta) T [diag(exp(c)) K | V]
        O = P Y_V + (diag(exp(c)) Q - P Y_K) S_start
        S_end = (diag(exp(c_end)) - K_end^T Y_K) S_start + K_end^T Y_V

    with K_end the rows k_j exp(c_end - c_j) (the WY form of the gated delta rule, per key
    dimension): `_KdaChunk`, then `across_chunks`."""
    B, H, T, D = q.shape
    Dv, n = v.shape[-1], T // L
    qc, kc, gc = (x.reshape(B, H, n, L, D) for x in (q, k, log_gate))
    vc = v.reshape(B, H, n, L, Dv)
    c = gc.cumsum(-2)
    pairs = None
    if not one_block(L, min_log_gate):
        rows, cx = torch.stack([kc, qc], -3), c.unsqueeze(-3)
        pairs = pair_blocks(rows, kc.unsqueeze(-3), cx, c, (True, False), min_log_gate)
    ends = state is not None or n > 1 or return_state or not last
    outs = _KdaChunk.apply(pairs, qc, kc, vc, beta.reshape(B, H, n, L, 1), c, ends)
    if not ends:
        return outs[0].reshape(B, H, T, Dv), None
    return across_chunks(*outs, state)


def one_block(L: int, min_log_gate: float | None) -> bool:
    """Whether a chunk of L steps is one block of `pair_blocks` (L >= 2 steps spanning at
    most SPAN), its pair matrices then taken inside `_KdaChunk` or `_DplrChunk`."""
    return L >= 2 and block_steps(L, min_log_gate) >= L


def _block_keep(L: int, strict: tuple[bool, ...], groups: int, like: Tensor) -> Tensor:
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
                inverse = _addmm(inverse, inverse, power)
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


def _addmm(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """x + a @ b over any leading dimensions (one batched product-and-add)."""
    out = torch.baddbmm(x.flatten(0, -3), a.flatten(0, -3), b.flatten(0, -3))
    return out.view(x.shape)


DPLR_TILE_BYTES = 1 << 19
"""The most bytes of one [L, D] input per tile of `_KdaChunk` and `_DplrChunk`: each tile's
temporaries stay small (in a core's L2, and reused from tile to tile rather than newly
mapped), and the backward recomputes them from the inputs and the tile's inverse."""


def _row_tiles(rows: int, row_bytes: int) -> list[slice]:
    """Tiles of whole chunks (rows), at most DPLR_TILE_BYTES of one input each (at least one row);
    one tile while torch.compile traces (a graph, not a Python loop unrolled)."""
    per = rows if torch.compiler.is_compiling() else max(1, DPLR_TILE_BYTES // row_bytes)
    return [slice(r, min(r + per, rows)) for r in range(0, rows, per)]


def _by_rows(*xs: Tensor | None) -> list[Tensor | None]:
    """[..., L, F] -> [R, L, F] (R chunks, one row each)."""
    return [None if x is None else x.reshape(-1, *x.shape[-2:]) for x in xs]


class _KdaChunk(torch.autograd.Function):
    """`kda_chunks` inside each chunk, from q, k [..., L, D], v [..., L, Dv], beta
    [..., L, 1], the cumulative log-gates c [..., L, D] and the pair matrices [K; P]
    ([..., 2L, L], masked; None: one block, taken here against the middle step m,
    [K; P] = keep * ([k e; q e] (k / e)^T) with e = exp(c - c_m), every exponential then a
    product with e or 1 / e): the zero-start outputs O = P Y_V, and with `ends` also the
    queries as they read the start state Q_s = diag(exp(c)) Q - P Y_K, the transition
    diag(exp(c_end)) - K_end^T Y_K and the update K_end^T Y_V. Tile by tile (`_KdaTile`);
    the backward keeps only the inputs and each tile's inverse."""

    @staticmethod
    def forward(
        ctx: Any,
        pairs: Tensor | None,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        beta: Tensor,
        c: Tensor,
        ends: bool,
    ) -> tuple[Tensor, ...]:
        return _tiled_forward(ctx, _KdaTile, (pairs, q, k, v, beta, c), ends)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        return (*_tiled_backward(ctx, _KdaTile, grads), None)


class _KdaTile:
    """One tile of `_KdaChunk`: its intermediates from its inputs (rows of chunks), the
    triangular inverse formed or, in the backward, given.

    Backward, with Z = P Y, X = T R (R = [diag(exp(c)) K | V], Y = diag(beta) X) and
    C = K_end^T Y: dZ = [-dQ_s | dO], dC = [-dTransition | dUpdate]; dP = dZ Y^T,
    dY = P^T dZ + K_end dC, dK_end = Y dC^T; dbeta = rowsum(dY X), dX = diag(beta) dY;
    dR = T^T dX and dN = -dR X^T (N = K diag(beta)), so dK = dN diag(beta) and
    dbeta += colsum(dN K); the pairs' d[K e; Q e] = dM (K / e), d(K / e) = dM^T [K e; Q e];
    every exp(.) passes its gradient to c (c_m takes none: the weights do not depend on
    it). The pair matrices' gradient is left unmasked (`pair_blocks` masks it)."""

    def __init__(
        self,
        pairs: Tensor | None,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        beta: Tensor,
        c: Tensor,
        solver: UnitLower | None = None,
    ) -> None:
        L = k.shape[-2]
        self.q, self.k, self.v, self.beta, self.c_end = q, k, v, beta, c[..., L - 1 :, :]
        self.inside = pairs is None
        if pairs is None:
            ref = c[..., (L - 1) // 2, None, :]
            self.e = (c - ref).exp()  # within exp(+-SPAN/2)
            self.e_inv = self.e.reciprocal()
            self.rows, self.cols = torch.cat([k * self.e, q * self.e], -2), k * self.e_inv
            self.keep = _block_keep(L, (True, False), 1, c)
            pairs = (self.rows @ self.cols.transpose(-1, -2)).mul_(self.keep)
            self.alive = self.e * ref.exp()
            self.since_end = self.e_inv * (self.c_end - ref).exp()
        else:
            self.alive, self.since_end = gate_exp(c), gate_exp(self.c_end - c)
        self.K, self.P = pairs.split(L, -2)
        self.solver = UnitLower(self.K * beta.transpose(-1, -2)) if solver is None else solver
        self.X = self.solver.solve(torch.cat([k * self.alive, v], -1))
        self.Y = beta * self.X
        self.k_end = k * self.since_end

    def forward(self, o: Tensor, *ends: Tensor) -> None:
        """Writes O, and Q_s, the transition and the update if asked for."""
        D = self.k.shape[-1]
        Z = self.P @ self.Y
        o.copy_(Z[..., D:])
        if not ends:
            return
        q_start, transition, update = ends
        C = self.k_end.transpose(-1, -2) @ self.Y
        torch.neg(C[..., :D], out=transition)
        transition.diagonal(dim1=-2, dim2=-1).add_(gate_exp(self.c_end.squeeze(-2)))
        update.copy_(C[..., D:])
        torch.addcmul(Z[..., :D].neg_(), self.q, self.alive, out=q_start)

    def backward(self, grad_o: Tensor, *grads: Tensor) -> tuple[Tensor | None, ...]:
        """(dpairs or None, dq, dk, dv, dbeta, dc) from dO (and dQ_s, dTransition, dUpdate)."""
        L, D = self.k.shape[-2:]
        q, k, beta, X, Y, alive = self.q, self.k, self.beta, self.X, self.Y, self.alive
        if grads:
            grad_q_start, grad_transition, grad_update = grads
            dZ = torch.cat([-grad_q_start, grad_o], -1)
            dC = torch.cat([-grad_transition, grad_update], -1)  # [..., D, D + Dv]
            dY = _addmm(self.P.transpose(-1, -2) @ dZ, self.k_end, dC)
            dk_end = Y @ dC.transpose(-1, -2)
            dq = grad_q_start * alive
            dk = dk_end * self.since_end
            from_end = dk_end * self.k_end  # the gradient of (c_end - c)
            dc = dq * q - from_end
            end = grad_transition.diagonal(dim1=-2, dim2=-1) * gate_exp(self.c_end.squeeze(-2))
            dc[..., L - 1, :] += from_end.sum(-2) + end
        else:
            dZ = F.pad(grad_o, (D, 0))
            dY = self.P.transpose(-1, -2) @ dZ
            dq, dk, dc = (torch.zeros_like(k) for _ in range(3))
        dP = dZ @ Y.transpose(-1, -2)
        dbeta = (dY * X).sum(-1, keepdim=True)
        dR = self.solver.solve_transposed(beta * dY)
        dN = (dR @ X.transpose(-1, -2)).neg_()
        dbeta += (dN * self.K).sum(-2).unsqueeze(-1)
        dR_k, dv = dR.split([D, dR.shape[-1] - D], -1)
        from_alive = dR_k * alive
        dk += from_alive
        dc += from_alive * k
        dpairs = torch.cat([dN * beta.transpose(-1, -2), dP], -2)
        if not self.inside:
            return dpairs, dq, dk, dv, dbeta, dc
        dpairs.mul_(self.keep)
        d_rows = dpairs @ self.cols
        d_cols = dpairs.transpose(-1, -2) @ self.rows
        dk_rows, dq_rows = d_rows.split(L, -2)
        dk += dk_rows * self.e + d_cols * self.e_inv
        dq += dq_rows * self.e
        from_rows = d_rows * self.rows
        dc += from_rows[..., :L, :] + from_rows[..., L:, :] - d_cols * self.cols
        return None, dq, dk, dv, dbeta, dc


class _DplrChunk(torch.autograd.Function):
    """`dplr_chunks` inside each chunk, from q, k, a, b, c [..., L, D] (c the cumulative
    log-gates), v [..., L, Dv] and the pair matrices [A_ab A_ak; P_qa P_qk] ([..., 2L, 2L],
    masked; None: one block, taken here against the middle step m as keep * (R' C'^T),
    R' = [b e_prev; q e], C' = [a / e; k / e], e = exp(c - c_m), e_prev the same at c_{i-1}):
    with [W | U0] = X = (I - A_ab)^{-1} [diag(exp(c_prev)) B | A_ak V], the zero-start
    outputs O = P_qa U0 + P_qk V, and with `ends` also Q_s = diag(exp(c)) Q + P_qa W, the
    transition diag(exp(c_end)) + A_end^T W and the update A_end^T U0 + K_end^T V. Tile by
    tile (`_DplrTile`); the backward keeps only the inputs and each tile's inverse."""

    @staticmethod
    def forward(
        ctx: Any,
        pairs: Tensor | None,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        a: Tensor,
        b: Tensor,
        c: Tensor,
        ends: bool,
    ) -> tuple[Tensor, ...]:
        return _tiled_forward(ctx, _DplrTile, (pairs, q, k, v, a, b, c), ends)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        return (*_tiled_backward(ctx, _DplrTile, grads), None)


class _DplrTile:
    """One tile of `_DplrChunk`: its intermediates from its inputs (rows of chunks), the
    triangular inverse formed or given (the backward).

    Backward: dP_qa = [dQ_s | dO] X^T, dP_qk = dO V^T, dX = P_qa^T [dQ_s | dO] + A_end dC
    (dC = [dTransition | dUpdate]), dA_end = X dC^T, dK_end = V dUpdate^T; dR = (I -
    A_ab)^{-T} dX, dA_ab = dR X^T, dA_ak = dR_V V^T, dV += A_ak^T dR_V; the pairs'
    dR' = dM C', dC' = dM^T R'; every exp(.) passes its gradient to c (c_m takes none). The
    pair matrices' gradient is left unmasked (`pair_blocks` masks it)."""

    def __init__(
        self,
        pairs: Tensor | None,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        a: Tensor,
        b: Tensor,
        c: Tensor,
        solver: UnitLower | None = None,
    ) -> None:
        L = k.shape[-2]
        self.q, self.k, self.v, self.a, self.b = q, k, v, a, b
        self.c_end = c[..., L - 1 :, :]
        self.inside = pairs is None
        if pairs is None:
            ref = c[..., (L - 1) // 2, None, :]
            self.e = (c - ref).exp()  # within exp(+-SPAN/2)
            self.e_prev = torch.cat([(-ref).exp(), self.e[..., :-1, :]], -2)  # c_{i-1}
            self.e_inv = self.e.reciprocal()
            self.rows = torch.cat([b * self.e_prev, q * self.e], -2)
            self.cols = torch.cat([a * self.e_inv, k * self.e_inv], -2)
            self.keep = _block_keep(L, (True, False), 2, c)
            pairs = (self.rows @ self.cols.transpose(-1, -2)).mul_(self.keep)
            scale = ref.exp()
            self.prev, self.alive = self.e_prev * scale, self.e * scale
            self.since_end = self.e_inv * (self.c_end - ref).exp()
        else:
            self.prev = gate_exp(F.pad(c[..., :-1, :], (0, 0, 1, 0)))  # exp(c_{i-1})
            self.alive, self.since_end = gate_exp(c), gate_exp(self.c_end - c)
        (A_ab, self.A_ak), (self.P_qa, self.P_qk) = (h.split(L, -1) for h in pairs.split(L, -2))
        self.solver = UnitLower(-A_ab) if solver is None else solver
        self.X = self.solver.solve(torch.cat([b * self.prev, self.A_ak @ v], -1))  # [W | U0]
        self.a_end, self.k_end = a * self.since_end, k * self.since_end

    def forward(self, o: Tensor, *ends: Tensor) -> None:
        """Writes O, and Q_s, the transition and the update if asked for."""
        D = self.k.shape[-1]
        Z = self.P_qa @ self.X  # [P_qa W | P_qa U0]
        torch.baddbmm(Z[..., D:], self.P_qk, self.v, out=o)
        if not ends:
            return
        q_start, transition, update = ends
        C = self.a_end.transpose(-1, -2) @ self.X  # [A_end^T W | A_end^T U0]
        transition.copy_(C[..., :D])
        transition.diagonal(dim1=-2, dim2=-1).add_(gate_exp(self.c_end.squeeze(-2)))
        torch.baddbmm(C[..., D:], self.k_end.transpose(-1, -2), self.v, out=update)
        torch.addcmul(Z[..., :D], self.q, self.alive, out=q_start)

    def backward(self, grad_o: Tensor, *grads: Tensor) -> tuple[Tensor | None, ...]:
        """(dpairs or None, dq, dk, dv, da, db, dc) from dO (and dQ_s, dTransition,
        dUpdate)."""
        L, D = self.k.shape[-2:]
        q, v, b, X = self.q, self.v, self.b, self.X
        if grads:
            grad_q_start, grad_transition, grad_update = grads
            dZ = torch.cat([grad_q_start, grad_o], -1)
            dC = torch.cat([grad_transition, grad_update], -1)  # [..., D, D + Dv]
            dX = _addmm(self.P_qa.transpose(-1, -2) @ dZ, self.a_end, dC)
            da_end = X @ dC.transpose(-1, -2)
            dk_end = v @ grad_update.transpose(-1, -2)
            dv = _addmm(self.P_qk.transpose(-1, -2) @ grad_o, self.k_end, grad_update)
            da, dk = da_end * self.since_end, dk_end * self.since_end
            from_end = da_end * self.a_end + dk_end * self.k_end  # the gradient of c_end - c
            dq = grad_q_start * self.alive
            dc = dq * q - from_end
            end = grad_transition.diagonal(dim1=-2, dim2=-1) * gate_exp(self.c_end.squeeze(-2))
            dc[..., L - 1, :] += from_end.sum(-2) + end
        else:
            dZ = F.pad(grad_o, (D, 0))
            dX = self.P_qa.transpose(-1, -2) @ dZ
            dv = self.P_qk.transpose(-1, -2) @ grad_o
            dq, da, dk, dc = (torch.zeros_like(b) for _ in range(4))
        dR = self.solver.solve_transposed(dX)
        dR_b, dR_v = dR.split([D, dR.shape[-1] - D], -1)
        db = dR_b * self.prev
        dc_prev = db * b
        dv = _addmm(dv, self.A_ak.transpose(-1, -2), dR_v)
        top = torch.cat([dR @ X.transpose(-1, -2), dR_v @ v.transpose(-1, -2)], -1)
        bottom = torch.cat([dZ @ X.transpose(-1, -2), grad_o @ v.transpose(-1, -2)], -1)
        dpairs = torch.cat([top, bottom], -2)
        if self.inside:
            dpairs.mul_(self.keep)
            d_rows = dpairs @ self.cols
            d_cols = dpairs.transpose(-1, -2) @ self.rows
            from_rows, from_cols = d_rows * self.rows, d_cols * self.cols
            db_rows, dq_rows = d_rows.split(L, -2)
            da_cols, dk_cols = d_cols.split(L, -2)
            db += db_rows * self.e_prev
            dq += dq_rows * self.e
            da += da_cols * self.e_inv
            dk += dk_cols * self.e_inv
            dc_prev += from_rows[..., :L, :]
            dc += from_rows[..., L:, :] - from_cols[..., :L, :] - from_cols[..., L:, :]
        dc[..., :-1, :] += dc_prev[..., 1:, :]
        return (None if self.inside else dpairs), dq, dk, dv, da, db, dc


def _tiled_forward(ctx: Any, kind: type, inputs: tuple, ends: bool) -> tuple[Tensor, ...]:
    """A chunk Function's forward, tile by tile of `kind` (`_KdaTile`, `_DplrTile`): the
    outputs O [..., L, Dv], and with `ends` Q_s [..., L, D], the transitions [..., D, D] and
    the updates [..., D, Dv]; saves the inputs and each tile's inverse (or strictly lower
    matrix, `UnitLower.kept`)."""
    k, v = inputs[2], inputs[3]
    lead, (L, D), Dv = k.shape[:-2], k.shape[-2:], v.shape[-1]
    rows = _by_rows(*inputs)
    R = rows[2].shape[0]
    outs = [v.new_empty(R, L, Dv)]
    if ends:
        outs += [k.new_empty(R, L, D), k.new_empty(R, D, D), v.new_empty(R, D, Dv)]
    ctx.tiles = _row_tiles(R, L * D * k.element_size())
    kept = k.new_empty(R, L, L)
    for t in ctx.tiles:
        tile = kind(*(None if x is None else x[t] for x in rows))
        tile.forward(*(out[t] for out in outs))
        kept[t] = tile.solver.kept()
    ctx.save_for_backward(kept, *rows)
    ctx.lead = lead
    return tuple(out.view(*lead, *out.shape[1:]) for out in outs)


def _tiled_backward(ctx: Any, kind: type, grads: tuple) -> list[Tensor | None]:
    """A chunk Function's backward, tile by tile, each tile's intermediates recomputed from
    the inputs and its saved inverse: the gradients of the inputs (None for pairs taken
    inside)."""
    kept, *rows = ctx.saved_tensors
    grads = _by_rows(*grads)
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
