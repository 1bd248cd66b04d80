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
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from common.checks import require_choice, require_int

MODES = ("chunk", "parallel", "recurrent")
SCAN_BLOCK = 64  # chunks per block of the decayed state scan (bounds its [n x n] matrix)
TILE_BYTES = 1 << 21  # in-chunk weights of the chunk kernel per tile: within a core's cache

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
    """Run `block_fn(*pieces, block_len, state, last) -> (out, state)` on the longest prefix
    made of whole blocks, then on the remaining (< block_len) steps as one shorter block;
    `last` tells a block that no other block follows it."""
    T = seqs[0].shape[time_dim]
    full = T // block_len * block_len
    parts = [part for part in ((0, full, block_len), (full, T - full, T - full)) if part[1]]
    outs = []
    for index, (start, length, size) in enumerate(parts):
        pieces = [x.narrow(time_dim, start, length) for x in seqs]
        out, state = block_fn(*pieces, size, state, index == len(parts) - 1)
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
    eps: float | Tensor = 1e-6,
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
    states by a cumulative sum over chunks, or with decay a matrix of powers g^(C*i); one
    block when T is at most ~chunk_size + D, `_block_length`).
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
        with_z = normalize or return_state
        chunks = _Chunks(log_g, normalize, eps, return_state, taylor=False, with_z=with_z)
        size = T if mode == "parallel" else _block_length(T, chunk_size, D, D, Dv + with_z)
        o, state = _in_blocks(chunks, (q, k, v), 2, size, _joined(initial_state, with_z))
        state = _split(state, Dv)
    return (o, state) if return_state else o


def taylor_features(x: Tensor) -> Tensor:
    """Based's second-order Taylor features of an (already scaled) input x [..., d]:
    phi(x) = [1, x, x (x) x / sqrt(2)], D = 1 + d + d^2, so that
    phi(q)^T phi(k) = 1 + s + s^2 / 2 with s = q^T k."""
    return _TaylorFeatures.apply(x)


