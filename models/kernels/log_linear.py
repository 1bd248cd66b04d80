"""Log-linear attention (Guo et al. 2025) over a scalar gate per head (log-linear Mamba-2;
docs/background.md, "Log-linear Mamba-2"). The prefix [0, t] is split as a Fenwick tree:
token t alone (level 0), then one block of 2^(l-1) tokens for each set bit l - 1 of t
(level l). A query reads each level's block through its own state, weighted by its own
level weight lambda_t^(l):

    o_t = sum_l lambda_t^(l) sum_{j in level l of t} exp(G_t - G_j) (q_t . k_j) v_j

with G the cumulative log gate. Token j is in level (t XOR j).bit_length() of t (0: j = t).
The step loop (`mode="recurrent"`) is the specification; the masked T x T form
("parallel") and the chunk form ("chunk": the same Fenwick tree over whole chunks for the
levels above a chunk, the masked form inside one) are tested against it."""

import torch
from torch import Tensor

from models.kernels.common import check_log_gate, check_mode, check_qkv, check_shape
from models.precision import in_fp32

LogLinearState = tuple[Tensor, int]
"""(S [B, H, levels, d_k, d_v]: one state per level, the position of the next token)."""


def num_levels(seq_len: int) -> int:
    """Levels a prefix of `seq_len` tokens uses: ceil(log2 T) + 1 (1 for T <= 1)."""
    return max(seq_len - 1, 0).bit_length() + 1


def level_matrix(seq_len: int, device: torch.device) -> Tensor:
    """[T, T] int64: the level of key j in query i's Fenwick tree, (i XOR j).bit_length()
    (its value above the diagonal is never used)."""
    index = torch.arange(seq_len, device=device)
    xor = torch.bitwise_xor(index[:, None], index[None, :])
    level = torch.zeros_like(xor)
    for bit in range(max(seq_len - 1, 0).bit_length()):
        level = level + (xor >= (1 << bit)).long()
    return level


def _checks(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, weights: Tensor) -> None:
    check_qkv(q, k, v)
    b, h, t, _ = q.shape
    check_shape("log_gate", log_gate, (b, h, t))
    check_log_gate("log_gate", log_gate)
    if weights.shape[:3] != (b, h, t) or weights.dim() != 4:
        raise ValueError(f"level_weights must have shape [{b}, {h}, {t}, levels]")
    if weights.shape[-1] < num_levels(t):
        raise ValueError(
            f"level_weights has {weights.shape[-1]} levels, T={t} needs {num_levels(t)}"
        )


def log_linear_step(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, weights: Tensor, state: LogLinearState
) -> tuple[Tensor, LogLinearState]:
    """One token: q, k [B, H, d_k], v [B, H, d_v], log_gate [B, H], weights [B, H, levels].
    At position t > 0 the levels below l* = (trailing zeros of t) + 1 merge into level l*
    (the blocks of t - 1 that make one block of t); then every level decays by the gate and
    level 0 holds k_t v_t^T alone; o_t = sum_l lambda^(l) S_l^T q_t."""
    S, t = state
    if t > 0:
        target = (t & -t).bit_length()  # trailing zeros of t, plus 1
        if target == S.shape[2]:
            S = torch.cat([S, torch.zeros_like(S[:, :, :1])], 2)
        merged = S[:, :, : target + 1].sum(2, keepdim=True)
        S = torch.cat([torch.zeros_like(S[:, :, :target]), merged, S[:, :, target + 1 :]], 2)
    S = S * torch.exp(log_gate)[:, :, None, None, None]
    S = torch.cat([(k[..., :, None] * v[..., None, :])[:, :, None], S[:, :, 1:]], 2)
    o = torch.einsum("bhl,bhn,bhlnp->bhp", weights[..., : S.shape[2]], q, S)
    return o, (S, t + 1)


def empty_state(q: Tensor, v: Tensor) -> LogLinearState:
    """One empty level, position 0."""
    b, h, _, n = q.shape
    return q.new_zeros(b, h, 1, n, v.shape[-1]), 0


def _recurrent(q, k, v, log_gate, weights, state: LogLinearState):
    outputs = []
    for t in range(q.shape[2]):
        o, state = log_linear_step(
            q[:, :, t], k[:, :, t], v[:, :, t], log_gate[:, :, t], weights[:, :, t], state
        )
        outputs.append(o)
    return torch.stack(outputs, 2), state


