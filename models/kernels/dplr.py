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


def _block_keep(L: int, strict: tuple[bool, ...], groups: int, device: torch.device) -> Tensor:
    """The kept pairs of one block: [len(strict) L, groups L], row group g keeping j < i
    where strict[g], j <= i otherwise."""
    steps = torch.arange(L, device=device)
    lower = [steps[:, None] > steps if s else steps[:, None] >= steps for s in strict]
    return torch.cat(lower, -2).repeat(1, groups)


class _KdaChunk(torch.autograd.Function):
    """`kda_chunks` inside each chunk, from q, k [..., L, D], v [..., L, Dv], beta
    [..., L, 1], the cumulative log-gates c [..., L, D] and the pair matrices [K; P]
    ([..., 2L, L], masked; None: one block, taken here against the middle step m,
    [K; P] = keep * ([k e; q e] (k / e)^T) with e = exp(c - c_m), every exponential then a
    product with e or 1 / e): the zero-start outputs O = P Y_V, and with `ends` also the
    queries as they read the start state Q_s = diag(exp(c)) Q - P Y_K, the transition
    diag(exp(c_end)) - K_end^T Y_K and the update K_end^T Y_V.

    Backward, with Z = P Y, X = T R (R = [diag(exp(c)) K | V], Y = diag(beta) X) and
    C = K_end^T Y: dZ = [-dQ_s | dO], dC = [-dTransition | dUpdate]; dP = dZ Y^T,
    dY = P^T dZ + K_end dC, dK_end = Y dC^T; dbeta = rowsum(dY X), dX = diag(beta) dY;
    dR = T^T dX and dN = -dR X^T (N = K diag(beta)), so dK = dN diag(beta) and
    dbeta += colsum(dN K); every exp(.) passes its gradient to c (c_m takes none: the
    weights do not depend on it). The pair matrices' gradient is left unmasked
    (`pair_blocks` masks it)."""

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
        L, D = k.shape[-2:]
        c_end = c[..., L - 1 :, :]
        ctx.inside = pairs is None
        if pairs is None:
            ref = c[..., (L - 1) // 2, None, :]
            e = (c - ref).exp()  # within exp(+-SPAN/2)
            e_inv = e.reciprocal()
            rows, cols = torch.cat([k * e, q * e], -2), k * e_inv
            ctx.keep = _block_keep(L, (True, False), 1, c.device)
            pairs = (rows @ cols.transpose(-1, -2)).masked_fill_(~ctx.keep, 0.0)
            alive, since_end = e * ref.exp(), e_inv * (c_end - ref).exp()
            ctx.inside_kept = rows, cols, e, e_inv
        else:
            alive, since_end = gate_exp(c), gate_exp(c_end - c)
        K, P = pairs.split(L, -2)
        solver = UnitLower(K * beta.transpose(-1, -2))
        X = solver.solve(torch.cat([k * alive, v], -1))
        Y = beta * X
        ctx.ends, ctx.solver = ends, solver
        if not ends:
            ctx.save_for_backward(K, P, q, k, beta, alive, X, Y)
            return ((P @ Y)[..., D:],)
        k_end = k * since_end
        Z, C = P @ Y, k_end.transpose(-1, -2) @ Y
        transition = C[..., :D].neg()
        transition.diagonal(dim1=-2, dim2=-1).add_(gate_exp(c_end.squeeze(-2)))
        q_start = torch.addcmul(-Z[..., :D], q, alive)
        ctx.save_for_backward(K, P, q, k, beta, alive, X, Y, since_end, k_end, c_end)
        return Z[..., D:], q_start, transition, C[..., D:]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_o: Tensor, *grads: Tensor) -> tuple[Tensor | None, ...]:
        K, P, q, k, beta, alive, X, Y, *kept = ctx.saved_tensors
        L, D = k.shape[-2:]
        if ctx.ends:
            grad_q_start, grad_transition, grad_update = grads
            since_end, k_end, c_end = kept
            dZ = torch.cat([-grad_q_start, grad_o], -1)
            dC = torch.cat([-grad_transition, grad_update], -1)  # [..., D, D + Dv]
            dY = _addmm(P.transpose(-1, -2) @ dZ, k_end, dC)
            dk_end = Y @ dC.transpose(-1, -2)
            dq = grad_q_start * alive
            dk = dk_end * since_end
            from_end = dk_end * k_end  # the gradient of (c_end - c)
            dc = dq * q - from_end
            to_end = grad_transition.diagonal(dim1=-2, dim2=-1) * gate_exp(c_end.squeeze(-2))
            dc[..., L - 1, :] += from_end.sum(-2) + to_end
        else:
            dZ = F.pad(grad_o, (D, 0))
            dY = P.transpose(-1, -2) @ dZ
            dq, dk, dc = (torch.zeros_like(k) for _ in range(3))
        dP = dZ @ Y.transpose(-1, -2)
        dbeta = (dY * X).sum(-1, keepdim=True)
        dR = ctx.solver.solve_transposed(beta * dY)
        dN = (dR @ X.transpose(-1, -2)).neg_()
        dbeta += (dN * K).sum(-2).unsqueeze(-1)
        dR_k, dv = dR.split([D, dR.shape[-1] - D], -1)
        from_alive = dR_k * alive
        dk += from_alive
        dc += from_alive * k
        dpairs = torch.cat([dN * beta.transpose(-1, -2), dP], -2)
        if not ctx.inside:
            return dpairs, dq, dk, dv, dbeta, dc, None
        rows, cols, e, e_inv = ctx.inside_kept
        dpairs.masked_fill_(~ctx.keep, 0.0)
        d_rows = dpairs @ cols
        d_cols = dpairs.transpose(-1, -2) @ rows
        dk_rows, dq_rows = d_rows.split(L, -2)
        dk += dk_rows * e + d_cols * e_inv
        dq += dq_rows * e
        from_rows = d_rows * rows
        dc += from_rows[..., :L, :] + from_rows[..., L:, :] - d_cols * cols
        return None, dq, dk, dv, dbeta, dc, None