class _TaylorFeatures(torch.autograd.Function):
    """`taylor_features` written into one tensor (no concatenation), with the gradient
    d phi / dx^T g = g_1 + (G + G^T) x / sqrt(2), G = the [d, d] block of g of the products:
    one product per token instead of autograd's passes over the D features."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        d = x.shape[-1]
        out = x.new_empty(*x.shape[:-1], 1 + d + d * d)
        out[..., 0] = 1
        out[..., 1 : 1 + d] = x
        outer = out[..., 1 + d :].unflatten(-1, (d, d))
        torch.mul((x * 0.5**0.5).unsqueeze(-1), x.unsqueeze(-2), out=outer)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        d = x.shape[-1]
        G = grad[..., 1 + d :].unflatten(-1, (d, d))
        symmetric = (G + G.transpose(-1, -2)) @ x.unsqueeze(-1)
        return grad[..., 1 : 1 + d] + symmetric.squeeze(-1) * 0.5**0.5


def taylor_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    eps: float | Tensor = 1e-6,
    initial_state: LinearState | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, LinearState]:
    """Normalised linear attention (eq. 8-9) with Based's Taylor features applied inside:
    equal to `linear_attention(taylor_features(q), taylor_features(k), v, ...)` in every mode.

    q, k: [B, H, T, d], the inputs of the feature map (already scaled); v: [B, H, T, Dv].
    State as `linear_attention`'s with D = 1 + d + d^2 features. "chunk" and "parallel" take
    the weights inside a chunk, phi(q_i)^T phi(k_j) = 1 + s + s^2/2 with s = q_i^T k_j, from
    d-dimensional products (D = 273 for d = 16 would cost 17x more), and build the D features
    only for what crosses chunks: the state (none when one chunk covers a sequence that
    starts from the empty state and no state is returned). Chunk mode takes the whole sequence
    as one chunk while that costs fewer multiply-adds than the D-feature state
    (`_block_length`: T <= 431 for d = 16, Dv = 32 and chunks of 64)."""
    check_mode(mode, chunk_size)
    _check_qkv(q, k, v)
    B, H, T, d = q.shape
    D, Dv = 1 + d + d * d, v.shape[-1]
    if initial_state is not None:
        _check_shape("initial_state[0] (S)", initial_state[0], (B, H, D, Dv))
        _check_shape("initial_state[1] (z)", initial_state[1], (B, H, D))
    if mode == "recurrent":
        fq, fk = taylor_features(q), taylor_features(k)
        o, state = _linear_recurrent(fq, fk, v, None, True, eps, initial_state)
    else:
        chunks = _Chunks(None, True, eps, return_state, taylor=True, with_z=True)
        size = T if mode == "parallel" else _block_length(T, chunk_size, d, D, Dv + 1)
        o, state = _in_blocks(chunks, (q, k, v), 2, size, _joined(initial_state, True))
        state = _split(state, Dv)
    return (o, state) if return_state else o


def _linear_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    decay: Tensor | None,
    normalize: bool,
    eps: float | Tensor,
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
    for q_t, k_t, v_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), strict=True):
        S = g_S * S + k_t[..., :, None] * v_t[..., None, :]
        z = g_z * z + k_t
        o_t = torch.einsum("bhd,bhde->bhe", q_t, S)
        if normalize:
            o_t = o_t / ((q_t * z).sum(-1, keepdim=True) + eps)
        outs.append(o_t)
    return torch.stack(outs, 2), (S, z)


def _block_length(T: int, C: int, d: int, D: int, E: int) -> int:
    """The block length of chunk mode: T (one block, no state inside it) when that takes no
    more multiply-adds per step than chunks of C do with their D-feature state,
    T (d + E) <= C (d + E) + 2 D E  (weights and their product with the values, against the
    same inside a chunk plus the state's update and the queries' product with it), else C.
    With D = d this is T <= C + ~d (one chunk in all but name); with Based's D = 1 + d + d^2
    it runs sequences of a few hundred steps without building a feature."""
    return T if T * (d + E) <= C * (d + E) + 2 * D * E else C


def _joined(state: LinearState | None, with_z: bool) -> Tensor | None:
    """(S, z) as the one tensor the chunk form carries: [S | z] [B, H, D, Dv + 1], or S alone
    when z is not needed."""
    if state is None:
        return None
    return torch.cat([state[0], state[1].unsqueeze(-1)], -1) if with_z else state[0]


def _split(state: Tensor | None, Dv: int) -> LinearState | None:
    """[S | z] -> (S, z)."""
    if state is None or state.shape[-1] == Dv:
        return None
    S, z = state.split([Dv, 1], -1)
    return S, z.squeeze(-1)


class _Chunks:
    """One block of chunk-mode linear attention (a callable for `_in_blocks`), T = n*C steps as
    n chunks. Inside chunk c (steps i, j = 0..C-1), from its start state:
    o_i = sum_{j<=i} g^(i-j) (q_i.k_j) v_j + g^(i+1) q_i^T S_start; the chunk adds
    sum_j g^(C-1-j) k_j v_j^T to the state and decays the old one by g^C.

    z rides along as one more value column (v_j -> [v_j, 1] makes S -> [S | z]), so the same
    matmuls give eq. 9's numerator and denominator; the column is left out when nothing needs
    z (no normaliser and no state returned). With `taylor`, q and k are the inputs of the
    Taylor map: q_i.k_j becomes 1 + s + s^2/2 of their product s, and the features are built
    only for the state. The block's products are one autograd node, `_ChunkAttention`; this
    class prepares what it needs. Nothing crosses chunks when the block is one chunk from the
    empty state: then the state is built only if it is returned or another block follows.

    The state handed from block to block is [S | z] as one tensor [B, H, D, Dv (+1)]."""

    def __init__(
        self,
        log_g: Tensor | None,
        normalize: bool,
        eps: float | Tensor,
        keep: bool,
        taylor: bool,
        with_z: bool,
    ) -> None:
        self.log_g, self.normalize, self.eps = log_g, normalize, eps
        self.keep, self.taylor, self.with_z = keep, taylor, with_z

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, C: int, state: Tensor | None, last: bool
    ) -> tuple[Tensor, Tensor | None]:
        B, H, T, _ = q.shape
        n, log_g = T // C, self.log_g
        q, k = q.contiguous(), k.contiguous()  # else each product below copies them again
        if self.with_z:  # [v | 1]: the last column carries z
            v = torch.cat([v, v.new_ones(B, H, T, 1)], -1)
        E = v.shape[-1]
        qc, kc, vc = (x.reshape(B, H, n, C, x.shape[-1]) for x in (q, k, v))
        carried = state is not None or n > 1
        i = torch.arange(C, dtype=q.dtype, device=q.device)
        weights = chunk_log_decay = fq = fk = None  # weights None: the causal mask alone
        if log_g is not None:
            lg = log_g.view(-1, 1, 1, 1)  # [H, 1, 1, 1] against [B, H, n, C, .]
            # g^(i-j) below the diagonal; the exponent is clamped so exp never sees (i-j) < 0
            lag = (i[:, None] - i[None, :]).clamp(min=0)
            weights = torch.exp(lag * lg).tril()
            chunk_log_decay = C * log_g
        if carried or self.keep or not last:
            fk = taylor_features(kc) if self.taylor else kc
            if log_g is not None:
                fk = fk * torch.exp((C - 1 - i)[:, None] * lg)  # g^(C-1-j): j's update at the end
        if carried:
            fq = taylor_features(qc) if self.taylor else qc
            if log_g is not None:
                fq = fq * torch.exp((i + 1)[:, None] * lg)  # g^(i+1): the start state at i
        o, final = _ChunkAttention.apply(
            qc, kc, vc, fq, fk, weights, state, chunk_log_decay, self.taylor
        )
        o = o.view(B, H, T, E)
        if self.normalize:
            return normalized(o, self.eps), final
        return (o[..., : E - 1] if self.with_z else o), final


class _ChunkAttention(torch.autograd.Function):
    """All of one block's products as one autograd node with its own backward (autograd would
    make several more passes over the [C, C] weights of every chunk, and sum gradients in
    separate passes). Per chunk, from its start state S_c:

        W = tril(M(q k^T)) (* weights)    O = W v + fq S_c    U = fk^T v
        S_c = scan of U over the chunks (`_scan_chunks`: decayed by G = e^chunk_log_decay),
        starting from `init`;  returns O and the state after the last chunk

    q, k: [B, H, n, C, d]; v: [B, H, n, C, E]; fq, fk: [B, H, n, C, D] (queries and keys as the
    state sees them: features, decayed), possibly the very tensors qc, kc; fq None: no start
    states (one chunk from the empty state); fk None as well: no state at all. weights:
    [H, 1, C, C] lower triangular (RetNet's g^(i-j)) or None (the causal mask). M: identity, or
    with `taylor` s -> 1 + s + s^2/2.

    Backward, from dO and d(final): dW = tril(dO v^T) (* weights), dS = dW * M'(s),
    dq = dS k, dk = dS^T q, dv = W^T dO + fk dU, dfq = dO S_c^T, dfk = v dU^T, with
    d(S_c) = fq^T dO carried back through the scan (autograd on a recomputed scan: it is
    small, [n, D, E] per sequence) to dU, d(init) and d(chunk_log_decay).

    The [C, C] weights of a block are never all held at once: forward and backward run the
    in-chunk products over `_Tiles` of chunks whose weights fit in a core's cache, and the
    backward recomputes W from q, k (one more product per tile) instead of keeping it. Over
    more chunks than the cache holds, every pass over the weights (the product, the mask, the
    products with v) had been a pass over memory."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        fq: Tensor | None,
        fk: Tensor | None,
        weights: Tensor | None,
        init: Tensor | None,
        chunk_log_decay: Tensor | None,
        taylor: bool,
    ) -> tuple[Tensor, Tensor | None]:
        C, E = q.shape[-2], v.shape[-1]
        update = starts = final = None
        if fk is not None:
            update = fk.transpose(-1, -2) @ v  # [B, H, n, D, E]: each chunk's own [S | z]
            if fq is None:
                final = update[:, :, 0]
            else:
                starts, final = _scan_chunks(update, chunk_log_decay, init)
        tiles = _Tiles(q, k, weights, taylor)
        keep_raw = tiles.single and weights is not None and weights.requires_grad
        o = v.new_empty(v.shape)
        o3, v3 = o.view(-1, C, E), v.reshape(-1, C, E)
        for tile in tiles:
            scores, w, raw = tiles.weights(tile, keep_raw)
            torch.bmm(w, v3[tile[0]], out=o3[tile[0]])
        if starts is not None:
            o3.baddbmm_(fq.reshape(-1, C, fq.shape[-1]), starts.flatten(0, 2))
        kept = (scores, w, raw) if tiles.single else (None, None, None)
        ctx.save_for_backward(
            q, k, v, fq, fk, weights, update, starts, init, chunk_log_decay, *kept
        )
        ctx.taylor = taylor
        ctx.fq_is_q, ctx.fk_is_k = fq is q, fk is k
        ctx.set_materialize_grads(False)  # an unused final state gets None, not zeros
        return o, final

    @staticmethod
    def backward(ctx: Any, grad_o: Tensor | None, grad_final: Tensor | None) -> tuple:
        q, k, v, fq, fk, weights, update, starts, init, log_decay, *kept = ctx.saved_tensors
        C, d, E = q.shape[-2], q.shape[-1], v.shape[-1]
        if grad_o is None:
            grad_o = torch.zeros_like(v)
        tiles = _Tiles(q, k, weights, ctx.taylor)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        gq3, gk3, gv3 = grad_q.view(-1, C, d), grad_k.view(-1, C, d), grad_v.view(-1, C, E)
        go3, v3 = grad_o.reshape(-1, C, E), v.reshape(-1, C, E)
        grad_weights = None
        if ctx.needs_input_grad[5]:
            grad_weights = weights.new_zeros(weights.shape[0], C, C)
        for tile in tiles:
            chunks = tile[0]
            if tiles.single:  # the forward's weights
                scores, w, raw = kept
            else:
                scores, w, raw = tiles.weights(tile, keep_raw=grad_weights is not None)
            grad_w = torch.bmm(go3[chunks], v3[chunks].transpose(-1, -2))
            if grad_weights is not None:  # before weighting: d(weights) = dW * M(s)
                tiles.sum_rows_by_head(grad_w * raw, tile, grad_weights)
            tiles.mask_(grad_w, tile)
            if ctx.taylor:
                grad_w.mul_(scores + 1)  # d(1 + s + s^2/2) / ds = 1 + s
            torch.bmm(grad_w, tiles.k3[chunks], out=gq3[chunks])
            torch.bmm(grad_w.transpose(-1, -2), tiles.q3[chunks], out=gk3[chunks])
            torch.bmm(w.transpose(-1, -2), go3[chunks], out=gv3[chunks])
        if grad_weights is not None:
            grad_weights = grad_weights.unsqueeze(1)
        grad_fq = grad_fk = grad_init = grad_log_decay = grad_update = None
        if fq is not None:
            grad_starts = fq.transpose(-1, -2) @ grad_o
            if ctx.fq_is_q:  # dq += dO S_c^T, in place
                gq3.baddbmm_(go3, starts.flatten(0, 2).transpose(-1, -2))
            else:
                grad_fq = grad_o @ starts.transpose(-1, -2)
            grad_update, grad_init, grad_log_decay = _scan_chunks_backward(
                update, log_decay, init, grad_starts, grad_final, ctx.needs_input_grad
            )
        elif fk is not None and grad_final is not None:  # one chunk: final = its update
            grad_update = grad_final.unsqueeze(2)
        if grad_update is not None:
            D = fk.shape[-1]
            gv3.baddbmm_(fk.reshape(-1, C, D), grad_update.flatten(0, 2))
            if ctx.fk_is_k:  # dk += v dU^T, in place
                gk3.baddbmm_(v3, grad_update.flatten(0, 2).transpose(-1, -2))
            else:
                grad_fk = v @ grad_update.transpose(-1, -2)
        grads = (grad_q, grad_k, grad_v, grad_fq, grad_fk, grad_weights, grad_init, grad_log_decay)
        return (*grads, None)


