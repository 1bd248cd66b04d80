"""The gated DPLR rule in chunks (docs/background.md, "The gated DPLR rule"): inside
each chunk one unit lower-triangular system, solved tile by tile (`_DplrChunk`), then the
chunks' start states (`models.kernels.dplr_blocks.across_chunks`)."""

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import (
    gate_exp,
)
from models.kernels.dplr_blocks import (
    UnitLower,
    across_chunks,
    addmm,
    block_keep,
    one_block,
    pair_blocks,
    tiled_backward,
    tiled_forward,
)


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
        return tiled_forward(ctx, _DplrTile, (pairs, q, k, v, a, b, c), ends)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        return (*tiled_backward(ctx, _DplrTile, grads), None)


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
            self.keep = block_keep(L, (True, False), 2, c)
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
            dX = addmm(self.P_qa.transpose(-1, -2) @ dZ, self.a_end, dC)
            da_end = X @ dC.transpose(-1, -2)
            dk_end = v @ grad_update.transpose(-1, -2)
            dv = addmm(self.P_qk.transpose(-1, -2) @ grad_o, self.k_end, grad_update)
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
        dv = addmm(dv, self.A_ak.transpose(-1, -2), dR_v)
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