def _masked(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, weights: Tensor) -> Tensor:
    """sum_j exp(G_i - G_j) lambda_i^(level(i, j)) (q_i . k_j) v_j over j <= i, as one masked
    [T, T] matrix (positions counted from the start of the given block)."""
    t = q.shape[-2]
    G = torch.cumsum(log_gate, -1)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
    level = level_matrix(t, q.device).expand(*weights.shape[:-2], t, t)
    mixing = torch.exp(diff) * torch.gather(weights, -1, level)
    return (mixing * (q @ k.transpose(-1, -2))) @ v


def _chunks(q, k, v, log_gate, weights, chunk_size: int) -> Tensor:
    """Inside a chunk the masked form; across chunks, the Fenwick tree over chunk indices:
    key j in chunk c' < c is at level log2(C) + (c XOR c').bit_length() of a query in chunk c,
    so a loop over chunks merges and reads chunk-level states as `log_linear_step` does
    tokens."""
    b, h, t, n = q.shape
    C = chunk_size
    chunks = -(-t // C)
    pad = chunks * C - t
    if pad:
        q, k, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        log_gate = torch.nn.functional.pad(log_gate, (0, pad))
        weights = torch.nn.functional.pad(weights, (0, 0, 0, pad))
    shape = (b, h, chunks, C)
    qc, kc, vc = q.view(*shape, n), k.view(*shape, n), v.view(*shape, -1)
    gc, wc = log_gate.view(shape), weights.view(*shape, -1)
    inner = _masked(qc, kc, vc, gc, wc)
    G = torch.cumsum(gc, -1)  # inside each chunk, from its start
    total = G[..., -1]  # [B, H, chunks]: the log of the chunk's whole decay
    to_end = torch.exp(total[..., None] - G)  # exp(G_end - G_j) <= 1
    chunk_states = torch.einsum("bhcj,bhcjn,bhcjp->bhcnp", to_end, kc, vc)
    offset = C.bit_length() - 1  # log2 C: the levels inside a chunk
    S = q.new_zeros(b, h, 1, n, v.shape[-1])
    across = []
    for c in range(chunks):
        if c > 0:
            target = (c & -c).bit_length()
            if target == S.shape[2]:
                S = torch.cat([S, torch.zeros_like(S[:, :, :1])], 2)
            merged = S[:, :, : target + 1].sum(2, keepdim=True)
            S = torch.cat([torch.zeros_like(S[:, :, :target]), merged, S[:, :, target + 1 :]], 2)
            levels = S.shape[2]
            lam = wc[:, :, c, :, offset + 1 : offset + levels] * torch.exp(G[:, :, c])[..., None]
            across.append(torch.einsum("bhil,bhin,bhlnp->bhip", lam, qc[:, :, c], S[:, :, 1:]))
        else:
            across.append(torch.zeros_like(inner[:, :, 0]))
        S = S * torch.exp(total[:, :, c])[..., None, None, None]
        S = torch.cat([chunk_states[:, :, c, None], S[:, :, 1:]], 2)
    o = inner + torch.stack(across, 2)
    return o.reshape(b, h, chunks * C, -1)[:, :, :t]


@in_fp32()
def log_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_gate: Tensor,
    level_weights: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: LogLinearState | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, LogLinearState]:
    """q, k [B, H, T, d_k], v [B, H, T, d_v], log_gate [B, H, T] <= 0 (one gate per head, as
    Mamba-2's), level_weights [B, H, T, levels] >= 0 with levels >= ceil(log2 T) + 1:
    o [B, H, T, d_v]. No scaling inside. `initial_state` and `return_state` (the levels and
    the position) only in the recurrent mode; the chunk form needs `chunk_size` a power of 2."""
    check_mode(mode, chunk_size)
    _checks(q, k, v, log_gate, level_weights)
    if mode != "recurrent" and (initial_state is not None or return_state):
        raise ValueError("initial_state and return_state need mode='recurrent'")
    if mode == "recurrent":
        state = empty_state(q, v) if initial_state is None else initial_state
        o, state = _recurrent(q, k, v, log_gate, level_weights, state)
        return (o, state) if return_state else o
    if mode == "parallel":
        return _masked(q, k, v, log_gate, level_weights)
    if chunk_size & (chunk_size - 1):
        raise ValueError(
            f"chunk_size must be a power of 2 for log-linear attention, got {chunk_size}"
        )
    return _chunks(q, k, v, log_gate, level_weights, chunk_size)
