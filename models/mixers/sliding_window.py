"""Sliding-window softmax attention: eq. 1 restricted to the last `window` tokens.

Token t attends to s in [t - window + 1, t] (itself included). Generating the next token needs
the keys and values of the last min(T, window) tokens: a state that stops growing at `window`.
"""

import math

import torch
import torch.nn.functional as F

from common.checks import require_int
from models.kernels import check_mode
from models.mixers.base import MultiHeadMixer, State
from models.registry import register


def window_mask(t_q: torch.Tensor, t_k: torch.Tensor, window: int) -> torch.Tensor:
    """Boolean mask [..., len(t_q), len(t_k)]: key position s is visible from query position t
    iff 0 <= t - s < window and s >= 0 (positions below 0 are padding)."""
    lag = t_q[..., :, None] - t_k[..., None, :]
    return (lag >= 0) & (lag < window) & (t_k[..., None, :] >= 0)


def blocks_with_window(x: torch.Tensor, C: int, P: int) -> torch.Tensor:
    """[B, H, n*C, d] -> [B, H, n, P + C, d]: block c holds positions c*C - P ... c*C + C - 1,
    zeros before position 0 (P <= C: the tail of the previous block, then the block)."""
    B, H, T, d = x.shape
    blocks = x.view(B, H, T // C, C, d)
    before = F.pad(blocks[:, :, :-1, C - P :], (0, 0, 0, 0, 1, 0))  # block 0: zeros
    return torch.cat([before, blocks], 3)


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, mode: str, chunk_size: int
) -> torch.Tensor:
    """o_t = sum_{t-window < s <= t} softmax_s(q_t^T k_s / sqrt(d)) v_s; q, k, v [B, H, T, d].

    - "parallel": one T x T banded mask;
    - "chunk": blocks of C = max(chunk_size, window - 1) queries, each against the window - 1
      keys before the block and the block itself (memory O(T (C + window)); a block of about
      the window's length wastes the least work on masked pairs);
    - "recurrent": one query at a time against its window (the specification).
    """
    B, H, T, d = q.shape
    pos = torch.arange(T, device=q.device)
    if mode == "parallel":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(pos, pos, window))
    scale = 1 / math.sqrt(d)
    if mode == "recurrent":
        outs = []
        for t in range(T):
            lo = max(0, t - window + 1)
            scores = (q[:, :, t : t + 1] @ k[:, :, lo : t + 1].transpose(-1, -2)) * scale
            outs.append(scores.softmax(-1) @ v[:, :, lo : t + 1])
        return torch.cat(outs, 2)
    P = window - 1
    C = max(chunk_size, P)
    n = math.ceil(T / C)
    q, k, v = (F.pad(x, (0, 0, 0, n * C - T)) for x in (q, k, v))  # padded queries see
    # padded keys (zeros) at least at their own position, and no real query sees them
    starts = torch.arange(n, device=q.device)[:, None] * C
    t_q = starts + torch.arange(C, device=q.device)  # [n, C]
    t_k = starts - P + torch.arange(P + C, device=q.device)  # [n, P + C]
    scores = (q * scale).view(B, H, n, C, d) @ blocks_with_window(k, C, P).transpose(-1, -2)
    scores = scores.masked_fill_(~window_mask(t_q, t_k, window), float("-inf"))
    o = scores.softmax(-1) @ blocks_with_window(v, C, P)  # every row keeps its own position
    return o.view(B, H, n * C, d)[:, :, :T]


@register("sliding_window")
class SlidingWindowAttention(MultiHeadMixer):
    """Causal multi-head softmax attention over the last `window` tokens. State: the KV cache of
    the last min(T, window) tokens, 2 * min(T, window) * d_model floats per layer."""

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        window: int = 16,
        mode: str = "chunk",
        chunk_size: int = 16,
    ) -> None:
        super().__init__(d_model, n_heads)
        require_int("window", window, 1)
        check_mode(mode, chunk_size)
        self.window, self.mode, self.chunk_size = window, mode, chunk_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_heads(x)
        o = sliding_window_attention(q, k, v, self.window, self.mode, self.chunk_size)
        return self.merge_heads(o)

    def state_size(self, seq_len: int) -> int:
        return 2 * min(seq_len, self.window) * self.d_model

    def rank_bound(self, seq_len: int) -> int:
        """min(seq_len, window): the tokens its KV cache keeps (docs/background.md,
        section 17)."""
        return min(seq_len, self.window)

    def init_state(self, batch_size: int) -> State:
        empty = torch.zeros(batch_size, self.n_heads, 0, self.head_dim, **self._tensor_kwargs())
        return empty, empty.clone()

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v = self.split_heads(x[:, None])
        keys = torch.cat([state[0], k], dim=2)[:, :, -self.window :]
        values = torch.cat([state[1], v], dim=2)[:, :, -self.window :]
        scores = (q @ keys.transpose(-1, -2)) * self.head_dim**-0.5
        o = scores.softmax(dim=-1) @ values
        return self.merge_heads(o)[:, 0], (keys, values)
