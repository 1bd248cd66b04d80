"""The gated DPLR rule (diagonal plus low rank; docs/background.md, "The gated DPLR
rule"): a state whose transition is a per-key-dimension gate plus a rank-one correction, the
recurrence behind KDA and RWKV-7. "gate" in this module is w_t = exp(log_gate_t) in
(0, 1]^D; c = the cumulative sum of the log-gates inside a chunk (c_i the log of the product
of the gates up to step i)."""

import math
from functools import partial

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
    normal_floor,
)

SUB_CHUNK = 16
"""The steps of a sub-chunk in `pair_weights`: pairs inside one are taken exactly
([s, s, D] exponentials), pairs across sub-chunks as one matmul against a reference point."""


def gated_dplr(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The gated diagonal-plus-low-rank rule, per head (state S: key dims x value dims):

        S_t = (diag(w_t) + a_t b_t^T) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t,
        w_t = exp(log_gate_t)

    b_t^T S_{t-1} reads the state before the step (not decayed), a_t writes that read back:
    RWKV-7 is a = kk * a_rate, b = -kk (remove a share of what is stored at kk); the gated
    delta rule with a gate per key dimension (KDA) is k -> beta k, a = -beta k,
    b = w * k (`kda_rule`). No scaling inside.

    Args:
        q: queries.
        k: the keys written with the values.
        v: values.
        a: the rank-one correction's write direction.
        b: the rank-one correction's read direction.
        log_gate: log w_t, finite and <= 0, per key dimension.
        mode: "recurrent" (the step loop, the specification), "chunk" (chunks of
            `chunk_size` steps: a triangular solve for the corrections inside a chunk, the
            state carried from chunk to chunk by a loop; docs/background.md, "The gated DPLR rule"),
            "parallel" (the chunk form with one chunk covering the whole sequence).
        chunk_size: the chunk length of "chunk".
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
    check_log_gate("log_gate", log_gate)
    B, H, T, D = q.shape
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = dplr_recurrent(q, k, v, a, b, log_gate, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        chunks = partial(dplr_chunks, return_state=return_state)
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
    chunk_size: int = 64,
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
            (`gated_dplr`'s chunk form with k -> beta k, a = -beta k, b = w k, since
            (I - beta k k^T) diag(w) = diag(w) - beta k (w k)^T).
        chunk_size: the chunk length of "chunk".
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
    if mode != "recurrent":
        written = beta.unsqueeze(-1) * k
        return gated_dplr(
            q,
            written,
            v,
            -written,
            gate_exp(log_gate) * k,
            log_gate,
            mode=mode,
            chunk_size=chunk_size,
            initial_state=initial_state,
            return_state=return_state,
        )
    check_log_gate("log_gate", log_gate)
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    o, state = kda_recurrent(q, k, v, beta, log_gate, initial_state)
    return (o, state) if return_state else o


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
    chunk after chunk. Every exponent is a difference later - earlier <= 0."""
    B, H, T, D = q.shape
    Dv, n, S = v.shape[-1], T // L, state
    qc, kc, ac, bc, gc = (x.reshape(B, H, n, L, D) for x in (q, k, a, b, log_gate))
    vc = v.reshape(B, H, n, L, Dv)
    c = gc.cumsum(-2)
    c_prev = F.pad(c[..., :-1, :], (0, 0, 1, 0))  # c_{i-1}, 0 before the chunk
    A_ab = pair_weights(bc, ac, c_prev, c, strict=True)
    A_ak = pair_weights(bc, kc, c_prev, c, strict=True)
    P_qa = pair_weights(qc, ac, c, c, strict=False)
    P_qk = pair_weights(qc, kc, c, c, strict=False)
    right = torch.cat([bc * gate_exp(c_prev), A_ak @ vc], -1)
    # unit lower-triangular: the solver takes the diagonal as 1 and reads only below it
    WU = torch.linalg.solve_triangular(-A_ab, right, upper=False, unitriangular=True)
    W, U0 = WU.split([D, Dv], -1)
    o = P_qa @ U0 + P_qk @ vc
    ends = S is not None or n > 1 or return_state or not last
    if not ends:
        return o.reshape(B, H, T, Dv), None
    since_end = gate_exp(c[..., L - 1 :, :] - c)  # exp(c_end - c_j)
    a_end_t, k_end_t = (ac * since_end).transpose(-1, -2), (kc * since_end).transpose(-1, -2)
    update = a_end_t @ U0 + k_end_t @ vc  # [B, H, n, D, Dv]: each chunk from a zero start
    if S is None and n == 1:
        return o.reshape(B, H, T, Dv), update[:, :, 0]
    transition = torch.diag_embed(gate_exp(c[..., L - 1, :])) + a_end_t @ W  # [B, H, n, D, D]
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    starts = []
    for transition_c, update_c in zip(transition.unbind(2), update.unbind(2), strict=True):
        starts.append(S)
        S = torch.baddbmm(update_c.flatten(0, 1), transition_c.flatten(0, 1), S.flatten(0, 1))
        S = S.view(B, H, D, Dv)
    starts = torch.stack(starts, 2)
    o = o + (qc * gate_exp(c) + P_qa @ W) @ starts
    return o.reshape(B, H, T, Dv), S


def pair_weights(x: Tensor, y: Tensor, cx: Tensor, cy: Tensor, strict: bool) -> Tensor:
    """M[..., i, j] = sum_d x_id y_jd exp(cx_id - cy_jd) for j < i (`strict`) or j <= i, else
    0: x, y, cx, cy [..., L, D] -> M [..., L, L]. cy is a cumulative log-gate (non-increasing
    along the steps) and cx_i <= cy_j on every kept pair.

    Pairs inside one sub-chunk of `SUB_CHUNK` steps are taken exactly ([s, s, D]
    exponentials of differences <= 0). For i in sub-chunk m > 0 and j in an earlier one, the
    last step r of sub-chunk m - 1 lies between them, and

        exp(cx_i - cy_j) = exp(cx_i - cy_r) exp(cy_r - cy_j),   both factors <= 1,

    so those pairs are one product of x_i exp(cx_i - cy_r) against y_j exp(cy_r - cy_j)
    (docs/background.md, section 14's reference point, by sub-chunks)."""
    L, D = x.shape[-2:]
    s = min(SUB_CHUNK, L)
    m = math.ceil(L / s)
    P = m * s
    if P != L:  # pad with steps that neither write nor read, the log-gates kept flat
        x, y = (F.pad(t, (0, 0, 0, P - L)) for t in (x, y))
        cx, cy = (
            torch.cat([t, t[..., -1:, :].expand(*t.shape[:-2], P - L, D)], -2) for t in (cx, cy)
        )
    xs, ys, cxs, cys = (t.unflatten(-2, (m, s)) for t in (x, y, cx, cy))  # [..., m, s, D]
    keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril(-1 if strict else 0)
    inside = _masked_exp(cxs.unsqueeze(-2) - cys.unsqueeze(-3), keep.unsqueeze(-1))
    within = torch.einsum("...id,...jd,...ijd->...ij", xs, ys, inside)  # [..., m, s, s]
    if m == 1:
        return within[..., 0, :L, :L]
    ref = cys[..., :-1, -1:, :]  # [..., m - 1, 1, D]: c at the last step of sub-chunks 0..m-2
    x_ref = xs[..., 1:, :, :] * gate_exp(cxs[..., 1:, :, :] - ref)  # [..., m - 1, s, D]
    steps = torch.arange(P, device=x.device)
    earlier = steps < steps[s::s].unsqueeze(-1)  # [m - 1, P]: j before sub-chunk m's start
    y_ref = y.unsqueeze(-3) * _masked_exp(ref - cy.unsqueeze(-3), earlier.unsqueeze(-1))
    across = x_ref @ y_ref.transpose(-1, -2)  # [..., m - 1, s, P]
    rows = torch.cat([across.new_zeros(*across.shape[:-3], 1, s, P), across], -3)
    blocks = torch.eye(m, dtype=x.dtype, device=x.device)[:, None, :, None]  # [m, 1, m, 1]
    M = rows.unflatten(-1, (m, s)) + within.unsqueeze(-2) * blocks  # [..., m, s, m, s]
    return M.reshape(*M.shape[:-4], P, P)[..., :L, :L]


def _masked_exp(diff: Tensor, keep: Tensor) -> Tensor:
    """exp(diff) where `keep` (broadcast), 0 elsewhere and where the exponent is below
    `normal_floor` (no subnormals; no gradient there either)."""
    return diff.masked_fill(~keep | (diff < normal_floor(diff)), float("-inf")).exp()
