"""The Mesa layer's recurrence (MesaNet; docs/background.md, "MesaNet"): two decayed sums of
key outer products, and a read-out that solves a regularised least-squares problem per token.

    H_kk_t = a_t H_kk_{t-1} + b_t k_t k_t^T,     H_kv_t = a_t H_kv_{t-1} + b_t k_t v_t^T
    x_t = (H_kk_t + diag(lamb))^{-1} q_t,         o_t = H_kv_t^T x_t

The step loop is the specification; the chunk form builds every H_kk_t of a block at once and
solves the block's systems in one batched call; the output is then gated linear attention
read with x_t as the query."""

import torch
from torch import Tensor

from models.kernels.common import (
    causal_exp,
    check_log_gate,
    check_mode,
    check_qkv,
    check_shape,
    gate_exp,
    in_blocks,
)
from models.precision import in_fp32

MesaState = tuple[Tensor, Tensor]


@in_fp32()
def mesa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    lamb: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: MesaState | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, MesaState]:
    """The Mesa read-out, per head and token:

        H_kk_t = a_t H_kk_{t-1} + b_t k_t k_t^T,   H_kv_t = a_t H_kv_{t-1} + b_t k_t v_t^T
        o_t = H_kv_t^T (H_kk_t + diag(lamb))^{-1} q_t,     a_t = exp(log_gate_t)

    o_t = W_t q_t with W_t = H_kv_t^T (H_kk_t + diag(lamb))^{-1}, the minimiser of
    sum_{s<=t} (a_{s+1} ... a_t) b_s |W k_s - v_s|^2 + sum_i lamb_i |W e_i|^2: the best
    regularised linear map from the keys seen to their values (docs/background.md,
    "MesaNet"). The system is solved exactly (`torch.linalg.solve` in the step loop, a
    Cholesky factor in the chunk form); fla solves it by a fixed number of conjugate-gradient steps
    (`models.kernels.conjugate_gradient`), which approaches this solution. No scaling and no
    normalisation inside (the caller L2-normalises q and k).

    Args:
        q: queries.
        k: keys.
        v: values.
        beta: the write strengths b_t (fla's sigmoid, in (0, 1)).
        log_gate: log a_t, finite and <= 0, one per head and token.
        lamb: the regulariser lamb, > 0, one per head and key channel.
        mode: "recurrent" (the step loop, the specification), "chunk" (within a block of
            `chunk_size` steps every H_kk_t as one product of the block's pair weights
            exp(c_t - c_s) b_s with the k_s k_s^T, c the cumulative log-gate, and the
            block's systems solved in one batched call), "parallel" (the chunk form with one
            block: every H_kk_t of the sequence held at once, [B, H, T, D, D]).
        chunk_size: the block length of "chunk".
        initial_state: (H_kk, H_kv) to start from (zeros if None); H_kk positive
            semi-definite, as every state this function returns.
        return_state: also return the state after the last step.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv];  beta, log_gate: [B, H, T];  lamb: [H, D]
        state (H_kk [B, H, D, D], H_kv [B, H, D, Dv])

    Returns:
        o [B, H, T, Dv], or (o, (H_kk, H_kv)) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    check_shape("beta", beta, (B, H, T))
    check_shape("log_gate", log_gate, (B, H, T))
    check_shape("lamb", lamb, (H, D))
    check_log_gate("log_gate", log_gate)
    if not torch.compiler.is_compiling() and not bool((lamb > 0).all()):
        raise ValueError(f"lamb must be > 0, got a smallest value of {float(lamb.min()):.4g}")
    if initial_state is not None:
        check_shape("initial_state[0] (H_kk)", initial_state[0], (B, H, D, D))
        check_shape("initial_state[1] (H_kv)", initial_state[1], (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        if initial_state is None:
            initial_state = (q.new_zeros(B, H, D, D), q.new_zeros(B, H, D, v.shape[-1]))
        o, state = mesa_recurrent(q, k, v, beta, log_gate, lamb, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        block = lambda *xs, L, state, last: mesa_block(*xs, lamb, L=L, state=state)  # noqa: E731
        o, state = in_blocks(block, (q, k, v, beta, log_gate), 2, size, initial_state)
    return (o, state) if return_state else o


def mesa_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    lamb: Tensor,
    state: MesaState,
) -> tuple[Tensor, MesaState]:
    """The step loop: one token at a time, both sums as explicit matrices, one solve a step."""
    H_kk, H_kv = state
    gate = log_gate.exp()
    outs = []
    for t in range(q.shape[2]):
        a, b, kt = gate[:, :, t, None, None], beta[:, :, t, None, None], k[:, :, t]
        H_kk = a * H_kk + b * kt[..., :, None] * kt[..., None, :]
        H_kv = a * H_kv + b * kt[..., :, None] * v[:, :, t, None, :]
        A = H_kk + torch.diag_embed(lamb)
        x = torch.linalg.solve(A, q[:, :, t, :, None])  # [B, H, D, 1]
        outs.append((H_kv.mT @ x).squeeze(-1))
    return torch.stack(outs, 2), (H_kk, H_kv)


def mesa_block(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    lamb: Tensor,
    *,
    L: int,
    state: MesaState | None,
) -> tuple[Tensor, MesaState]:
    """T = n L steps as n chunks of L, from the state (H_kk0, H_kv0) at the first chunk's
    start. In a chunk, with c the cumulative log-gate inside it and W[i, j] = exp(c_i - c_j) b_j
    for j <= i (0 above):

        H_kk_i = exp(c_i) H_kk_start + sum_j W[i, j] k_j k_j^T     (W @ the flattened k_j k_j^T)
        x_i    = (H_kk_i + diag(lamb))^{-1} q_i                    (one batched solve)
        o_i    = exp(c_i) H_kv_start^T x_i + sum_j W[i, j] (k_j . x_i) v_j

    Every chunk's own sums are formed at once; only the start states run chunk after chunk
    (H_end = exp(c_end) H_start + sum_j W[L-1, j] k_j [k_j | v_j]^T). Every exponent is a
    difference <= 0 (docs/background.md, section 14). The solve and its gradient are one
    autograd node (`_RegularisedSolve`). One chunk from the empty state (`state` None) reads
    no start state."""
    B, H, T, D = q.shape
    n, Dv = T // L, v.shape[-1]
    qc, kc, vc = q.view(B, H, n, L, D), k.view(B, H, n, L, D), v.view(B, H, n, L, Dv)
    c = log_gate.reshape(B, H, n, L).cumsum(-1)
    W = causal_exp(c.unsqueeze(-1) - c.unsqueeze(-2), dim=(-2, -1)) * beta.view(B, H, n, 1, L)
    start = gate_exp(c)  # [B, H, n, L]: what is left of the chunk's start state at step i
    decayed = kc * W[..., -1, :].unsqueeze(-1)  # exp(c_end - c_j) b_j k_j
    added_kk, added_kv = decayed.mT @ kc, decayed.mT @ vc  # [B, H, n, D, D | Dv]
    end = gate_exp(c[..., -1])[..., None, None]  # [B, H, n, 1, 1]
    lamb = lamb.view(H, 1, 1, D)
    if state is None and n == 1:
        x = _RegularisedSolve.apply(W, kc, qc, lamb, None, start)
        o = ((x @ kc.mT) * W) @ vc
        return o.reshape(B, H, T, Dv), (added_kk[:, :, 0], added_kv[:, :, 0])
    H_kk, H_kv = state if state is not None else (q.new_zeros(B, H, D, D), q.new_zeros(B, H, D, Dv))
    starts_kk, starts_kv = [], []
    for i in range(n):
        starts_kk.append(H_kk)
        starts_kv.append(H_kv)
        H_kk = end[:, :, i] * H_kk + added_kk[:, :, i]
        H_kv = end[:, :, i] * H_kv + added_kv[:, :, i]
    start_kk, start_kv = torch.stack(starts_kk, 2), torch.stack(starts_kv, 2)
    x = _RegularisedSolve.apply(W, kc, qc, lamb, start_kk, start)
    o = ((x @ kc.mT) * W) @ vc + start.unsqueeze(-1) * (x @ start_kv)
    return o.reshape(B, H, T, Dv), (H_kk, H_kv)


class _RegularisedSolve(torch.autograd.Function):
    """x_i = (H_kk_i + diag(lamb))^{-1} q_i with H_kk_i = start_i H_kk0 + sum_j W[i, j] k_j k_j^T
    in every chunk,
    by a Cholesky factor of each [D, D] system (H_kk0 positive semi-definite and lamb > 0
    make it positive definite). The gradient never forms a [L, D, D] tensor: with
    g_i = A_i^{-1} dx_i (A symmetric), dA_i = -g_i x_i^T, so

        dq_i = g_i,   dW[i, j] = -(g_i . k_j)(x_i . k_j),
        dk_j = -sum_i W[i, j] (g_i (x_i . k_j) + x_i (g_i . k_j)),
        dlamb = -sum_i g_i * x_i,   dstart_i = -g_i^T H_kk0 x_i,   dH_kk0 = -sum_i start_i g_i x_i^T

    Shapes: W [B, H, n, L, L], k, q [B, H, n, L, D], lamb [H, 1, 1, D], H_kk0 [B, H, n, D, D]
    (each chunk's start, or None: zero), start [B, H, n, L] -> x [B, H, n, L, D]."""

    @staticmethod
    def forward(ctx, W, k, q, lamb, H_kk0, start):  # noqa: ANN001, ANN205
        D = k.shape[-1]
        outer = (k.unsqueeze(-1) * k.unsqueeze(-2)).flatten(-2)  # [..., L, D * D]
        A = (W @ outer).unflatten(-1, (D, D))
        if H_kk0 is not None:  # None: the empty start state
            A = A + start[..., None, None] * H_kk0.unsqueeze(-3)
        A.diagonal(dim1=-2, dim2=-1).add_(lamb)
        factor, info = torch.linalg.cholesky_ex(A)
        if not torch.compiler.is_compiling() and bool(info.any()):
            raise ValueError(
                "H_kk + diag(lamb) is not positive definite: the initial H_kk must be"
                " positive semi-definite (as every state mesa_attention returns)"
            )
        x = _cholesky_solve(factor, q)
        ctx.save_for_backward(W, k, x, factor, H_kk0, start)
        ctx.lamb_shape = lamb.shape
        return x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dx):  # noqa: ANN001, ANN205
        W, k, x, factor, H_kk0, start = ctx.saved_tensors
        g = _cholesky_solve(factor, dx)
        P, Q = g @ k.mT, x @ k.mT  # [B, H, L, L]: g_i . k_j and x_i . k_j
        dW = -(P * Q)
        dk = -((W * Q).mT @ g + (W * P).mT @ x)
        dlamb = (-(g * x)).sum_to_size(ctx.lamb_shape)
        if H_kk0 is None:
            return dW, dk, g, dlamb, None, None
        dstart = -(g * (x @ H_kk0.mT)).sum(-1)
        dH_kk0 = -(g * start[..., None]).mT @ x
        return dW, dk, g, dlamb, dH_kk0, dstart


def _cholesky_solve(factor: Tensor, b: Tensor) -> Tensor:
    """x = (F F^T)^{-1} b by two triangular solves (F lower-triangular [..., D, D], b [..., D]),
    faster on CPU than `torch.cholesky_solve` on a batch of small systems."""
    y = torch.linalg.solve_triangular(factor, b.unsqueeze(-1), upper=False)
    return torch.linalg.solve_triangular(factor.mT, y, upper=True).squeeze(-1)
