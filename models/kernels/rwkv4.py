"""RWKV-4's time mixing, the wkv of eq. 11 (docs/background.md, section 7), in running-max
form; "decay" in this module is the per-channel decay rate w >= 0."""

import torch
from torch import Tensor

from models.kernels.common import check_mode, check_shape
from models.precision import in_fp32

WKVState = tuple[Tensor, Tensor, Tensor]  # (num, den, max exponent), each [B, C]


@in_fp32()
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

    Running-max form: the state after t tokens, a = sum_{j<t} e^{-(t-1-j)w + k_j} v_j and its
    denominator b, is stored as (num, den, p) with a = num e^p, b = den e^p, p the largest
    exponent; only exp of non-positive numbers is taken, so nothing overflows. p is a
    stabiliser (the outputs do not depend on it) and carries no gradient.
    Per-channel decays leave no matmul form, and a factored (cumulative-sum) form would need
    exp of exponents spread over the whole chunk, which overflows.

    Args:
        w: the decay rate (>= 0) of each channel.
        u: the bonus of the current token, per channel.
        k, v: keys and values.
        mode: "recurrent" (the step loop, the specification); "parallel" (T x T exponents,
            per-row max subtracted: [B, T, T, C], a reference); "chunk" (the recurrence as a
            two-level scan: the step loop runs inside all chunks of `chunk_size` tokens at
            once, the chunks' own sums are scanned the same way one level up, and each token's
            state is its chunk's start state decayed plus its prefix inside the chunk;
            temporaries O(T C), loops O(chunk_size log T)).
        chunk_size: the chunk length of "chunk".
        initial_state: (num, den, max) to start from (the empty state if None).
        return_state: also return the state after the last token.

    Shapes:
        w, u: [C];  k, v: [B, T, C];  state: (num, den, max), each [B, C]

    Returns:
        wkv [B, T, C], or (wkv, state) with `return_state`.
    """
    check_mode(mode, chunk_size)
    if k.dim() != 3 or v.shape != k.shape or k.shape[1] == 0:
        raise ValueError(
            f"expected k, v of the same shape [B, T, C] (T >= 1), got k {list(k.shape)},"
            f" v {list(v.shape)}"
        )
    B, T, C = k.shape
    check_shape("w", w, (C,))
    check_shape("u", u, (C,))
    if initial_state is not None:
        for name, x in zip(("num", "den", "max"), initial_state, strict=True):
            check_shape(f"initial_state ({name})", x, (B, C))
    if mode == "recurrent":
        out, state = _wkv_recurrent(w, u, k, v, initial_state)
    elif mode == "parallel":
        out, state = _wkv_parallel(w, u, k, v, initial_state)
    else:
        out, state = _wkv_scan_form(w, u, k, v, chunk_size, initial_state)
    return (out, state) if return_state else out


def _wkv_empty_state(k: Tensor) -> WKVState:
    B, _, C = k.shape
    return k.new_zeros(B, C), k.new_zeros(B, C), k.new_full((B, C), float("-inf"))


def _wkv_output(u: Tensor, k: Tensor, v: Tensor, before: WKVState) -> Tensor:
    """wkv_t from the state before token t and the current token weighted e^{u + k_t}."""
    num, den, p = before
    bonus = u + k
    m = torch.maximum(p, bonus).detach()
    a, b = torch.exp(p - m), torch.exp(bonus - m)
    return (a * num + b * v) / (a * den + b)


def _wkv_recurrent(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, state: WKVState | None
) -> tuple[Tensor, WKVState]:
    """The specification: eq. 11 one token at a time, in running-max form."""
    num, den, p = _wkv_empty_state(k) if state is None else state
    outs = []
    for k_t, v_t in zip(k.unbind(1), v.unbind(1), strict=True):
        outs.append(_wkv_output(u, k_t, v_t, (num, den, p)))
        # state: a <- e^{-w} a + e^{k_t} v_t  (and the same for the denominator)
        decayed = p - w
        p_next = torch.maximum(decayed, k_t).detach()
        a, b = torch.exp(decayed - p_next), torch.exp(k_t - p_next)
        num, den, p = a * num + b * v_t, a * den + b, p_next
    return torch.stack(outs, 1), (num, den, p)


def _wkv_parallel(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, state: WKVState | None
) -> tuple[Tensor, WKVState]:
    """All T x T exponents at once: token j's exponent in row t is k_j + offset[t, j] with
    offset = -(t-1-j) w for j < t, u for j = t, -inf for j > t; the initial state adds
    p - t w. Each row's maximum is subtracted before exp. Memory O(T^2 C): a reference."""
    B, T, C = k.shape
    num0, den0, p0 = _wkv_empty_state(k) if state is None else state
    t = torch.arange(T, dtype=k.dtype, device=k.device)
    lag = (t[:, None] - 1 - t[None, :])[..., None]  # [T, T, 1]
    below = torch.ones(T, T, dtype=torch.bool, device=k.device).tril(-1)[..., None]
    diag = torch.eye(T, dtype=torch.bool, device=k.device)[..., None]
    minus_inf = torch.tensor(float("-inf"), dtype=k.dtype, device=k.device)
    offset = torch.where(below, -lag * w, torch.where(diag, u, minus_inf))  # [T, T, C]
    E = k.unsqueeze(1) + offset  # [B, T(t), T(j), C]
    from_state = p0.unsqueeze(1) - t[:, None] * w  # [B, T, C]
    m = torch.maximum(E.amax(2), from_state).detach()  # row max (the diagonal is finite)
    W, ws = torch.exp(E - m.unsqueeze(2)), torch.exp(from_state - m)
    out = ((W * v.unsqueeze(1)).sum(2) + ws * num0.unsqueeze(1)) / (
        W.sum(2) + ws * den0.unsqueeze(1)
    )
    # the state after the last token: every token decayed to the end, and the initial state
    e_end = k - (T - 1 - t)[:, None] * w  # [B, T, C]
    p_end = torch.maximum(e_end.amax(1), p0 - T * w).detach()
    a, b = torch.exp(p0 - T * w - p_end), torch.exp(e_end - p_end.unsqueeze(1))
    return out, (a * num0 + (b * v).sum(1), a * den0 + b.sum(1), p_end)


