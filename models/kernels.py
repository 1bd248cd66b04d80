"""Sequence-mixing kernels: pure functions, layout [batch, heads, time, dim], causal.

Each recurrent kernel has a plain step loop, `mode="recurrent"`, which is its specification,
beside faster forms that the tests compare against it:

- "parallel": the masked T x T form over the whole sequence (one block);
- "chunk": the same masked form inside blocks of `chunk_size` steps, with the recurrent state
  carried from block to block. A sequence whose length is not a multiple of `chunk_size` is
  run as its longest whole-chunk prefix followed by one shorter block (no padding).

States are returned with `return_state=True` and accepted as `initial_state`, so a sequence can
be split anywhere and continued.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from common.checks import require_choice, require_int

MODES = ("chunk", "parallel", "recurrent")
SCAN_BLOCK = 64  # chunks per block of the decayed state scan (bounds its [n x n] matrix)

LinearState = tuple[Tensor, Tensor]  # (S [B, H, D, Dv], z [B, H, D])
WKVState = tuple[Tensor, Tensor, Tensor]  # (num, den, max exponent), each [B, C]


# ----------------------------------------------------------------------------- checks


def check_mode(mode: str, chunk_size: int) -> None:
    """`mode` is one of MODES and `chunk_size` an integer >= 1 (else the clear ValueError)."""
    require_choice("mode", mode, MODES)
    require_int("chunk_size", chunk_size, 1)


def _check_shape(name: str, x: Tensor, shape: Sequence[int]) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    ok = q.dim() == 4 and k.shape == q.shape and v.dim() == 4 and v.shape[:3] == q.shape[:3]
    if not ok or q.shape[2] == 0:
        raise ValueError(
            "expected q, k of shape [B, H, T, D] and v of shape [B, H, T, Dv] (same B, H, T >= 1),"
            f" got q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}"
        )


def _in_blocks(
    block_fn: Callable[..., tuple[Tensor, Any]],
    seqs: Sequence[Tensor],
    time_dim: int,
    block_len: int,
    state: Any,
) -> tuple[Tensor, Any]:
    """Run `block_fn(*pieces, block_len, state) -> (out, state)` on the longest prefix made of
    whole blocks, then on the remaining (< block_len) steps as one shorter block."""
    T = seqs[0].shape[time_dim]
    full = T // block_len * block_len
    outs = []
    for start, length, size in ((0, full, block_len), (full, T - full, T - full)):
        if length:
            pieces = [x.narrow(time_dim, start, length) for x in seqs]
            out, state = block_fn(*pieces, size, state)
            outs.append(out)
    return (outs[0] if len(outs) == 1 else torch.cat(outs, time_dim)), state


# ----------------------------------------------------------------------------- softmax


def softmax_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal softmax attention (eq. 1): o_t = sum_{s<=t} softmax_s(q_t^T k_s / sqrt(d)) v_s.

    q, k: [B, H, T, d]; v: [B, H, T, dv] -> o [B, H, T, dv]. Uses torch SDPA.
    """
    _check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# ----------------------------------------------------------------------------- linear attention


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    decay: Tensor | None = None,
    normalize: bool = True,
    mode: str = "chunk",
    chunk_size: int = 64,
    eps: float = 1e-6,
    initial_state: LinearState | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, LinearState]:
    """Causal linear attention (eq. 8-9), with RetNet's per-head decay (eq. 10).

        S_t = g S_{t-1} + k_t v_t^T,   z_t = g z_{t-1} + k_t
        o_t = q_t^T S_t / (q_t^T z_t + eps)   if normalize else   q_t^T S_t

    q, k: [B, H, T, D], already feature-mapped (phi applied); v: [B, H, T, Dv].
    decay: None (g = 1) or [H] per-head gammas in (0, 1].
    mode: "recurrent" (step loop, the spec), "parallel" (o = (Q K^T * M) V with the causal
    decay matrix M[t, s] = g^(t-s) for s <= t), "chunk" (that form inside chunks; chunk start
    states by a cumulative sum over chunks, or with decay a matrix of powers g^(C*i)).
    Chunk mode holds [B, H, T/C, D, Dv] chunk states, never one state per step.
    State: (S [B, H, D, Dv], z [B, H, D]), decayed; returned as (o, state) if return_state.
    """
    check_mode(mode, chunk_size)
    _check_qkv(q, k, v)
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    if decay is not None:
        _check_shape("decay", decay, (H,))
    if initial_state is not None:
        _check_shape("initial_state[0] (S)", initial_state[0], (B, H, D, Dv))
        _check_shape("initial_state[1] (z)", initial_state[1], (B, H, D))
    if mode == "recurrent":
        o, state = _linear_recurrent(q, k, v, decay, normalize, eps, initial_state)
    else:
        log_g = None if decay is None else decay.to(q.dtype).log()

        def block(q_: Tensor, k_: Tensor, v_: Tensor, size: int, st: Any) -> tuple[Tensor, Any]:
            return _linear_chunks(q_, k_, v_, size, log_g, normalize, eps, st)

        size = T if mode == "parallel" else chunk_size
        o, state = _in_blocks(block, (q, k, v), 2, size, initial_state)
    return (o, state) if return_state else o


