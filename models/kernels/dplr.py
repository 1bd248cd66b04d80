"""The gated DPLR rule (diagonal plus low rank; docs/background.md, "The gated DPLR
rule"): a state whose transition is a per-key-dimension gate plus a rank-one correction, the
recurrence behind KDA and RWKV-7. "gate" in this module is w_t = exp(log_gate_t) in
(0, 1]^D; c = the cumulative sum of the log-gates inside a chunk (c_i the log of the product
of the gates up to step i)."""

from functools import partial

import torch
from torch import Tensor

from models.kernels.common import (
    check_log_gate,
    check_mode,
    check_qkv,
    check_shape,
    in_blocks,
)
from models.kernels.dplr_chunk import dplr_chunks
from models.kernels.kda_chunk import kda_chunks
from models.precision import in_fp32


@in_fp32()
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


@in_fp32()
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