class _Tiles:
    """The chunks of a block ([B, H, n, C, .], flattened to B H rows of n chunks) in tiles of
    whole rows whose [C, C] weights take at most TILE_BYTES (at least one row per tile);
    iterating gives each tile as (its chunks, its rows). `weights` gives a tile's in-chunk
    weights W = mask(M(q k^T)), `mask_` applies the mask: the causal tril, or RetNet's
    g^(i-j) of each row's head (`heads`)."""

    def __init__(self, q: Tensor, k: Tensor, decay_weights: Tensor | None, taylor: bool) -> None:
        B, H, n, C, d = q.shape
        self.q3, self.k3 = q.reshape(-1, C, d), k.reshape(-1, C, d)
        self.taylor, self.decay, self.n, self.rows = taylor, decay_weights, n, B * H
        self.H, self.per_tile = H, max(1, TILE_BYTES // (n * C * C * q.element_size()))
        if self.per_tile > H:  # whole sequences: every head's weights broadcast (`mask_`)
            self.per_tile -= self.per_tile % H
        if torch.compiler.is_compiling():  # one tile: a graph, not a Python loop unrolled
            self.per_tile = self.rows
        self.single = self.per_tile >= self.rows  # then the forward's weights are kept
        self.heads = torch.arange(H, device=q.device).repeat(B)  # the head of each row

    def __iter__(self):
        n, step = self.n, self.per_tile
        return (
            (slice(r * n, (r + step) * n), slice(r, r + step)) for r in range(0, self.rows, step)
        )

    def weights(
        self, tile: tuple[slice, slice], keep_raw: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(s, W, M(s)) for the chunks of `tile`: the scores s = q k^T, the masked weights, and
        M(s) before the mask only with `keep_raw` (else None). W is s itself, masked in place,
        unless `taylor` (then s stays as it is, for M'(s))."""
        chunks = tile[0]
        scores = torch.bmm(self.q3[chunks], self.k3[chunks].transpose(-1, -2))
        raw = torch.addcmul(scores + 1, scores, scores, value=0.5) if self.taylor else scores
        kept = raw.clone() if keep_raw else None
        return scores, self.mask_(raw, tile), kept

    def mask_(self, x: Tensor, tile: tuple[slice, slice]) -> Tensor:
        """x [chunks, C, C] of `tile`, masked in place: causal (tril) or times the decay
        weights (lower triangular already) of each row's head."""
        if self.decay is None:
            return x.tril_()
        C, rows = x.shape[-1], tile[1]
        if rows.start % self.H == 0 and (min(rows.stop, self.rows) - rows.start) % self.H == 0:
            x.view(-1, self.H, self.n, C, C).mul_(self.decay)  # whole sequences
        else:
            x.view(-1, self.n, C, C).mul_(self.decay[self.heads[rows]])
        return x

    def sum_rows_by_head(self, x: Tensor, tile: tuple[slice, slice], into: Tensor) -> None:
        """into[h] += the sum of x [chunks, C, C] over the chunks of `tile` whose row has head h."""
        C = x.shape[-1]
        into.index_add_(0, self.heads[tile[1]], x.view(-1, self.n, C, C).sum(1))


def normalized(num_den: Tensor, eps: float | Tensor) -> Tensor:
    """eq. 9's division o = num / (den + eps), from [num | den] [..., Dv + 1] (the chunk
    kernel's output on [v | 1], den its last column): `_Normalized`."""
    return _Normalized.apply(num_den, eps)


class _Normalized(torch.autograd.Function):
    """o = num / (den + eps) with a backward of one pass per gradient. With r = 1 / (den + eps):

        d num = dO r,    d den = -(dO . o) r,    d eps = sum of d den

    (autograd's division would make several passes over [..., Dv]: dividing twice, squaring
    the denominator, negating); o and r are kept, not num."""

    @staticmethod
    def forward(ctx: Any, num_den: Tensor, eps: float | Tensor) -> Tensor:
        num, den = num_den.split([num_den.shape[-1] - 1, 1], -1)
        r = (den + eps).reciprocal_()
        o = num * r
        ctx.save_for_backward(o, r)
        return o

    @staticmethod
    def backward(ctx: Any, grad_o: Tensor) -> tuple[Tensor, Tensor | None]:
        o, r = ctx.saved_tensors
        grad_den = torch.einsum("...d,...d->...", grad_o, o).unsqueeze(-1).mul_(r).neg_()
        grad_eps = grad_den.sum() if ctx.needs_input_grad[1] else None
        return torch.cat([grad_o * r, grad_den], -1), grad_eps


def _scan_chunks_backward(
    update: Tensor,
    log_decay: Tensor | None,
    init: Tensor | None,
    grad_starts: Tensor,
    grad_final: Tensor | None,
    needs: tuple[bool, ...],
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Gradients of `_scan_chunks(update, log_decay, init)` given those of its outputs: by
    autograd on the scan recomputed (its tensors are small). `needs`: `_ChunkAttention`'s
    needs_input_grad (init is its input 6, chunk_log_decay its input 7)."""
    with torch.enable_grad():
        leaves = [update.detach().requires_grad_()]
        init_leaf = log_decay_leaf = None
        if init is not None and needs[6]:
            init_leaf = init.detach().requires_grad_()
            leaves.append(init_leaf)
        if log_decay is not None and needs[7]:
            log_decay_leaf = log_decay.detach().requires_grad_()
            leaves.append(log_decay_leaf)
        starts, final = _scan_chunks(
            leaves[0],
            log_decay if log_decay_leaf is None else log_decay_leaf,
            init if init_leaf is None else init_leaf,
        )
        outputs, grads = [starts], [grad_starts]
        if grad_final is not None:
            outputs.append(final)
            grads.append(grad_final)
        found = torch.autograd.grad(outputs, leaves, grads)
    found = list(found)
    grad_update = found.pop(0)
    grad_init = found.pop(0) if init_leaf is not None else None
    grad_log_decay = found.pop(0) if log_decay_leaf is not None else None
    return grad_update, grad_init, grad_log_decay


def _scan_chunks(x: Tensor, log_decay: Tensor | None, init: Tensor | None) -> tuple[Tensor, Tensor]:
    """States before each chunk, s_c = sum_{c'<c} G^(c-1-c') x_c' + G^c init, and after the last.

    x: [B, H, n, ...] per-chunk contributions; log_decay: [H] per-chunk log G, or None (G = 1);
    init: [B, H, ...] or None. Blocks of SCAN_BLOCK chunks, each one product with the
    (block+1) x block matrix of powers G^(c-1-c'), c' < c (exponents >= 0 only: no division by
    small powers; without decay a matrix of ones: a product, not a cumulative sum, which is
    slow along this dimension), the last state carried between blocks.
    """
    n, shape = x.shape[2], x.shape[3:]
    x = x.flatten(3)
    m = min(n, SCAN_BLOCK)
    c = torch.arange(m + 1, dtype=x.dtype, device=x.device)
    power = c[:, None] - 1 - c[None, :m]  # [m+1, m]: c - 1 - c'
    if log_decay is None:
        powers = (power >= 0).to(x.dtype)[None]  # [1, m+1, m]
        init_powers = torch.ones_like(c)[None]  # [1, m+1]
    else:
        lg = log_decay[:, None, None]
        powers = torch.exp(power.clamp(min=0) * lg) * (power >= 0)  # [H, m+1, m]
        init_powers = torch.exp(c * lg[..., 0])  # [H, m+1]: G^c
    carry = None if init is None else init.flatten(2)
    starts = []
    for b0 in range(0, n, m):
        size = min(m, n - b0)
        s = powers[:, : size + 1, :size] @ x[:, :, b0 : b0 + size]  # [B, H, size+1, F]
        if carry is not None:
            s = s + init_powers[:, : size + 1, None] * carry.unsqueeze(2)
        starts.append(s[:, :, :size])
        carry = s[:, :, size]
    return torch.cat(starts, 2).unflatten(3, shape), carry.unflatten(2, shape)


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
    mode: "recurrent" (step loop, the spec); "parallel" (T x T exponents, per-row max
    subtracted: [B, T, T, C], a reference); "chunk" (the recurrence as a two-level scan: the
    step loop runs inside all chunks of `chunk_size` tokens at once, the chunks' own sums are
    scanned the same way one level up, and each token's state is its chunk's start state
    decayed plus its prefix inside the chunk; temporaries O(T C), loops O(chunk_size log T)).
    Per-channel decays leave no matmul form, and a factored (cumulative-sum) form would need
    exp of exponents spread over the whole chunk, which overflows.
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
        chunks = partial(_delta_chunks, keep=return_state)
        o, state = _in_blocks(chunks, (q, k, v, beta), 2, size, initial_state)
    return (o, state) if return_state else o


def _delta_recurrent(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, S: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The specification: one delta-rule update per token."""
    B, H, T, D = q.shape
    if S is None:
        S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    for q_t, k_t, v_t, b_t in zip(
        q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), strict=True
    ):
        recalled = torch.einsum("bhd,bhde->bhe", k_t, S)  # S^T k_t: what the memory holds at k_t
        S = S + b_t[..., None, None] * k_t[..., :, None] * (v_t - recalled)[..., None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q_t, S))
    return torch.stack(outs, 2), S


def _delta_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    L: int,
    S: Tensor | None,
    last: bool,
    keep: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """T = n*L steps as n chunks. In a chunk the pseudo-values u_i = beta_i (v_i - S_{i-1}^T k_i)
    satisfy (I + tril(diag(beta) K K^T, -1)) U = diag(beta) (V - K S_start), so
    U = U0 - W S_start with [W | U0] = (I + tril(...))^{-1} diag(beta) [K | V] for all chunks
    at once. With S_i = S_start + sum_{j<=i} k_j u_j^T, everything but the state is then a
    product with S_start, computed for all chunks at once:

        O = tril(Q K^T) (U0 - W S_start) + Q S_start
        S_end = (I - K^T W) S_start + K^T U0

    and only the last line runs chunk after chunk (one [D, D] x [D, Dv] product each). One
    chunk from the empty state needs no S_start, and no S_end unless it is kept (`keep`) or
    another block follows."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    n = T // L
    qc, kc, vc = q.reshape(B, H, n, L, D), k.reshape(B, H, n, L, D), v.reshape(B, H, n, L, Dv)
    bc = beta.reshape(B, H, n, L, 1)
    kt = kc.transpose(-1, -2)
    # unit lower-triangular system: the solver takes the diagonal as 1 and reads only below it
    # (its gradient too), so diag(beta) K K^T needs no mask
    WU = torch.linalg.solve_triangular(
        (kc * bc) @ kt, torch.cat([kc, vc], -1) * bc, upper=False, unitriangular=True
    )
    W, U0 = WU.split([D, Dv], -1)
    scores = (qc @ kt).tril_()  # tril(Q K^T), in place (the product's backward needs no output)
    if S is None and n == 1:  # one chunk from the empty state: no product with S_start
        final = (kt @ U0)[:, :, 0] if keep or not last else None
        return (scores @ U0).reshape(B, H, T, Dv), final
    update = kt @ U0  # [B, H, n, D, Dv]: what each chunk adds to a zero start state
    decay = torch.eye(D, dtype=q.dtype, device=q.device) - kt @ W  # [B, H, n, D, D]
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    starts = []
    for decay_c, update_c in zip(decay.unbind(2), update.unbind(2), strict=True):
        starts.append(S)
        S = torch.baddbmm(update_c.flatten(0, 1), decay_c.flatten(0, 1), S.flatten(0, 1))
        S = S.view(B, H, D, Dv)
    starts = torch.stack(starts, 2)
    o = scores @ (U0 - W @ starts) + qc @ starts
    return o.reshape(B, H, T, Dv), S