def _linear_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    decay: Tensor | None,
    normalize: bool,
    eps: float,
    state: LinearState | None,
) -> tuple[Tensor, LinearState]:
    """The specification: one step of eq. 8-10 per token."""
    B, H, T, D = q.shape
    if state is None:
        S, z = q.new_zeros(B, H, D, v.shape[-1]), q.new_zeros(B, H, D)
    else:
        S, z = state
    g = torch.ones(H, dtype=q.dtype, device=q.device) if decay is None else decay.to(q.dtype)
    g_S, g_z = g[:, None, None], g[:, None]  # broadcast over S [B, H, D, Dv] and z [B, H, D]
    outs = []
    for t in range(T):
        q_t, k_t, v_t = q[:, :, t], k[:, :, t], v[:, :, t]
        S = g_S * S + k_t[..., :, None] * v_t[..., None, :]
        z = g_z * z + k_t
        o_t = torch.einsum("bhd,bhde->bhe", q_t, S)
        if normalize:
            o_t = o_t / ((q_t * z).sum(-1, keepdim=True) + eps)
        outs.append(o_t)
    return torch.stack(outs, 2), (S, z)


def _linear_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    C: int,
    log_g: Tensor | None,
    normalize: bool,
    eps: float,
    state: LinearState | None,
) -> tuple[Tensor, LinearState]:
    """T = n*C steps as n chunks. Inside chunk c (steps i, j = 0..C-1), from its start state:
    o_i = sum_{j<=i} g^(i-j) (q_i.k_j) v_j + g^(i+1) q_i^T S_start; the chunk adds
    sum_j g^(C-1-j) k_j v_j^T to the state and decays the old one by g^C."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    n = T // C
    qc, kc, vc = q.reshape(B, H, n, C, D), k.reshape(B, H, n, C, D), v.reshape(B, H, n, C, Dv)
    scores = qc @ kc.transpose(-1, -2)  # [B, H, n, C, C]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if log_g is None:
        scores = scores.masked_fill(~causal, 0.0)
        q_in, k_out, chunk_log_decay = qc, kc, None
    else:
        i = torch.arange(C, dtype=q.dtype, device=q.device)
        lg = log_g.view(-1, 1, 1, 1)  # [H, 1, 1, 1] against [B, H, n, C, .]
        # g^(i-j) below the diagonal; the exponent is clamped first so exp never sees (i-j) < 0
        lag = (i[:, None] - i[None, :]).clamp(min=0)
        scores = scores * (torch.exp(lag * lg) * causal)
        q_in = qc * torch.exp((i + 1)[:, None] * lg)  # g^(i+1): the start state at step i
        k_out = kc * torch.exp((C - 1 - i)[:, None] * lg)  # g^(C-1-j): step j's update at the end
        chunk_log_decay = C * log_g
    # each chunk's own contribution to the state at its end, then the state at each chunk start
    dS, dz = k_out.transpose(-1, -2) @ vc, k_out.sum(3)  # [B, H, n, D, Dv], [B, H, n, D]
    init = None if state is None else torch.cat([state[0].flatten(-2), state[1]], -1)
    starts, final = _scan_chunks(torch.cat([dS.flatten(-2), dz], -1), chunk_log_decay, init)
    S_start, z_start = starts[..., : D * Dv].unflatten(-1, (D, Dv)), starts[..., D * Dv :]
    o = scores @ vc + q_in @ S_start
    if normalize:
        den = scores.sum(-1) + (q_in * z_start.unsqueeze(3)).sum(-1)
        o = o / (den + eps).unsqueeze(-1)
    S_end, z_end = final[..., : D * Dv].unflatten(-1, (D, Dv)), final[..., D * Dv :]
    return o.reshape(B, H, T, Dv), (S_end, z_end)


def _scan_chunks(x: Tensor, log_decay: Tensor | None, init: Tensor | None) -> tuple[Tensor, Tensor]:
    """States before each chunk, s_c = sum_{c'<c} G^(c-1-c') x_c' + G^c init, and after the last.

    x: [B, H, n, F] per-chunk contributions; log_decay: [H] per-chunk log G, or None (G = 1);
    init: [B, H, F] or None. Without decay a cumulative sum. With decay, blocks of SCAN_BLOCK
    chunks, each one product with the (block+1) x block matrix of powers G^(c-1-c'), c' < c
    (exponents >= 0 only: no division by small powers), the last state carried between blocks.
    """
    n = x.shape[2]
    if log_decay is None:
        incl = x.cumsum(2)
        starts = torch.cat([torch.zeros_like(x[:, :, :1]), incl[:, :, :-1]], 2)
        final = incl[:, :, -1]
        if init is not None:
            starts, final = starts + init.unsqueeze(2), final + init
        return starts, final
    m = min(n, SCAN_BLOCK)
    c = torch.arange(m + 1, dtype=x.dtype, device=x.device)
    power = c[:, None] - 1 - c[None, :m]  # [m+1, m]: c - 1 - c'
    lg = log_decay[:, None, None]
    powers = torch.exp(power.clamp(min=0) * lg) * (power >= 0)  # [H, m+1, m]
    init_powers = torch.exp(c * lg[..., 0])  # [H, m+1]: G^c
    starts, carry = [], init
    for b0 in range(0, n, m):
        size = min(m, n - b0)
        s = powers[:, : size + 1, :size] @ x[:, :, b0 : b0 + size]  # [B, H, size+1, F]
        if carry is not None:
            s = s + init_powers[:, : size + 1, None] * carry.unsqueeze(2)
        starts.append(s[:, :, :size])
        carry = s[:, :, size]
    return torch.cat(starts, 2), carry


def linear_attention_cumsum(
    q: Tensor, k: Tensor, v: Tensor, *, normalize: bool = True, eps: float = 1e-6
) -> Tensor:
    """Exercise 1, the naive parallel form: S_t = cumsum_s k_s v_s^T, z_t = cumsum_s k_s, then
    eq. 9. Materialises every prefix state [B, H, T, D, Dv]: a reference and a benchmark
    baseline only. No decay."""
    _check_qkv(q, k, v)
    S = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=2)  # [B, H, T, D, Dv]
    o = torch.einsum("bhtd,bhtde->bhte", q, S)
    if normalize:
        o = o / ((q * k.cumsum(2)).sum(-1, keepdim=True) + eps)
    return o


# ----------------------------------------------------------------------------- RWKV-4


def rwkv4_wkv(
    w: Tensor,
    u: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 16,
    initial_state: WKVState | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, WKVState]:
    """RWKV-4 time mixing, eq. 11, per channel:

        wkv_t = (sum_{j<t} e^{-(t-1-j)w + k_j} v_j + e^{u+k_t} v_t)
              / (sum_{j<t} e^{-(t-1-j)w + k_j}     + e^{u+k_t})

    w, u: [C] (w >= 0 is the decay rate, u the bonus of the current token); k, v: [B, T, C].
    Running-max form: the state after t tokens, a = sum_{j<t} e^{-(t-1-j)w + k_j} v_j and its
    denominator b, is stored as (num, den, p) with a = num e^p, b = den e^p, p the largest
    exponent; only exp of non-positive numbers is taken, so nothing overflows. p is a
    stabiliser (the outputs do not depend on it) and carries no gradient.
    mode: "recurrent" (step loop, the spec), "parallel" (T x T exponents, per-row max
    subtracted), "chunk" (that form inside chunks, the state carried by a loop over chunks).
    "parallel"/"chunk" hold [B, T, L, C] for blocks of length L (per-channel decay: no matmul
    form), so their cost grows with L; chunk_size 8-16 is fastest on CPU.
    """
    check_mode(mode, chunk_size)
    if k.dim() != 3 or v.shape != k.shape or k.shape[1] == 0:
        raise ValueError(
            f"expected k, v of the same shape [B, T, C] (T >= 1), got k {list(k.shape)},"
            f" v {list(v.shape)}"
        )
    B, T, C = k.shape
    _check_shape("w", w, (C,))
    _check_shape("u", u, (C,))
    if initial_state is not None:
        for name, x in zip(("num", "den", "max"), initial_state, strict=True):
            _check_shape(f"initial_state ({name})", x, (B, C))
    if mode == "recurrent":
        out, state = _wkv_recurrent(w, u, k, v, initial_state)
    else:

        def block(k_: Tensor, v_: Tensor, size: int, st: Any) -> tuple[Tensor, Any]:
            return _wkv_chunks(w, u, k_, v_, size, st)

        size = T if mode == "parallel" else chunk_size
        out, state = _in_blocks(block, (k, v), 1, size, initial_state)
    return (out, state) if return_state else out


def _wkv_empty_state(k: Tensor) -> WKVState:
    B, _, C = k.shape
    return k.new_zeros(B, C), k.new_zeros(B, C), k.new_full((B, C), float("-inf"))


def _wkv_recurrent(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, state: WKVState | None
) -> tuple[Tensor, WKVState]:
    """The specification: eq. 11 one token at a time, in running-max form."""
    num, den, p = _wkv_empty_state(k) if state is None else state
    outs = []
    for t in range(k.shape[1]):
        k_t, v_t = k[:, t], v[:, t]
        # output: the stored sums plus the current token weighted e^{u + k_t}
        bonus = u + k_t
        m = torch.maximum(p, bonus).detach()
        a, b = torch.exp(p - m), torch.exp(bonus - m)
        outs.append((a * num + b * v_t) / (a * den + b))
        # state: a <- e^{-w} a + e^{k_t} v_t  (and the same for the denominator)
        decayed = p - w
        p_next = torch.maximum(decayed, k_t).detach()
        a, b = torch.exp(decayed - p_next), torch.exp(k_t - p_next)
        num, den, p = a * num + b * v_t, a * den + b, p_next
    return torch.stack(outs, 1), (num, den, p)


def _wkv_chunks(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, L: int, state: WKVState | None
) -> tuple[Tensor, WKVState]:
    """T = n*L tokens as n chunks of L; positions i, j = 0..L-1 inside a chunk."""
    B, T, C = k.shape
    n = T // L
    kc, vc = k.reshape(B, n, L, C), v.reshape(B, n, L, C)
    i = torch.arange(L, dtype=k.dtype, device=k.device)
    # 1. each chunk's own sums at its end: exponents k_j - (L-1-j) w
    e = kc - (L - 1 - i)[:, None] * w  # [B, n, L, C]
    p_chunk = e.amax(2).detach()
    weights = torch.exp(e - p_chunk.unsqueeze(2))
    num_chunk, den_chunk = (weights * vc).sum(2), weights.sum(2)  # [B, n, C]
    # 2. the state at each chunk start: a loop over chunks, O(B C) per chunk
    num, den, p = _wkv_empty_state(k) if state is None else state
    starts = []
    for c in range(n):
        starts.append((num, den, p))
        decayed = p - L * w
        p_next = torch.maximum(decayed, p_chunk[:, c]).detach()
        a, b = torch.exp(decayed - p_next), torch.exp(p_chunk[:, c] - p_next)
        num, den, p = a * num + b * num_chunk[:, c], a * den + b * den_chunk[:, c], p_next
    num_s, den_s, p_s = (torch.stack(x, 1).unsqueeze(2) for x in zip(*starts, strict=True))
    # 3. inside each chunk: exponent of token j in row i is k_j + offset[i, j] with
    #    offset = -(i-1-j) w for j < i, u for j = i, -inf for j > i; the start state adds p - i w
    lag = (i[:, None] - 1 - i[None, :])[..., None]  # [L, L, 1]
    below = torch.ones(L, L, dtype=torch.bool, device=k.device).tril(-1)[..., None]
    diag = torch.eye(L, dtype=torch.bool, device=k.device)[..., None]
    minus_inf = torch.tensor(float("-inf"), dtype=k.dtype, device=k.device)
    offset = torch.where(below, -lag * w, torch.where(diag, u, minus_inf))  # [L, L, C]
    E = kc.unsqueeze(2) + offset  # [B, n, L(i), L(j), C]
    from_state = p_s - i[:, None] * w  # [B, n, L, C]
    m = torch.maximum(E.amax(3), from_state).detach()  # row max (the diagonal is finite)
    W, ws = torch.exp(E - m.unsqueeze(3)), torch.exp(from_state - m)
    out_num = (W * vc.unsqueeze(2)).sum(3) + ws * num_s
    out_den = W.sum(3) + ws * den_s
    return (out_num / out_den).reshape(B, T, C), (num, den, p)


# ----------------------------------------------------------------------------- DeltaNet


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

    q, k: [B, H, T, D] (the caller L2-normalises k); v: [B, H, T, Dv]; beta: [B, H, T] in (0, 1).
    State S: [B, H, D, Dv]. mode: "recurrent" (step loop, the spec), "chunk" (the WY / UT form:
    inside a chunk, pseudo-values U = (I + tril(diag(beta) K K^T, -1))^{-1} diag(beta)
    (V - K S_start) by one triangular solve, O = Q S_start + tril(Q K^T) U, S_end = S_start +
    K^T U; a loop over chunks carries S), "parallel" (the chunk form with a single chunk
    covering the whole sequence: a T x T triangular solve).
    """
    check_mode(mode, chunk_size)
    _check_qkv(q, k, v)
    B, H, T, D = q.shape
    _check_shape("beta", beta, (B, H, T))
    if initial_state is not None:
        _check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = _delta_recurrent(q, k, v, beta, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        o, state = _in_blocks(_delta_chunks, (q, k, v, beta), 2, size, initial_state)
    return (o, state) if return_state else o


def _delta_recurrent(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The specification: one delta-rule update per token."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    for t in range(T):
        k_t, v_t, b_t = k[:, :, t], v[:, :, t], beta[:, :, t, None, None]
        recalled = torch.einsum("bhd,bhde->bhe", k_t, S)  # S^T k_t: what the memory holds at k_t
        S = S + b_t * k_t[..., :, None] * (v_t - recalled)[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, :, t], S))
    return torch.stack(outs, 2), S


def _delta_chunks(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, L: int, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """T = n*L steps as n chunks. In a chunk the pseudo-values u_i = beta_i (v_i - S_{i-1}^T k_i)
    satisfy (I + tril(diag(beta) K K^T, -1)) U = diag(beta) (V - K S_start), so
    U = U0 - W S_start with [W | U0] = (I + tril(...))^{-1} diag(beta) [K | V] for all chunks
    at once; then S_i = S_start + sum_{j<=i} k_j u_j^T."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    n = T // L
    qc, kc, vc = q.reshape(B, H, n, L, D), k.reshape(B, H, n, L, D), v.reshape(B, H, n, L, Dv)
    bc = beta.reshape(B, H, n, L, 1)
    strictly_lower = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)
    # unit lower-triangular system: the solver takes the diagonal as 1 and reads only below it
    A = (bc * (kc @ kc.transpose(-1, -2))).masked_fill(~strictly_lower, 0.0)
    WU = torch.linalg.solve_triangular(
        A, bc * torch.cat([kc, vc], -1), upper=False, unitriangular=True
    )
    W, U0 = WU[..., :D], WU[..., D:]
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    scores = (qc @ kc.transpose(-1, -2)).masked_fill(~causal, 0.0)
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    outs = []
    for c in range(n):
        U = U0[:, :, c] - W[:, :, c] @ S
        outs.append(qc[:, :, c] @ S + scores[:, :, c] @ U)
        S = S + kc[:, :, c].transpose(-1, -2) @ U
    return torch.stack(outs, 2).reshape(B, H, T, Dv), S