def _wkv_scan_form(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, L: int, state: WKVState | None
) -> tuple[Tensor, WKVState]:
    """Chunk mode: the state before every token by `_decayed_scan`, then the outputs at once."""
    init = _wkv_empty_state(k) if state is None else state
    nd = torch.stack([v, torch.ones_like(v)], 2)  # token j adds e^{k_j} (v_j, 1)
    before, (nd_end, p_end) = _decayed_scan(nd, k, w, L, (torch.stack(init[:2], 1), init[2]))
    num, den = before[0].unbind(2)
    out = _wkv_output(u, k, v, (num, den, before[1]))
    return out, (*nd_end.unbind(1), p_end)


ScanState = tuple[Tensor, Tensor]  # (values [B, ..., 2, C], max exponent p [B, ..., C])


def _decayed_step(s: ScanState, x: ScanState, decay: Tensor) -> ScanState:
    """s <- e^{-decay} s + x, in running-max form: each side scaled by e^(its p - new p)."""
    (nd, p), (nd_x, p_x) = s, x
    decayed = p - decay
    p_next = torch.maximum(decayed, p_x).detach()
    a, b = torch.exp(decayed - p_next), torch.exp(p_x - p_next)
    return a.unsqueeze(-2) * nd + b.unsqueeze(-2) * nd_x, p_next


def _decayed_scan(
    nd: Tensor, p: Tensor, decay: Tensor, L: int, init: ScanState
) -> tuple[ScanState, ScanState]:
    """Exclusive scan of s_{j+1} = e^{-decay} s_j + e^{p_j} nd_j along dim 1 (s_0 = init).

    nd: [B, N, 2, C], p: [B, N, C], decay: [C]. Returns the states before each element (values
    [B, N, 2, C], max exponents [B, N, C]) and the state after the last. Up to L elements: the
    step loop. More: the step loop inside every chunk of L at once (from the empty state),
    the chunk sums scanned the same way with decay L * decay, then state before element i of
    chunk c = (start of c, decayed i steps) + (prefix of c before i). An empty state's p is a
    large finite negative number (not -inf), so that two empty states add without NaN."""
    B, N, _, C = nd.shape
    empty_p = torch.finfo(p.dtype).min / 4
    init = (init[0], init[1].clamp_min(empty_p))
    if N <= L:
        s, befores = init, []
        for x in zip(nd.unbind(1), p.unbind(1), strict=True):
            befores.append(s)
            s = _decayed_step(s, x, decay)
        return (torch.stack([b[0] for b in befores], 1), torch.stack([b[1] for b in befores], 1)), s
    n, full = N // L, N // L * L
    ndc, pc = nd[:, :full].unflatten(1, (n, L)), p[:, :full].unflatten(1, (n, L))
    s = (ndc.new_zeros(B, n, 2, C), pc.new_full((B, n, C), empty_p))
    local = []
    for x in zip(ndc.unbind(2), pc.unbind(2), strict=True):
        local.append(s)
        s = _decayed_step(s, x, decay)
    starts, s = _decayed_scan(s[0], s[1], L * decay, L, init)
    i = torch.arange(L, dtype=p.dtype, device=p.device)[:, None]
    p_start = starts[1].unsqueeze(2) - i * decay  # [B, n, L, C]
    p_local = torch.stack([x[1] for x in local], 2)
    p_before = torch.maximum(p_start, p_local).detach()
    a, b = torch.exp(p_start - p_before), torch.exp(p_local - p_before)
    nd_local = torch.stack([x[0] for x in local], 2)  # [B, n, L, 2, C]
    nd_before = a.unsqueeze(-2) * starts[0].unsqueeze(2) + b.unsqueeze(-2) * nd_local
    before = (nd_before.flatten(1, 2), p_before.flatten(1, 2))
    if full == N:
        return before, s
    rest, s = _decayed_scan(nd[:, full:], p[:, full:], decay, L, s)
    return (torch.cat([before[0], rest[0]], 1), torch.cat([before[1], rest[1]], 1)), s
