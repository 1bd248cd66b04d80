"""Softmax attention (eq. 1): the exact-retrieval baseline whose state is the KV cache."""

import torch

from models.kernels import softmax_attention
from models.mixers.base import MultiHeadMixer, State
from models.registry import register


@register("softmax")
class SoftmaxAttention(MultiHeadMixer):
    """Causal multi-head softmax attention. Generating token T+1 needs the KV cache of all T
    previous tokens: 2 * T * d_model floats per layer, growing with the sequence."""

    grows_with_seq_len = True

    def __init__(self, d_model: int, n_heads: int = 2) -> None:
        super().__init__(d_model, n_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.merge_heads(softmax_attention(*self.split_heads(x)))

    def state_size(self, seq_len: int) -> int:
        return 2 * seq_len * self.d_model

    def rank_bound(self, seq_len: int) -> int:
        """seq_len: the KV cache keeps every token, each readable exactly
        (docs/background.md, section 17)."""
        return seq_len

    def init_state(self, batch_size: int) -> State:
        empty = torch.zeros(batch_size, self.n_heads, 0, self.head_dim, **self._tensor_kwargs())
        return empty, empty.clone()

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v = self.split_heads(x[:, None])
        keys, values = torch.cat([state[0], k], dim=2), torch.cat([state[1], v], dim=2)
        scores = (q @ keys.transpose(-1, -2)) * self.head_dim**-0.5
        o = scores.softmax(dim=-1) @ values
        return self.merge_heads(o)[:, 0], (keys, values)
