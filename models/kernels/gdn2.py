"""Gated DeltaNet-2's rule (docs/background.md, "Gated DeltaNet-2"): the gated delta rule with
an erase gate per key channel and a write gate per value channel, a case of the gated DPLR
rule (`models.kernels.dplr.gated_dplr`)."""

import torch
from torch import Tensor

from models.kernels.common import check_mode, check_qkv, check_shape
from models.kernels.dplr import gate_bound, gated_dplr
from models.precision import in_fp32


@in_fp32()
def gdn2_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    erase: Tensor,
    write: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 16,
    min_log_gate: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per head (state S: key dims x value dims), with b_t = `erase`, w_t = `write`:

        S_t = (I - k_t (b_t * k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,
        o_t = S_t^T q_t

    The state decays by a gate per key dimension, then each key channel d removes a share
    b_td of what the decayed state holds along k_t, and the value is written with a share w_te
    per value channel. With b_t = w_t = beta_t (one number per head and token) this is KDA's
    rule (`kda_rule`). No scaling inside (the caller scales q and L2-normalises k).

    Args:
        q: queries.
        k: keys.
        v: values.
        erase: the erase gate b_t per key channel, typically in (0, 1).
        write: the write gate w_t per value channel, typically in (0, 1).
        log_gate: g_t = log of the decay, finite and <= 0, per key dimension.
        mode: "recurrent" (the step loop below, the specification), "chunk" and "parallel"
            (`gated_dplr`: since (I - k (b * k)^T) diag(e^g) = diag(e^g) - k (b * k * e^g)^T,
            this is the gated DPLR rule with a = -k, b = b * k * e^g and values w * v).
        chunk_size: the chunk length of "chunk".
        min_log_gate: a lower bound on every log-gate, as in `gated_dplr`.
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k, erase, log_gate: [B, H, T, D];  v, write: [B, H, T, Dv]
        state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    check_shape("erase", erase, q.shape)
    check_shape("write", write, v.shape)
    check_shape("log_gate", log_gate, q.shape)
    B, H, T, D = q.shape
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        gate_bound(log_gate, min_log_gate)
        o, state = gdn2_recurrent(q, k, v, erase, write, log_gate, initial_state)
        return (o, state) if return_state else o
    read = erase * k * torch.exp(log_gate)
    return gated_dplr(
        q,
        k,
        write * v,
        -k,
        read,
        log_gate,
        mode=mode,
        chunk_size=chunk_size,
        min_log_gate=min_log_gate,
        initial_state=initial_state,
        return_state=return_state,
    )


def gdn2_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    erase: Tensor,
    write: Tensor,
    log_gate: Tensor,
    S: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """The specification, in fla's `naive_recurrent_gdn2` order: per token, decay each key row
    of S by its gate, read the decayed state at b_t * k_t, write w_t * v_t minus that read
    at k_t, then read out at q_t."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    steps = (x.unbind(2) for x in (q, k, v, erase, write, log_gate))
    for q_t, k_t, v_t, b_t, w_t, g_t in zip(*steps, strict=True):
        S = torch.exp(g_t)[..., None] * S
        erased = torch.einsum("bhd,bhde->bhe", b_t * k_t, S)  # S^T (b_t * k_t) after the decay
        S = S + k_t[..., :, None] * (w_t * v_t - erased)[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S
