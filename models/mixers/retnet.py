"""RetNet's multi-scale retention (eq. 10): linear attention with phi = identity, no
normaliser, and a per-head exponential decay gamma_h = 1 - 2^(-5-h)."""

import torch
import torch.nn.functional as F
from torch import nn

from models import register
from models.kernels import check_mode, linear_attention
from models.mixers.base import MultiHeadMixer, State


def retnet_gammas(n_heads: int) -> torch.Tensor:
    """gamma_h = 1 - 2^(-5-h), h = 0..n_heads-1: head 0 forgets fastest (memory ~32 tokens)."""
    return 1 - 2.0 ** (-5 - torch.arange(n_heads, dtype=torch.float64))


@register("retnet")
class RetNet(MultiHeadMixer):
    """Gated multi-scale retention:

        S_t = gamma_h S_{t-1} + k_t v_t^T,   o_t = q_t^T S_t          (eq. 10, per head h)
        y = W_o (swish(W_g x) * GroupNorm_h(o))

    with k scaled by head_dim^-1/2 and GroupNorm one group per head (normalising each head's
    output per token, which also removes the scale that the decay sums build up).
    No xPos rotation: the backbone's learned positions give order. State per layer:
    H * head_dim^2 floats (S only; there is no normaliser z)."""

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
        """o_t = q_t^T S_t per head (eq. 10), before norm and gate: [B, H, T, head_dim]."""
        return linear_attention(
            *self.projections(x),
            decay=self.gammas,
            normalize=False,
            mode=self.mode,
            chunk_size=self.chunk_size,
        )

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (swish(W_g x) * GroupNorm(o)); x [B, T, d_model], o [B, H, T, head_dim]."""
        b, h, t, d = o.shape
        o = o.transpose(1, 2).reshape(b * t, h * d)
        o = self.group_norm(o).view(b, t, h * d)
        return self.out(F.silu(self.gate(x)) * o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(x, self.retention(x))

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.head_dim * self.head_dim

    def init_state(self, batch_size: int) -> State:
        kw = self._tensor_kwargs()
        return (torch.zeros(batch_size, self.n_heads, self.head_dim, self.head_dim, **kw),)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        (S,) = state
        z = S.new_zeros(S.shape[:3])  # the kernel's normaliser slot; unused without normalize
        o, (S, _) = linear_attention(
            *self.projections(x[:, None]),
            decay=self.gammas,
            normalize=False,
            mode="recurrent",
            initial_state=(S, z),
            return_state=True,
        )
        return self.output(x[:, None], o)[:, 0], (S,)
