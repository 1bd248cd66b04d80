"""Gated linear attention (docs/background.md, section 14): a state forgotten by input, one
gate per key dimension (GLA) or one per head (Mamba-2's scalar gate). "gate" in this module is
a_t = exp(log_gate_t) in (0, 1]; b = the cumulative sum of the log-gates (log of the product
of the gates) inside a chunk."""

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import (
    causal_exp,
    causal_gaps,
    check_log_gate,
    check_mode,
    check_qkv,
    check_shape,
    gate_exp,
    in_blocks,
)
from models.precision import in_fp32


@in_fp32()
def gated_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal linear attention whose state decays by a gate given with each token:

        S_t = diag(a_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t,   a_t = exp(log_gate_t)

    No normaliser and no scaling inside (the caller scales q). A per-head log-gate [B, H, T]
    is one a_t for every key dimension (Mamba-2's recurrence); with a constant one, log(gamma),
    this is RetNet's eq. 10.

    Args:
        q, k: queries and keys.
        v: values.
        log_gate: log a_t, finite and <= 0: per key dimension [B, H, T, D] (GLA) or per head
            [B, H, T].
        mode: "recurrent" (the step loop, the specification); "parallel" (every weight
            q_t^T diag(exp(b_t - b_s)) k_s of the T x T causal matrix at once, b the cumulative
            log-gate: [B, H, T, T, D] for per-dimension gates, a reference); "chunk" (chunks of
            `chunk_size` steps: the state carried from chunk to chunk by a loop, the weights
            inside a chunk from differences of the chunk's cumulative log-gates only, never
            exp(b) against exp(-b): finite and accurate however small the gates, see
            docs/background.md, section 14).
        chunk_size: the chunk length of "chunk".
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv];  log_gate: [B, H, T, D] or [B, H, T]
        state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    if tuple(log_gate.shape) not in ((B, H, T, D), (B, H, T)):
        raise ValueError(
            f"log_gate must have shape {[B, H, T, D]} (per key dimension) or {[B, H, T]}"
            f" (per head), got {list(log_gate.shape)}"
        )
    check_log_gate("log_gate", log_gate)
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    gate = log_gate if log_gate.dim() == 4 else log_gate.unsqueeze(-1)  # [B, H, T, D or 1]
    if mode == "recurrent":
        o, state = _gated_recurrent(q, k, v, gate, initial_state)
    elif mode == "parallel":
        o, state = _gated_parallel(q, k, v, gate, initial_state)
    else:
        chunks = partial(_gated_chunks, return_state=return_state)
        o, state = in_blocks(chunks, (q, k, v, gate), 2, chunk_size, initial_state)
    return (o, state) if return_state else o


def _gated_recurrent(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The specification: one gated update per token (log_gate [B, H, T, D or 1])."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    for q_t, k_t, v_t, g_t in zip(
        q.unbind(2), k.unbind(2), v.unbind(2), log_gate.unbind(2), strict=True
    ):
        S = torch.exp(g_t)[..., None] * S + k_t[..., :, None] * v_t[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S


def _gated_parallel(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The whole sequence as one masked matrix: A[t, s] = sum_d q_td k_sd exp(b_td - b_sd) for
    s <= t (b = cumsum of the log-gates), o = A V + (q exp(b)) S_0, and the state after the
    last step S_T = diag(exp(b_T)) S_0 + (K exp(b_T - b))^T V. Every exponent is <= 0."""
    T = q.shape[2]
    b = log_gate.cumsum(2)  # [B, H, T, D or 1]
    weights = causal_exp(b.unsqueeze(3) - b.unsqueeze(2), dim=(2, 3))  # [B, H, T, T, D or 1]
    if b.shape[-1] == 1:
        scores = (q @ k.transpose(-1, -2)) * weights[..., 0]
    else:
        scores = torch.einsum("bhtd,bhsd,bhtsd->bhts", q, k, weights)
    o = scores @ v
    end = b[:, :, T - 1 :]  # [B, H, 1, D or 1]
    final = (k * gate_exp(end - b)).transpose(-1, -2) @ v
    if S is not None:
        o = o + (q * gate_exp(b)) @ S
        final = final + gate_exp(end).transpose(-1, -2) * S
    return o, final


def _gated_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_gate: Tensor,
    *,
    L: int,
    state: Tensor | None,
    last: bool,
    return_state: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """T = n*L steps as n chunks (docs/background.md, section 14). With b_i the cumulative
    log-gate of step i inside its chunk (b_{L-1} the whole chunk's):

        o_i = sum_{j<=i} (q_i exp(b_i - b_j))^T k_j v_j + (q_i exp(b_i))^T S_start
        S_end = diag(exp(b_{L-1})) S_start + sum_j (k_j exp(b_{L-1} - b_j)) v_j^T

    The in-chunk sum is `_scalar_gated_sums` (a [L, L] matrix of exp(b_i - b_j)) or
    `_gated_sums` (by halves, for per-dimension gates); the start states by a loop over the
    chunks. Every exponent is a difference b_later - b_earlier <= 0."""
    B, H, T, D = q.shape
    Dv, n, S = v.shape[-1], T // L, state
    qc, kc, vc, gc = (x.reshape(B, H, n, L, x.shape[-1]) for x in (q, k, v, log_gate))
    b = gc.cumsum(3)  # [B, H, n, L, D or 1]
    ends = S is not None or n > 1 or return_state or not last  # the state is needed
    if b.shape[-1] == 1:
        o = _scalar_gated_sums(qc, kc, vc, b.squeeze(-1))
        q_start, k_end = _ChunkEnds.apply(qc, kc, b) if ends else (None, None)
    else:
        o, q_start, k_end = _gated_sums(qc, kc, vc, b, ends)
    if not ends:
        return o.reshape(B, H, T, Dv), None
    update = k_end.transpose(-1, -2) @ vc  # [B, H, n, D, Dv]
    if S is None and n == 1:
        return o.reshape(B, H, T, Dv), update[:, :, 0]
    carry = gate_exp(b[:, :, :, L - 1 :]).transpose(-1, -2)  # [B, H, n, D or 1, 1]
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    starts = []
    for carry_c, update_c in zip(carry.unbind(2), update.unbind(2), strict=True):
        starts.append(S)
        S = carry_c * S + update_c
    o = o + q_start @ torch.stack(starts, 2)
    return o.reshape(B, H, T, Dv), S


class _ChunkEnds(torch.autograd.Function):
    """(q_i exp(b_i), k_j exp(b_end - b_j)): the queries as they read the chunk's start state
    and the keys as they stand in its end state; q, k [..., L, D], b [..., L, D or 1] the
    cumulative log-gates, b_end = b_{L-1}. Backward, with q' and k' these outputs:
    dq = dq' exp(b), dk = dk' exp(b_end - b), db = dq' q' - dk' k' (summed over D for one
    gate per head), and b_end adds the sum over j of dk' k'."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        kept = _ends(q, k, b)
        ctx.save_for_backward(*kept)
        return kept[0], kept[1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_q_start: Tensor, grad_k_end: Tensor) -> tuple[Tensor, ...]:
        return _ends_backward(grad_q_start, grad_k_end, ctx.saved_tensors)


def _ends(q: Tensor, k: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`_ChunkEnds`' forward: (q exp(b), k exp(b_end - b), exp(b), exp(b_end - b))."""
    e_q = gate_exp(b)
    e_k = gate_exp(b[..., -1:, :] - b)
    return q * e_q, k * e_k, e_q, e_k


def _ends_backward(
    grad_q_start: Tensor, grad_k_end: Tensor, kept: Sequence[Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """`_ChunkEnds`' backward from what `_ends` returned: (dq, dk, db)."""
    q_start, k_end, e_q, e_k = kept
    from_q, from_k = grad_q_start * q_start, grad_k_end * k_end
    if e_q.shape[-1] != q_start.shape[-1]:  # one gate per head
        from_q, from_k = from_q.sum(-1, keepdim=True), from_k.sum(-1, keepdim=True)
    grad_b = from_q.sub_(from_k)
    grad_b[..., -1:, :] += from_k.sum(-2, keepdim=True)
    return grad_q_start * e_q, grad_k_end * e_k, grad_b


def _scalar_gated_sums(q: Tensor, k: Tensor, v: Tensor, b: Tensor) -> Tensor:
    """sum_{j<=i} exp(b_i - b_j) (q_i . k_j) v_j inside each chunk, for one gate per head:
    q, k [..., L, D], v [..., L, Dv], b [..., L]."""
    weights = causal_gaps(b)  # [..., L, L]
    return ((q @ k.transpose(-1, -2)) * weights) @ v


def _gated_sums(
    q: Tensor, k: Tensor, v: Tensor, b: Tensor, ends: bool
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """sum_{j<=i} (q_i exp(b_i - b_j))^T k_j v_j inside each chunk, per key dimension, and with
    `ends` also `_ChunkEnds`' (q exp(b), k exp(b_end - b)) in the same pass: q, k, b
    [..., L, D], v [..., L, Dv] (docs/background.md, section 14). `_GatedSums` on the chunk
    padded to a power of two with steps that neither write nor are read (q = k = v = 0,
    log-gate 0: b stays the chunk's last)."""
    L = q.shape[-2]
    P = 1 << (L - 1).bit_length()
    if P != L:
        q, k, v = (F.pad(x, (0, 0, 0, P - L)) for x in (q, k, v))
        b = torch.cat([b, b[..., L - 1 :, :].expand(*b.shape[:-2], P - L, b.shape[-1])], -2)
    outs = _GatedSums.apply(*(x.reshape(-1, P, x.shape[-1]) for x in (q, k, v, b)), ends)
    shapes = (v.shape, q.shape, k.shape)
    outs = [None if x is None else x.view(shape) for x, shape in zip(outs, shapes, strict=True)]
    return tuple(x if x is None or P == L else x[..., :L, :] for x in outs)


def _halves(x: Tensor, s: int) -> tuple[Tensor, Tensor]:
    """x [..., P, F] in blocks of s steps -> (first halves, second halves), each
    [..., P/s, s/2, F] (views)."""
    first, second = x.unflatten(-2, (x.shape[-2] // s, 2, s // 2)).unbind(-3)
    return first, second


class _GatedSums(torch.autograd.Function):
    """The per-dimension in-chunk sums by halves, q, k, b [R, P, D], v [R, P, Dv] (R chunks),
    P a power of two. The pairs j < i are taken block by block: a block of s steps is split into
    its halves, and every pair (i in the second, j in the first) has the same reference point
    r between them, the last step of the first half:

        exp(b_i - b_j) = exp(b_i - b_r) exp(b_r - b_j),   both factors <= 1,

    so that block's weights are one product Q' K'^T of q_i' = q_i exp(b_i - b_r) and
    k_j' = k_j exp(b_r - b_j), and its outputs O'_late = (Q' K'^T) V_early; then each half
    is split in turn (s = P, P/2, ..., 2), and the pair i = j has weight q_i . k_i.

    Backward, from dO: per block dV_early = A^T dO_late, dA = dO_late V_early^T,
    dQ' = dA K', dK' = dA^T Q', then dq_i = dq_i' exp(b_i - b_r), db_i = dq_i' q_i',
    dk_j = dk_j' exp(b_r - b_j), db_j = -dk_j' k_j'. The weights do not depend on r, so r
    takes no gradient. The exponentials and A are kept from the forward (when a gradient is
    needed), Q' and K' recomputed.

    Both passes run over tiles of chunks of at most GATED_TILE_BYTES per input, so that the
    passes of every level over a tile stay in a core's cache."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, b: Tensor, ends: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        o = torch.empty_like(v)
        for_backward = any(x.requires_grad for x in (q, k, v, b))
        kept, starts, stops = [], [], []
        for tile in _tiles(q):
            kept += _sums_forward(*(x[tile] for x in (q, k, v, b, o)), for_backward)
            if ends:
                q_start, k_end, *exps = _ends(q[tile], k[tile], b[tile])
                starts.append(q_start)
                stops.append(k_end)
                kept += [q_start, k_end, *exps] if for_backward else []
        ctx.save_for_backward(q, k, v, b, *kept)
        ctx.ends = ends
        ctx.set_materialize_grads(False)
        if not ends:
            return o, None, None
        return o, torch.cat(starts), torch.cat(stops)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx: Any, grad_o: Tensor | None, grad_q_start: Tensor | None, grad_k_end: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        q, k, v, b, *kept = ctx.saved_tensors
        grad_o = torch.zeros_like(v) if grad_o is None else grad_o.contiguous()
        grads = [torch.empty_like(x) for x in (q, k, v, b)]
        levels = 3 * (q.shape[-2].bit_length() - 1)  # what `_sums_forward` keeps per tile
        per_tile = levels + 4 * ctx.ends  # and `_ends`
        for index, tile in enumerate(_tiles(q)):
            mine = kept[index * per_tile : (index + 1) * per_tile]
            _sums_backward(*(x[tile] for x in (q, k, v, b, grad_o, *grads)), mine[:levels])
            if ctx.ends and (grad_q_start is not None or grad_k_end is not None):
                g_start, g_end = (
                    torch.zeros_like(q[tile]) if g is None else g[tile]
                    for g in (grad_q_start, grad_k_end)
                )
                grad_q, grad_k, grad_b = _ends_backward(g_start, g_end, mine[levels:])
                grads[0][tile] += grad_q
                grads[1][tile] += grad_k
                grads[3][tile] += grad_b
        return (*grads, None)


GATED_TILE_BYTES = 1 << 19  # per input of `_GatedSums` per tile: a tile's levels in a core's L2


def _tiles(q: Tensor) -> list[slice]:
    """The tiles of q [R, P, D]: whole chunks (rows), at most GATED_TILE_BYTES (at least one
    chunk) each."""
    rows = max(1, GATED_TILE_BYTES // (q[0].numel() * q.element_size()))
    if torch.compiler.is_compiling():  # one tile: a graph, not a Python loop unrolled
        rows = q.shape[0]
    return [slice(r, r + rows) for r in range(0, q.shape[0], rows)]


def _sums_forward(
    q: Tensor, k: Tensor, v: Tensor, b: Tensor, o: Tensor, for_backward: bool
) -> list[Tensor]:
    """`_GatedSums`' forward on one tile, written into o; returns what the backward needs."""
    torch.mul((q * k).sum(-1, keepdim=True), v, out=o)  # the pairs i = j
    kept = []
    s = q.shape[-2]
    while s > 1:
        (q_late, k_early, v_early), (b_early, b_late) = _block_inputs(q, k, v, b, s)
        ref = b_early[..., -1:, :]
        e_q, e_k = (b_late - ref).exp_(), (ref - b_early).exp_()  # [..., P/s, h, D]
        q_f, k_f = e_q * q_late, e_k * k_early  # q_i exp(b_i - b_r), k_j exp(b_r - b_j)
        A = q_f @ k_f.transpose(-1, -2)  # [..., P/s, h, h]
        _halves(o, s)[1].add_(_mm(A, v_early))
        if for_backward:
            kept += [e_q, e_k, A]
        s //= 2
    return kept


def _sums_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    b: Tensor,
    grad_o: Tensor,
    grad_q: Tensor,
    grad_k: Tensor,
    grad_v: Tensor,
    grad_b: Tensor,
    kept: list[Tensor],
) -> None:
    """`_GatedSums`' backward on one tile, written into the grad_ tensors."""
    qk, go_v = (q * k).sum(-1, keepdim=True), (grad_o * v).sum(-1, keepdim=True)
    torch.mul(go_v, k, out=grad_q)  # the pairs i = j
    torch.mul(go_v, q, out=grad_k)
    torch.mul(qk, grad_o, out=grad_v)
    grad_b.zero_()
    s = q.shape[-2]
    for e_q, e_k, A in zip(kept[::3], kept[1::3], kept[2::3], strict=True):
        (q_late, k_early, v_early), _ = _block_inputs(q, k, v, b, s)
        q_f, k_f = e_q * q_late, e_k * k_early
        grad_late = _halves(grad_o, s)[1]
        _halves(grad_v, s)[0].add_(_mm(A.transpose(-1, -2), grad_late))
        grad_A = grad_late @ v_early.transpose(-1, -2)
        grad_qf, grad_kf = _mm(grad_A, k_f), _mm(grad_A.transpose(-1, -2), q_f)
        gb_early, gb_late = _halves(grad_b, s)
        _halves(grad_q, s)[1].addcmul_(grad_qf, e_q)
        gb_late.addcmul_(grad_qf, q_f)
        _halves(grad_k, s)[0].addcmul_(grad_kf, e_k)
        gb_early.addcmul_(grad_kf, k_f, value=-1)
        s //= 2


def _block_inputs(
    q: Tensor, k: Tensor, v: Tensor, b: Tensor, s: int
) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:
    """What the blocks of s steps read: ((q of their second halves, k and v of their first
    halves), (b of their first halves, b of their second halves))."""
    b_early, b_late = _halves(b, s)
    return (_halves(q, s)[1], _halves(k, s)[0], _halves(v, s)[0]), (b_early, b_late)


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b ([..., m, h] @ [..., h, F]); for h <= 2 as h broadcast products, which take a
    fraction of the time of a batched matmul of that many tiny matrices."""
    h = a.shape[-1]
    if h > 2:
        return a @ b
    out = a[..., :1] * b[..., :1, :]
    if h == 2:
        out.addcmul_(a[..., 1:], b[..., 1:, :])
    return out