class _DplrChunk(torch.autograd.Function):
    """`dplr_chunks` inside each chunk, from q, k, a, b, c [..., L, D] (c the cumulative
    log-gates), v [..., L, Dv] and the pair matrices [A_ab A_ak; P_qa P_qk] ([..., 2L, 2L],
    masked; None: one block, taken here against the middle step m as keep * (R' C'^T),
    R' = [b e_prev; q e], C' = [a / e; k / e], e = exp(c - c_m), e_prev the same at c_{i-1}):
    with [W | U0] = X = (I - A_ab)^{-1} [diag(exp(c_prev)) B | A_ak V] and J = [W U0; 0 V],
    the zero-start outputs O = (P_q J)_V (P_q = [P_qa | P_qk]), and with `ends` also
    Q_s = diag(exp(c)) Q + (P_q J)_W, the transition diag(exp(c_end)) + (E^T J)_W and the
    update (E^T J)_V, E = [A_end; K_end].

    Backward: dP_q = d(P_q J) J^T, dJ = P_q^T d(P_q J) + E d(E^T J), dE = J d(E^T J)^T;
    dR = (I - A_ab)^{-T} dX and dA_ab = dR X^T; dA_ak = dR_V V^T, dV += A_ak^T dR_V; the
    pairs' dR' = dM C', dC' = dM^T R'; every exp(.) passes its gradient to c (c_m takes
    none). The pair matrices' gradient is left unmasked (`pair_blocks` masks it)."""

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
        L, D = k.shape[-2:]
        c_end = c[..., L - 1 :, :]
        ctx.inside = pairs is None
        if pairs is None:
            ref = c[..., (L - 1) // 2, None, :]
            e = (c - ref).exp()  # within exp(+-SPAN/2)
            e_prev_ref = torch.cat([(-ref).exp(), e[..., :-1, :]], -2)  # exp(c_{i-1} - c_m)
            e_inv = e.reciprocal()
            rows = torch.cat([b * e_prev_ref, q * e], -2)
            cols = torch.cat([a * e_inv, k * e_inv], -2)
            ctx.keep = _block_keep(L, (True, False), 2, c.device)
            pairs = (rows @ cols.transpose(-1, -2)).masked_fill_(~ctx.keep, 0.0)
            scale = ref.exp()
            e_prev, alive, since_end = e_prev_ref * scale, e * scale, e_inv * (c_end - ref).exp()
            ctx.inside_kept = rows, cols, e, e_inv, e_prev_ref
        else:
            e_prev = gate_exp(F.pad(c[..., :-1, :], (0, 0, 1, 0)))  # exp(c_{i-1})
            alive, since_end = gate_exp(c), gate_exp(c_end - c)
        (A_ab, A_ak), (P_qa, P_qk) = (half.split(L, -1) for half in pairs.split(L, -2))
        solver = UnitLower(-A_ab)
        X = solver.solve(torch.cat([b * e_prev, A_ak @ v], -1))  # [W | U0]
        Z = P_qa @ X  # [P_qa W | P_qa U0]
        o = _addmm(Z[..., D:], P_qk, v)
        ctx.ends, ctx.solver = ends, solver
        if not ends:
            ctx.save_for_backward(A_ak, P_qa, P_qk, v, b, e_prev, X)
            return (o,)
        a_end, k_end = a * since_end, k * since_end
        C = a_end.transpose(-1, -2) @ X  # [A_end^T W | A_end^T U0]
        transition = C[..., :D].clone()
        transition.diagonal(dim1=-2, dim2=-1).add_(gate_exp(c_end.squeeze(-2)))
        update = _addmm(C[..., D:], k_end.transpose(-1, -2), v)
        q_start = torch.addcmul(Z[..., :D], q, alive)
        kept = q, alive, since_end, a_end, k_end, c_end
        ctx.save_for_backward(A_ak, P_qa, P_qk, v, b, e_prev, X, *kept)
        return o, q_start, transition, update

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_o: Tensor, *grads: Tensor) -> tuple[Tensor | None, ...]:
        A_ak, P_qa, P_qk, v, b, e_prev, X, *kept = ctx.saved_tensors
        L, D = b.shape[-2:]
        if ctx.ends:
            q, alive, since_end, a_end, k_end, c_end = kept
            grad_q_start, grad_transition, grad_update = grads
            dZ = torch.cat([grad_q_start, grad_o], -1)
            dC = torch.cat([grad_transition, grad_update], -1)  # [..., D, D + Dv]
            dX = _addmm(P_qa.transpose(-1, -2) @ dZ, a_end, dC)
            da_end = X @ dC.transpose(-1, -2)
            dk_end = v @ grad_update.transpose(-1, -2)
            dv = _addmm(P_qk.transpose(-1, -2) @ grad_o, k_end, grad_update)
            da, dk = da_end * since_end, dk_end * since_end
            from_end = da_end * a_end + dk_end * k_end  # the gradient of (c_end - c)
            dq = grad_q_start * alive
            dc = dq * q - from_end
            to_end = grad_transition.diagonal(dim1=-2, dim2=-1) * gate_exp(c_end.squeeze(-2))
            dc[..., L - 1, :] += from_end.sum(-2) + to_end
        else:
            dZ = F.pad(grad_o, (D, 0))
            dX = P_qa.transpose(-1, -2) @ dZ
            dv = P_qk.transpose(-1, -2) @ grad_o
            dq, da, dk, dc = (torch.zeros_like(b) for _ in range(4))
        dR = ctx.solver.solve_transposed(dX)
        dR_b, dR_v = dR.split([D, dR.shape[-1] - D], -1)
        db = dR_b * e_prev
        dc_prev = db * b
        dv = _addmm(dv, A_ak.transpose(-1, -2), dR_v)
        top = torch.cat([dR @ X.transpose(-1, -2), dR_v @ v.transpose(-1, -2)], -1)
        bottom = torch.cat([dZ @ X.transpose(-1, -2), grad_o @ v.transpose(-1, -2)], -1)
        dpairs = torch.cat([top, bottom], -2)
        if ctx.inside:
            rows, cols, e, e_inv, e_prev_ref = ctx.inside_kept
            dpairs.masked_fill_(~ctx.keep, 0.0)
            d_rows = dpairs @ cols
            d_cols = dpairs.transpose(-1, -2) @ rows
            from_rows, from_cols = d_rows * rows, d_cols * cols
            db_rows, dq_rows = d_rows.split(L, -2)
            da_cols, dk_cols = d_cols.split(L, -2)
            db += db_rows * e_prev_ref
            dq += dq_rows * e
            da += da_cols * e_inv
            dk += dk_cols * e_inv
            dc_prev += from_rows[..., :L, :]
            dc += from_rows[..., L:, :] - from_cols[..., :L, :] - from_cols[..., L:, :]
        dc[..., :-1, :] += dc_prev[..., 1:, :]
        return (None if ctx.inside else dpairs), dq, dk, dv, da, db, dc, None


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


class UnitLower:
    """(I + N)^{-1} for N [..., L, L] strictly lower-triangular (zero on and above the
    diagonal), applied to a right-hand side and, transposed, to a gradient. Up to
    INVERSE_STEPS steps the inverse is formed once: N is nilpotent (N^L = 0), so

        (I + N)^{-1} = sum_{p<L} (-N)^p = (I - N)(I + N^2)(I + N^4) ... (I + N^{2^m}),

    2 ceil(log2 L) - 2 products; beyond, each application is a triangular solve."""

    def __init__(self, N: Tensor) -> None:
        self.N, self.inverse = N, None
        if N.shape[-1] <= INVERSE_STEPS:
            power = -N
            inverse = power + torch.eye(N.shape[-1], dtype=N.dtype, device=N.device)
            covered = 2  # the powers summed so far: 0 .. covered - 1
            while covered < N.shape[-1]:
                power = power @ power
                inverse = _addmm(inverse, inverse, power)
                covered *= 2
            self.inverse = inverse

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
