"""Based: Taylor-feature linear attention (global, fixed state) plus a small sliding-window
softmax attention (exact, local), their outputs summed."""

import torch
from torch import nn

from common.checks import require_int
from models import register
from models.feature_maps import build_feature_map
from models.kernels import check_mode, linear_attention
from models.mixers.base import MultiHeadMixer, State
from models.mixers.sliding_window import SlidingWindowAttention
from models.precision import at_least_fp32, autocast_off


@register("based")
class Based(MultiHeadMixer):
    """y = W_o LinAttn_taylor(x) + SlidingWindow(x).

    Linear branch: q, k projected to `feature_dim` per head, phi = Taylor map (1 + s + s^2/2,
    D = 1 + f + f^2: 273 for f = 16), v = head_dim per head, normalised (eq. 9); the Taylor
    kernel is >= 1/2, so the denominator never vanishes. Window branch: softmax over the last
    `window` tokens with its own projections (`models.mixers.sliding_window`).
    Based stacks the two as separate layers; here they share one mixer and their outputs add.
    State per layer: H * (D * head_dim + D) + 2 * min(T, window) * d_model floats.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        feature_dim: int = 16,
        window: int = 16,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(d_model, n_heads)
        require_int("feature_dim", feature_dim, 1)
        check_mode(mode, chunk_size)
        self.mode, self.chunk_size, self.key_dim = mode, chunk_size, feature_dim
        del self.qkv  # replaced by q, k of size feature_dim and v of size head_dim per head
        self.qk = nn.Linear(d_model, 2 * n_heads * feature_dim, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.feature_map = build_feature_map("taylor", feature_dim)
        self.window_attention = SlidingWindowAttention(d_model, n_heads, window, mode, chunk_size)

    @property
    def feature_dim(self) -> int:
        """D, the number of Taylor features per head."""
        return self.feature_map.out_dim

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """phi(q), phi(k): [B, H, T, D]; v: [B, H, T, head_dim]; in float32 or wider."""
        b, t, _ = x.shape
        qk = self.qk(x).view(b, t, 2, self.n_heads, self.key_dim).permute(2, 0, 3, 1, 4)
        v = self.value(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        with autocast_off(x):
            q, k, v = at_least_fp32(qk[0], qk[1], v)
            return self.feature_map(q), self.feature_map(k), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The linear branch in float32 (`models.precision`), the window branch as given."""
        features = self.features(x)
        with autocast_off(x):
            o = linear_attention(*features, mode=self.mode, chunk_size=self.chunk_size)
        return self.merge_heads(o.to(x.dtype)) + self.window_attention(x)

    def state_size(self, seq_len: int) -> int:
        linear = self.n_heads * (self.feature_dim * self.head_dim + self.feature_dim)
        return linear + self.window_attention.state_size(seq_len)

    def init_state(self, batch_size: int) -> State:
        kw = self._state_kwargs()
        S = torch.zeros(batch_size, self.n_heads, self.feature_dim, self.head_dim, **kw)
        z = torch.zeros(batch_size, self.n_heads, self.feature_dim, **kw)
        return (S, z, *self.window_attention.init_state(batch_size))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        S, z, keys, values = state
        features = self.features(x[:, None])
        with autocast_off(x):
            o, (S, z) = linear_attention(
                *features, mode="recurrent", initial_state=(S, z), return_state=True
            )
        y_window, (keys, values) = self.window_attention.step(x, (keys, values))
        return self.merge_heads(o.to(x.dtype))[:, 0] + y_window, (S, z, keys, values)
