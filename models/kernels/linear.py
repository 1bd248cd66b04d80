"""Linear attention (docs/background.md, sections 4-6: eq. 8-10): the plain and normalised
recurrence, RetNet's per-head decay ("decay" in this module: the gammas g of eq. 10), Based's
Taylor features, and the naive cumulative-sum form of Exercise 1."""

from typing import Any

import torch
from torch import Tensor

from models.kernels.common import check_mode, check_qkv, check_shape, in_blocks
from models.kernels.linear_chunk import ChunkInputs, chunk_attention, normalized
from models.precision import in_fp32

LinearState = tuple[Tensor, Tensor]  # (S [B, H, D, Dv], z [B, H, D])


@in_fp32()
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
    """Causal linear attention (eq. 8-9), with RetNet's per-head decay (eq. 10):

        S_t = g S_{t-1} + k_t v_t^T,   z_t = g z_{t-1} + k_t
        o_t = q_t^T S_t / (q_t^T z_t + eps)   if normalize else   q_t^T S_t

    Args:
        q, k: queries and keys, already feature-mapped (phi applied).
        v: values.
        decay: None (g = 1) or RetNet's per-head gammas g in (0, 1].
        normalize: divide by the normaliser q_t^T z_t + eps (eq. 9), or not.
        mode: "recurrent" (the step loop, the specification), "parallel" (o = (Q K^T * M) V
            with the causal decay matrix M[t, s] = g^(t-s) for s <= t), "chunk" (that form
            inside chunks of `chunk_size`; chunk start states by a cumulative sum over chunks,
            or with decay a matrix of powers g^(C*i); one block when T is at most
            ~chunk_size + D, `_block_length`). Chunk mode holds [B, H, T/C, D, Dv] chunk
            states, never one state per step (docs/background.md, section 5).
        chunk_size: C, the chunk length of "chunk".
        eps: added to the normaliser.
        initial_state: (S, z) to start from (the empty state if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv];  decay: [H]
        state: (S [B, H, D, Dv], z [B, H, D])

    Returns:
        o [B, H, T, Dv], or (o, state) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    if decay is not None:
        check_shape("decay", decay, (H,))
    if initial_state is not None:
        check_shape("initial_state[0] (S)", initial_state[0], (B, H, D, Dv))
        check_shape("initial_state[1] (z)", initial_state[1], (B, H, D))
    if mode == "recurrent":
        o, state = _linear_recurrent(q, k, v, decay, normalize, eps, initial_state)
    else:
        log_g = None if decay is None else decay.to(q.dtype).log()
        with_z = normalize or return_state
        chunks = _Chunks(log_g, normalize, eps, return_state, taylor=False, with_z=with_z)
        size = T if mode == "parallel" else _block_length(T, chunk_size, D, D, Dv + with_z)
        o, state = in_blocks(chunks, (q, k, v), 2, size, _joined(initial_state, with_z))
        state = _split(state, Dv)
    return (o, state) if return_state else o


def taylor_features(x: Tensor) -> Tensor:
    """Based's second-order Taylor features (docs/background.md, section 3):
    phi(x) = [1, x, x (x) x / sqrt(2)], so that phi(q)^T phi(k) = 1 + s + s^2 / 2, s = q^T k.

    Args:
        x: the (already scaled) input of the feature map.

    Shapes:
        x: [..., d]  ->  phi(x): [..., D], D = 1 + d + d^2

    Returns:
        phi(x).
    """
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


@in_fp32()
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

    "chunk" and "parallel" take the weights inside a chunk, phi(q_i)^T phi(k_j) =
    1 + s + s^2/2 with s = q_i^T k_j, from d-dimensional products (D = 273 for d = 16 would
    cost 17x more), and build the D features only for what crosses chunks: the state (none
    when one chunk covers a sequence that starts from the empty state and no state is
    returned). Chunk mode takes the whole sequence as one chunk while that costs fewer
    multiply-adds than the D-feature state (`_block_length`: T <= 431 for d = 16, Dv = 32 and
    chunks of 64).

    Args:
        q, k: the inputs of the feature map (already scaled).
        v: values.
        mode, chunk_size, eps, initial_state, return_state: as `linear_attention`'s.

    Shapes:
        q, k: [B, H, T, d];  v: [B, H, T, Dv]
        state: (S [B, H, D, Dv], z [B, H, D]), D = 1 + d + d^2

    Returns:
        o [B, H, T, Dv], or (o, state) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, d = q.shape
    D, Dv = 1 + d + d * d, v.shape[-1]
    if initial_state is not None:
        check_shape("initial_state[0] (S)", initial_state[0], (B, H, D, Dv))
        check_shape("initial_state[1] (z)", initial_state[1], (B, H, D))
    if mode == "recurrent":
        fq, fk = taylor_features(q), taylor_features(k)
        o, state = _linear_recurrent(fq, fk, v, None, True, eps, initial_state)
    else:
        chunks = _Chunks(None, True, eps, return_state, taylor=True, with_z=True)
        size = T if mode == "parallel" else _block_length(T, chunk_size, d, D, Dv + 1)
        o, state = in_blocks(chunks, (q, k, v), 2, size, _joined(initial_state, True))
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
    """One block of chunk-mode linear attention (a callable for `in_blocks`), T = n*C steps as
    n chunks. Inside chunk c (steps i, j = 0..C-1), from its start state:
    o_i = sum_{j<=i} g^(i-j) (q_i.k_j) v_j + g^(i+1) q_i^T S_start; the chunk adds
    sum_j g^(C-1-j) k_j v_j^T to the state and decays the old one by g^C.

    z rides along as one more value column (v_j -> [v_j, 1] makes S -> [S | z]), so the same
    matmuls give eq. 9's numerator and denominator; the column is left out when nothing needs
    z (no normaliser and no state returned). With `taylor`, q and k are the inputs of the
    Taylor map: q_i.k_j becomes 1 + s + s^2/2 of their product s, and the features are built
    only for the state. The block's products are one autograd node, `chunk_attention`; this
    class prepares what it needs. Nothing crosses chunks when the block is one chunk from the
    empty state: then the state is built only if it is returned or another block follows.

    The state handed from block to block is [S | z] as one tensor [B, H, D, Dv (+1)]."""

    def __init__(
        self,
        log_g: Tensor | None,
        normalize: bool,
        eps: float | Tensor,
        return_state: bool,
        taylor: bool,
        with_z: bool,
    ) -> None:
        self.log_g, self.normalize, self.eps = log_g, normalize, eps
        self.return_state, self.taylor, self.with_z = return_state, taylor, with_z

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, L: int, state: Tensor | None, last: bool
    ) -> tuple[Tensor, Tensor | None]:
        B, H, T, _ = q.shape
        C = L  # the chunk length
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
        if carried or self.return_state or not last:
            fk = taylor_features(kc) if self.taylor else kc
            if log_g is not None:
                fk = fk * torch.exp((C - 1 - i)[:, None] * lg)  # g^(C-1-j): j's update at the end
        if carried:
            fq = taylor_features(qc) if self.taylor else qc
            if log_g is not None:
                fq = fq * torch.exp((i + 1)[:, None] * lg)  # g^(i+1): the start state at i
        o, final = chunk_attention(
            ChunkInputs(
                q=qc, k=kc, v=vc, fq=fq, fk=fk, weights=weights, init=state,
                chunk_log_decay=chunk_log_decay, taylor=self.taylor,
            )
        )  # fmt: skip
        o = o.view(B, H, T, E)
        if self.normalize:
            return normalized(o, self.eps), final
        return (o[..., : E - 1] if self.with_z else o), final


@in_fp32()
def linear_attention_cumsum(
    q: Tensor, k: Tensor, v: Tensor, *, normalize: bool = True, eps: float = 1e-6
) -> Tensor:
    """Exercise 1, the naive parallel form: S_t = cumsum_s k_s v_s^T, z_t = cumsum_s k_s, then
    eq. 9. Materialises every prefix state [B, H, T, D, Dv]: a reference and a benchmark
    baseline only. No decay.

    Args:
        q, k: feature-mapped queries and keys;  v: values.
        normalize, eps: as `linear_attention`'s.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv]

    Returns:
        o [B, H, T, Dv].
    """
    check_qkv(q, k, v)
    S = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=2)  # [B, H, T, D, Dv]
    o = torch.einsum("bhtd,bhtde->bhte", q, S)
    if normalize:
        o = o / ((q * k.cumsum(2)).sum(-1, keepdim=True) + eps)
    return o
