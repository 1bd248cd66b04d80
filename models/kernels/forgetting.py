"""Forgetting attention (docs/background.md, "The Forgetting Transformer"): causal softmax
attention whose scores carry the summed log of a forget gate between key and query."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import check_log_gate, check_mode, check_qkv, check_shape
from models.precision import in_fp32

ForgettingState = tuple[Tensor, Tensor, Tensor]
"""(keys [B, H, t, d], values [B, H, t, dv], decay [B, H, t]): the KV cache of the t tokens
seen and, per cached token s, the log-forget sum since it, decay_s = sum_{r=s+1..t} log f_r."""


@in_fp32()
def forgetting_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_forget: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
) -> Tensor:
    """o_t = sum_{s<=t} softmax_s(q_t^T k_s / sqrt(d) + D_ts) v_s,  D_ts = sum_{r=s+1..t} log f_r.

    With every f_r = 1 this is softmax attention (eq. 1); a forget gate f_r < 1 lowers the
    weight of every key before r by the factor f_r, for every later query.

    Args:
        q, k: queries and keys.
        v: values.
        log_forget: log f_t <= 0, one per head and token.
        mode: "recurrent" (`forgetting_step` token by token on a KV cache, the
            specification), "parallel" (the T x T scores with the decay matrix D_ts = c_t -
            c_s, c the cumulative sum of log f, as SDPA's additive mask), "chunk" (blocks of
            `chunk_size` queries, each against the keys up to its last query: the same sums,
            a score matrix of chunk_size x T at a time).
        chunk_size: the query block of "chunk".

    Shapes:
        q, k: [B, H, T, d];  v: [B, H, T, dv];  log_forget: [B, H, T]

    Returns:
        o [B, H, T, dv].
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    check_shape("log_forget", log_forget, q.shape[:3])
    check_log_gate("log_forget", log_forget)
    if mode == "recurrent":
        state, outs = empty_state(q, v, log_forget), []
        for t in range(q.shape[2]):
            o_t, state = forgetting_step(
                q[:, :, t], k[:, :, t], v[:, :, t], log_forget[:, :, t], state
            )
            outs.append(o_t)
        return torch.stack(outs, 2)
    c = log_forget.cumsum(-1)
    T = q.shape[2]
    size = T if mode == "parallel" else chunk_size
    outs = []
    for start in range(0, T, size):
        end = min(start + size, T)
        bias = c[..., start:end, None] - c[..., None, :end]  # D_ts for the block's queries
        causal = torch.ones(end - start, end, dtype=torch.bool, device=q.device).tril(start)
        bias = bias.masked_fill(~causal, float("-inf")).to(q.dtype)
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=bias
            )
        )
    return torch.cat(outs, 2)


def empty_state(q: Tensor, v: Tensor, log_forget: Tensor) -> ForgettingState:
    """The state before the first token: an empty cache (q's and v's dtypes, log_forget's for
    the sums)."""
    B, H, _, d = q.shape
    keys = q.new_zeros(B, H, 0, d)
    return keys, v.new_zeros(B, H, 0, v.shape[-1]), log_forget.new_zeros(B, H, 0)


def forgetting_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, log_forget_t: Tensor, state: ForgettingState
) -> tuple[Tensor, ForgettingState]:
    """One token: every cached token's log-forget sum grows by log f_t, token t joins the cache
    with sum 0, and q_t reads the cache, o_t = softmax_s(q_t^T k_s / sqrt(d) + decay_s) v_s.

    Shapes: q_t, k_t [B, H, d];  v_t [B, H, dv];  log_forget_t [B, H];  state as
    `ForgettingState`. Returns (o_t [B, H, dv], the state after the token)."""
    keys, values, decay = state
    keys = torch.cat([keys, k_t[:, :, None].to(keys.dtype)], 2)
    values = torch.cat([values, v_t[:, :, None].to(values.dtype)], 2)
    decay = torch.cat(
        [decay + log_forget_t[..., None], torch.zeros_like(log_forget_t[..., None])], 2
    )
    scores = torch.einsum("bhd,bhsd->bhs", q_t, keys.to(q_t.dtype)) / math.sqrt(q_t.shape[-1])
    weights = (scores + decay.to(scores.dtype)).softmax(-1)
    o_t = torch.einsum("bhs,bhsd->bhd", weights, values.to(weights.dtype))
    return o_t, (keys, values, decay)
