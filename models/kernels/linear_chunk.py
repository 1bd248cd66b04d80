"""The chunk form of (decayed, optionally Taylor-weighted) linear attention as one autograd
node: the in-chunk products in cache-sized tiles, the chunk states by a scan over chunks, and
eq. 9's division (docs/background.md, sections 4-6).

`chunk_attention` is the entry point; `ChunkInputs` names the node's inputs, in the order in
which the autograd Function receives them and returns their gradients.
"""

from typing import Any, NamedTuple

import torch
from torch import Tensor

SCAN_BLOCK = 64  # chunks per block of the decayed state scan (bounds its [n x n] matrix)
CHUNK_TILE_BYTES = 1 << 21  # in-chunk weights of the chunk kernel per tile: within a core's cache


class ChunkInputs(NamedTuple):
    """The inputs of `_ChunkAttention` (see there for their shapes)."""

    q: Tensor
    k: Tensor
    v: Tensor
    fq: Tensor | None
    fk: Tensor | None
    weights: Tensor | None
    init: Tensor | None
    chunk_log_decay: Tensor | None
    taylor: bool


def chunk_attention(inputs: ChunkInputs) -> tuple[Tensor, Tensor | None]:
    """(O, the state after the last chunk) of one block: `_ChunkAttention` on `inputs`."""
    return _ChunkAttention.apply(*inputs)


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
    def forward(ctx: Any, *args: Any) -> tuple[Tensor, Tensor | None]:
        q, k, v, fq, fk, weights, init, chunk_log_decay, taylor = ChunkInputs(*args)
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
        needs = ChunkInputs(*ctx.needs_input_grad)
        grad_weights = None
        if needs.weights:
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
                update, log_decay, init, grad_starts, grad_final, needs.init, needs.chunk_log_decay
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
        return tuple(
            ChunkInputs(
                q=grad_q, k=grad_k, v=grad_v, fq=grad_fq, fk=grad_fk, weights=grad_weights,
                init=grad_init, chunk_log_decay=grad_log_decay, taylor=None,
            )
        )  # fmt: skip


class _Tiles:
    """The chunks of a block ([B, H, n, C, .], flattened to B H rows of n chunks) in tiles of
    whole rows whose [C, C] weights take at most CHUNK_TILE_BYTES (at least one row per tile);
    iterating gives each tile as (its chunks, its rows). `weights` gives a tile's in-chunk
    weights W = mask(M(q k^T)), `mask_` applies the mask: the causal tril, or RetNet's
    g^(i-j) of each row's head (`heads`)."""

    def __init__(self, q: Tensor, k: Tensor, decay_weights: Tensor | None, taylor: bool) -> None:
        B, H, n, C, d = q.shape
        self.q3, self.k3 = q.reshape(-1, C, d), k.reshape(-1, C, d)
        self.taylor, self.decay, self.n, self.rows = taylor, decay_weights, n, B * H
        self.H, self.per_tile = H, max(1, CHUNK_TILE_BYTES // (n * C * C * q.element_size()))
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
    """eq. 9's division o = num / (den + eps), with a backward of one pass per gradient
    (`_Normalized`).

    Args:
        num_den: [num | den], the chunk kernel's output on [v | 1] (den its last column).
        eps: added to the denominator (a float or a tensor that may take a gradient).

    Shapes:
        num_den: [..., Dv + 1]  ->  o: [..., Dv]

    Returns:
        o.
    """
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
        _, need_eps = ctx.needs_input_grad  # (num_den, eps)
        grad_eps = grad_den.sum() if need_eps else None
        return torch.cat([grad_o * r, grad_den], -1), grad_eps


def _scan_chunks_backward(
    update: Tensor,
    log_decay: Tensor | None,
    init: Tensor | None,
    grad_starts: Tensor,
    grad_final: Tensor | None,
    need_init: bool,
    need_log_decay: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Gradients of `_scan_chunks(update, log_decay, init)` given those of its outputs: by
    autograd on the scan recomputed (its tensors are small); those of init and log_decay only
    when asked for."""
    with torch.enable_grad():
        leaves = [update.detach().requires_grad_()]
        init_leaf = log_decay_leaf = None
        if init is not None and need_init:
            init_leaf = init.detach().requires_grad_()
            leaves.append(init_leaf)
        if log_decay is not None and need_log_decay:
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
