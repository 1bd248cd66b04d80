"""DeltaNet's delta rule (docs/background.md, section 8): the step loop and the chunked WY
form. "transition" in this module is the [D, D] matrix I - K^T W that carries a chunk's start
state to its end."""

from functools import partial

import torch
from torch import Tensor

from models.kernels.common import (
    causal_gaps,
    check_mode,
    check_qkv,
    check_shape,
    gate_exp,
    in_blocks,
)
from models.precision import in_fp32


@in_fp32()
def delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """DeltaNet's delta rule: the state is corrected towards v_t at key k_t with rate beta_t,

        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T = (I - beta_t k_t k_t^T) S_{t-1}
              + beta_t k_t v_t^T,        o_t = S_t^T q_t

    Args:
        q: queries.
        k: keys (the caller L2-normalises them).
        v: values.
        beta: the write rates, in (0, 1).
        mode: "recurrent" (the step loop, the specification), "chunk" (the WY / UT form of
            docs/background.md, section 8: inside a chunk, pseudo-values
            U = (I + tril(diag(beta) K K^T, -1))^{-1} diag(beta) (V - K S_start) by one
            triangular solve, O = Q S_start + tril(Q K^T) U, S_end = S_start + K^T U; a loop
            over chunks carries S), "parallel" (the chunk form with a single chunk covering
            the whole sequence: a T x T triangular solve).
        chunk_size: the chunk length of "chunk".
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv];  beta: [B, H, T];  state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    check_shape("beta", beta, (B, H, T))
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = delta_recurrent(q, k, v, beta, None, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        chunks = partial(delta_chunks, return_state=return_state)
        o, state = in_blocks(chunks, (q, k, v, beta), 2, size, initial_state)
    return (o, state) if return_state else o


def delta_recurrent(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor | None, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The specification: one delta-rule update per token, with the state first scaled by the
    gate a_t = exp(log_gate_t) [B, H, T] when one is given (the gated delta rule,
    docs/background.md, section 15): S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    gates = [None] * T if log_gate is None else torch.exp(log_gate).unbind(2)
    outs = []
    for q_t, k_t, v_t, b_t, a_t in zip(
        q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), gates, strict=True
    ):
        if a_t is not None:
            S = a_t[..., None, None] * S
        recalled = torch.einsum("bhd,bhde->bhe", k_t, S)  # S^T k_t: what the memory holds at k_t
        S = S + b_t[..., None, None] * k_t[..., :, None] * (v_t - recalled)[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S


def delta_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor | None = None,
    *,
    L: int,
    state: Tensor | None,
    last: bool,
    return_state: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """T = n*L steps as n chunks. In a chunk the pseudo-values u_i = beta_i (v_i - S_{i-1}^T k_i)
    satisfy (I + tril(diag(beta) K K^T, -1)) U = diag(beta) (V - K S_start), so
    U = U0 - W S_start with [W | U0] = (I + tril(...))^{-1} diag(beta) [K | V] for all chunks
    at once. With S_i = S_start + sum_{j<=i} k_j u_j^T, everything but the state is then a
    product with S_start, computed for all chunks at once:

        O = tril(Q K^T) (U0 - W S_start) + Q S_start
        S_end = (I - K^T W) S_start + K^T U0

    and only the last line runs chunk after chunk (one [D, D] x [D, Dv] product each). One
    chunk from the empty state needs no S_start, and no S_end unless it is returned
    (`return_state`) or another block follows.

    With a log-gate [B, H, T] (the gated delta rule, docs/background.md, section 15), b_i its
    cumulative sum inside the chunk and G[i, j] = exp(b_i - b_j) for j <= i: K K^T and
    tril(Q K^T) are weighted by G, the start state is read by keys and queries scaled by
    exp(b_i), and the end state sees k_j exp(b_{L-1} - b_j), so that

        O = (tril(Q K^T) * G) (U0 - W S_start) + diag(exp(b)) Q S_start
        S_end = (exp(b_{L-1}) I - K_end^T W) S_start + K_end^T U0

    with [W | U0] from diag(exp(b)) K and V; every exponent is <= 0."""
    B, H, T, D = q.shape
    Dv, n, S = v.shape[-1], T // L, state
    qc, kc, vc = q.reshape(B, H, n, L, D), k.reshape(B, H, n, L, D), v.reshape(B, H, n, L, Dv)
    bc = beta.reshape(B, H, n, L, 1)
    kt = kc.transpose(-1, -2)
    gram, scores = (kc * bc) @ kt, qc @ kt
    keys, q_start, kt_end, eye = kc, qc, kt, torch.eye(D, dtype=q.dtype, device=q.device)
    if log_gate is None:
        scores = scores.tril_()  # tril(Q K^T), in place (the product's backward needs no output)
    else:
        b = log_gate.reshape(B, H, n, L).cumsum(-1)
        gaps = causal_gaps(b)  # [B, H, n, L, L]: exp(b_i - b_j), j <= i
        gram, scores = gram * gaps, scores * gaps  # gaps is 0 above the diagonal
        alive = gate_exp(b).unsqueeze(-1)  # exp(b_i): what is left of S_start at step i
        keys, q_start = kc * alive, qc * alive
        kt_end = (kc * gate_exp(b[..., L - 1 :] - b).unsqueeze(-1)).transpose(-1, -2)
        eye = alive[..., L - 1 :, :] * eye  # [B, H, n, D, D]
    # unit lower-triangular system: the solver takes the diagonal as 1 and reads only below it
    # (its gradient too), so the weighted K K^T needs no mask
    WU = torch.linalg.solve_triangular(
        gram, torch.cat([keys, vc], -1) * bc, upper=False, unitriangular=True
    )
    W, U0 = WU.split([D, Dv], -1)
    if S is None and n == 1:  # one chunk from the empty state: no product with S_start
        final = (kt_end @ U0)[:, :, 0] if return_state or not last else None
        return (scores @ U0).reshape(B, H, T, Dv), final
    update = kt_end @ U0  # [B, H, n, D, Dv]: what each chunk adds to a zero start state
    transition = eye - kt_end @ W  # [B, H, n, D, D]
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    starts = []
    for transition_c, update_c in zip(transition.unbind(2), update.unbind(2), strict=True):
        starts.append(S)
        S = torch.baddbmm(update_c.flatten(0, 1), transition_c.flatten(0, 1), S.flatten(0, 1))
        S = S.view(B, H, D, Dv)
    starts = torch.stack(starts, 2)
    o = scores @ (U0 - W @ starts) + q_start @ starts
    return o.reshape(B, H, T, Dv), S
