"""DeltaNet: linear attention whose state is corrected, not only added to (the delta rule)."""

import torch
import torch.nn.functional as F
from torch import nn

from models import register
from models.kernels import check_mode, delta_rule
from models.mixers.base import MultiHeadMixer, State


@register("deltanet")
class DeltaNet(MultiHeadMixer):
    """Per head, with L2-normalised q_t, k_t and a write strength beta_t = sigmoid(w_beta^T x_t):

        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,   o_t = S_t^T q_t

    S_{t-1}^T k_t is what the memory returns for k_t; the update moves it towards v_t by
    beta_t, so writing a key again replaces its value (beta = 1: exactly) instead of summing
    values as eq. 8 does. Chunked (WY) form for training. State: H * head_dim^2 floats."""

    def __init__(
        self, d_model: int, n_heads: int = 2, mode: str = "chunk", chunk_size: int = 64
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        self.mode, self.chunk_size = mode, chunk_size
        self.beta = nn.Linear(d_model, n_heads)

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k (unit norm per head), v: [B, H, T, head_dim]; beta: [B, H, T] in (0, 1)."""
        q, k, v = self.split_heads(x)
        beta = torch.sigmoid(self.beta(x)).transpose(1, 2)
        return F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = delta_rule(*self.projections(x), mode=self.mode, chunk_size=self.chunk_size)
        return self.merge_heads(o)

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.head_dim * self.head_dim

    def init_state(self, batch_size: int) -> State:
        kw = self._tensor_kwargs()
        return (torch.zeros(batch_size, self.n_heads, self.head_dim, self.head_dim, **kw),)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        o, S = delta_rule(
            *self.projections(x[:, None]),
            mode="recurrent",
            initial_state=state[0],
            return_state=True,
        )
        return self.merge_heads(o)[:, 0], (S,)
