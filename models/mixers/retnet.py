"""RetNet's multi-scale retention (eq. 10): linear attention with phi = identity, no
normaliser, and a per-head exponential decay gamma_h = 1 - 2^(-5-h)."""

import torch
import torch.nn.functional as F
from torch import nn

from models.kernels import check_mode, linear_attention
from models.mixers.base import MatrixStateMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


def retnet_gammas(n_heads: int) -> torch.Tensor:
    """gamma_h = 1 - 2^(-5-h), h = 0..n_heads-1: head 0 forgets fastest (memory ~32 tokens)."""
    return 1 - 2.0 ** (-5 - torch.arange(n_heads, dtype=torch.float64))


@register("retnet")
class RetNet(MatrixStateMixer):
    """Gated multi-scale retention:

        S_t = gamma_h S_{t-1} + k_t v_t^T,   o_t = q_t^T S_t          (eq. 10, per head h)
        y = W_o (swish(W_g x) * GroupNorm_h(o))

    with k scaled by head_dim^-1/2 and GroupNorm one group per head (normalising each head's
    output per token, which also removes the scale that the decay sums build up).
    State per layer: H * head_dim^2 floats (S only; there is no normaliser z).

    Against fla's `fla/layers/multiscale_retention.py`, the same: the gammas, q K^T scaled by
    d_k^-1/2 (fla scales q, here k: the same product), a swish output gate from the layer
    input, no convolution of its own (fla's `use_short_conv=False`; the backbone's shared
    one feeds the mixer). Different, on purpose: no rotary embedding on q, k (the backbone's
    positions and the short convolution give order, and MQAR's lookup is by content: a
    rotation would add position to the match, not capacity); values as wide as keys (fla's
    `expand_v` is 2: it doubles the floats without moving the rank bound, H head_dim, so the
    state_size cells keep the square state); GroupNorm (mean removed, a bias) where fla has a
    gated per-head RMSNorm, kept so that the recorded RetNet results stay this mixer's.

    Retention runs in float32 (`models.precision`) and `gammas` stays float32 when the module
    is cast to bf16 / fp16: 1 - 2^-9 and beyond round to 1 in bf16 (1 - 2^-12 in fp16), which
    would turn heads 4+ into undecayed linear attention."""

    def __init__(
        self, d_model: int, n_heads: int = 2, mode: str = "chunk", chunk_size: int = 64
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        self.mode, self.chunk_size = mode, chunk_size
        self.gate = nn.Linear(d_model, d_model, bias=False)
        self.group_norm = nn.GroupNorm(n_heads, d_model)
        self.register_buffer("gammas", retnet_gammas(n_heads).to(torch.get_default_dtype()))

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k (scaled by head_dim^-1/2), v: each [B, H, T, head_dim]."""
        q, k, v = self.split_heads(x)
        return q, k * self.head_dim**-0.5, v

    def retention(self, x: torch.Tensor) -> torch.Tensor:
        """o_t = q_t^T S_t per head (eq. 10), before norm and gate: [B, H, T, head_dim], in the
        dtype of x (computed in float32 or wider)."""
        q, k, v = self.projections(x)
        with autocast_off(x):
            o = linear_attention(
                *at_least_fp32(q, k, v),
                decay=self.gammas,
                normalize=False,
                mode=self.mode,
                chunk_size=self.chunk_size,
            )
        return o.to(x.dtype)

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (swish(W_g x) * GroupNorm(o)); x [B, T, d_model], o [B, H, T, head_dim]."""
        b, h, t, d = o.shape
        o = o.transpose(1, 2).reshape(b * t, h * d)
        o = self.group_norm(o).view(b, t, h * d)
        return self.out(F.silu(self.gate(x)) * o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(x, self.retention(x))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        (S,) = state
        z = S.new_zeros(S.shape[:3])  # the kernel's normaliser slot; unused without normalize
        q, k, v = self.projections(x[:, None])
        with autocast_off(x):
            o, (S, _) = linear_attention(
                *at_least_fp32(q, k, v),
                decay=self.gammas,
                normalize=False,
                mode="recurrent",
                initial_state=(S, z),
                return_state=True,
            )
        return self.output(x[:, None], o.to(x.dtype))[:, 0], (S,)
