"""A mixer's own short convolution: causal, depthwise, over the projections it feeds
(docs/background.md, section 16, "The reference layers")."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require_int


class ShortConvolution(nn.Module):
    """y_t = act(b + sum_{i < K} w_i * x_{t-i}) per channel, K = `kernel_size`, act = SiLU or
    none: a causal depthwise convolution over time, as fla's `ShortConvolution` and Mamba-2's
    `conv1d`. Depthwise channels are independent, so one module over the concatenation
    [q | k | v] is exactly three separate convolutions on q, k and v (each channel its own
    filter); its initialisation is `nn.Conv1d`'s (fan-in = K), the same for either layout.

    Its recurrent state is a window of the last K - 1 inputs per channel:
    `channels * (kernel_size - 1)` floats, conv state (not where bindings are kept)."""

    def __init__(
        self, channels: int, kernel_size: int, bias: bool = False, activation: bool = True
    ) -> None:
        super().__init__()
        require_int("channels", channels, 1)
        require_int("kernel_size", kernel_size, 1)
        self.kernel_size, self.activation = kernel_size, activation
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=bias)

    @property
    def window_floats(self) -> int:
        """Floats of the window `step` carries per example: channels * (kernel_size - 1)."""
        return self.conv.in_channels * (self.kernel_size - 1)

    def _act(self, y: torch.Tensor) -> torch.Tensor:
        return F.silu(y) if self.activation else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, channels] -> y [B, T, channels], y_t from x_{t-K+1..t} only."""
        padded = F.pad(x.transpose(1, 2), (self.kernel_size - 1, 0))
        return self._act(self.conv(padded).transpose(1, 2))

    def init_window(self, batch_size: int, **tensor_kw: object) -> torch.Tensor:
        """The empty window: zeros [B, channels, kernel_size - 1] (the inputs before t = 0)."""
        return torch.zeros(batch_size, self.conv.in_channels, self.kernel_size - 1, **tensor_kw)

    def step(self, x: torch.Tensor, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token: x [B, channels], window [B, channels, kernel_size - 1] (oldest first)
        -> (y [B, channels], the window moved on by x)."""
        full = torch.cat([window.to(x.dtype), x[:, :, None]], dim=2)
        y = (full * self.conv.weight[:, 0]).sum(dim=2)
        if self.conv.bias is not None:
            y = y + self.conv.bias
        return self._act(y), full[:, :, 1:].to(window.dtype)


def conv_or_silu(
    conv: ShortConvolution | None, x: torch.Tensor, window: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A mixer's own convolution over x [B, T, C] (SiLU after it), or the SiLU alone without
    one (its conv off); with `window` (a one-token x: the recurrent step) the convolution's
    step, returning the window moved on, else None."""
    if conv is None:
        return F.silu(x), window
    if window is None:
        return conv(x), None
    step, window = conv.step(x[:, 0], window)
    return step[:, None], window
