"""KDA's rule in chunks (docs/background.md, "The gated DPLR rule"): the WY form of the
gated delta rule per key dimension, one triangular inverse per chunk (`_KdaChunk`), then
the chunks' start states (`models.kernels.dplr_blocks.across_chunks`)."""

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
        return tiled_forward(ctx, _KdaTile, (pairs, q, k, v, beta, c), ends)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        return (*tiled_backward(ctx, _KdaTile, grads), None)


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
            self.keep = block_keep(L, (True, False), 1, c)
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
            dY = addmm(self.P.transpose(-1, -2) @ dZ, self.k_end, dC)
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
