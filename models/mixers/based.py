"""Based: Taylor-feature linear attention (global, fixed state) plus a small sliding-window
softmax attention (exact, local), their outputs summed (docs/background.md, section 9)."""

import torch

from common.checks import require_int
from models.mixers.base import Mixer, State
from models.mixers.kernel_attention import KernelAttention
from models.mixers.sliding_window import SlidingWindowAttention
from models.registry import register


@register("based")
class Based(Mixer):
    """y = LinAttn_taylor(x) + SlidingWindow(x).

    Linear branch: `linear` attention with the Taylor map (`KernelAttention`): q, k projected
    to `feature_dim` per head, phi(q)^T phi(k) = 1 + s + s^2/2 (D = 1 + f + f^2: 273 for
    f = 16), v = head_dim per head, normalised (eq. 9); the Taylor kernel is >= 1/2, so the
    denominator never vanishes. Window branch: softmax over the last `window` tokens with its
    own projections (`models.mixers.sliding_window`, in blocks of its own default size;
    `chunk_size` is the linear branch's).
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
        super().__init__()
        require_int("feature_dim", feature_dim, 1)
        self.linear = KernelAttention(
            d_model, n_heads, "taylor", qk_dim=feature_dim, mode=mode, chunk_size=chunk_size
        )
        self.window_attention = SlidingWindowAttention(d_model, n_heads, window, mode)

    @property
    def feature_dim(self) -> int:
        """D, the number of Taylor features per head."""
        return self.linear.feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.window_attention(x)

    def state_size(self, seq_len: int) -> int:
        return self.linear.state_size(seq_len) + self.window_attention.state_size(seq_len)

    def rank_bound(self, seq_len: int) -> int:
        """H * D + min(seq_len, window): the Taylor branch's rank (D = 1 + f + f^2 features
        per head) plus the window's exact slots (docs/background.md, section 17)."""
        return self.linear.rank_bound(seq_len) + self.window_attention.rank_bound(seq_len)

    def init_state(self, batch_size: int) -> State:
        return (*self.linear.init_state(batch_size), *self.window_attention.init_state(batch_size))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        y_linear, linear_state = self.linear.step(x, state[:2])
        y_window, window_state = self.window_attention.step(x, state[2:])
        return y_linear + y_window, (*linear_state, *window_state)
