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

MesaState = tuple[Tensor, Tensor]


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
    "MesaNet"). The system is solved exactly
    (`torch.linalg.solve`); fla solves it by a fixed number of conjugate-gradient steps
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
        initial_state: (H_kk, H_kv) to start from (zeros if None).
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
    if initial_state is None:
        zeros = q.new_zeros
        initial_state = (zeros(B, H, D, D), zeros(B, H, D, v.shape[-1]))
    else:
        check_shape("initial_state[0] (H_kk)", initial_state[0], (B, H, D, D))
        check_shape("initial_state[1] (H_kv)", initial_state[1], (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = mesa_recurrent(q, k, v, beta, log_gate, lamb, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        block = lambda *xs, L, state, last: mesa_block(*xs, lamb, state)  # noqa: E731
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
    state: MesaState,
) -> tuple[Tensor, MesaState]:
    """One block of L steps from the state (H_kk0, H_kv0) at its start. With c the cumulative
    log-gate inside the block and W[i, j] = exp(c_i - c_j) b_j for j <= i (0 above):

        H_kk_i = exp(c_i) H_kk0 + sum_j W[i, j] k_j k_j^T        (W @ the flattened k_j k_j^T)
        x_i    = (H_kk_i + diag(lamb))^{-1} q_i                  (one batched solve)
        o_i    = exp(c_i) H_kv0^T x_i + sum_j W[i, j] (k_j . x_i) v_j

    Every exponent is a difference <= 0 (docs/background.md, section 14)."""
    H_kk0, H_kv0 = state
    B, H, L, D = q.shape
    c = log_gate.cumsum(-1)  # [B, H, L]
    W = causal_exp(c.unsqueeze(-1) - c.unsqueeze(-2), dim=(-2, -1)) * beta.unsqueeze(-2)
    start = gate_exp(c)[..., None]  # [B, H, L, 1]
    outer = (k.unsqueeze(-1) * k.unsqueeze(-2)).reshape(B, H, L, D * D)
    H_kk = (W @ outer).view(B, H, L, D, D) + start[..., None] * H_kk0.unsqueeze(2)
    A = H_kk + torch.diag_embed(lamb)[None, :, None]
    x = torch.linalg.solve(A, q.unsqueeze(-1)).squeeze(-1)  # [B, H, L, D]
    o = ((x @ k.mT) * W) @ v + start * (x @ H_kv0)
    decay_end = W[..., -1, :].unsqueeze(-1)  # exp(c_end - c_j) b_j: [B, H, L, 1]
    H_kv_end = gate_exp(c[..., -1])[..., None, None] * H_kv0 + (k * decay_end).mT @ v
    return o, (H_kk[:, :, -1], H_kv_end)
