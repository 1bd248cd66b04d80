"""DeltaNet: linear attention whose state is corrected, not only added to (the delta rule),
built as fla's `fla/layers/delta_net.py` (docs/background.md, sections 8 and 16)."""

import inspect

import torch
from torch import nn

from common.checks import is_real, require, require_int
from models.kernels import check_mode, delta_rule
from models.mixers.base import KeyValueStateMixer, State
from models.mixers.head_norm import HeadRMSNorm, l2norm
from models.mixers.short_conv import ShortConvolution, conv_or_silu
from models.precision import at_least_fp32, autocast_off
from models.registry import register


def head_dims(
    d_model: int,
    n_heads: int,
    head_k_dim: int | None,
    expand_v: float,
    head_v_dim: int | None = None,
) -> tuple[int, int]:
    """(key dim, value dim) per head: `head_k_dim` (None = d_model / n_heads) and `head_v_dim`
    (None = expand_v * d_model / n_heads), each checked (one-line `ValueError` naming the
    parameter)."""
    require_int("d_model", d_model, 1)
    require_int("n_heads", n_heads, 1)
    require(d_model % n_heads == 0, "n_heads", n_heads, f"a divisor of d_model={d_model}")
    base = d_model // n_heads
    dk = base if head_k_dim is None else head_k_dim
    require_int("head_k_dim", dk, 1)
    dv = expand_v * base if is_real(expand_v) else 0
    require(
        is_real(expand_v) and expand_v > 0 and float(dv).is_integer(),
        "expand_v",
        expand_v,
        f"a number > 0 whose product with d_model / n_heads = {base} is an integer",
    )
    if head_v_dim is not None:
        require_int("head_v_dim", head_v_dim, 1)
        return dk, head_v_dim
    return dk, int(dv)


@register("deltanet")
class DeltaNet(KeyValueStateMixer):
    """Per head, with d_k = `head_k_dim` and d_v = `head_v_dim` (expand_v * d_model / n_heads):

        q_t, k_t, v_t = SiLU(conv_4(W_{q,k,v} x_t))          (a causal depthwise conv each)
        q_t <- l2norm(q_t) / sqrt(d_k),   k_t <- l2norm(k_t),   beta_t = sigmoid(w_beta^T x_t)
        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,   o_t = S_t^T q_t
        y_t = W_o RMSNorm_h(o_t)

    S_{t-1}^T k_t is what the memory returns for k_t; the update moves it towards v_t by
    beta_t, so writing a key again replaces its value (beta = 1: exactly) instead of summing
    values as eq. 8 does. Chunked (WY) form for training (`models.kernels.delta_rule`).

    As fla builds it: q, k, v each get their own short convolution (kernel `conv_size`, no
    bias) and SiLU after their projection, so a key can take a shifted token while the query
    keeps the current one; the mixer owns this convolution and the backbone's shared one is
    off for it (`owns_short_conv`). beta comes from a bias-free projection of the layer input,
    not of the convolved stream. The output is RMS-normalised per head (no output gate: fla's
    `use_gate=False`). Zoology's MQAR configs run 2 heads (head dim 32 at d_model 64).
    l2norm(x) = x / sqrt(|x|^2 + 1e-6), fla's (`models.mixers.head_norm.l2norm`).

    `head_k_dim` is the state knob (`state_knob`): S is d_k x d_v per head, rank_bound H d_k
    (docs/background.md, section 17), with heads and d_v fixed. `head_v_dim` (None =
    expand_v * d_model / n_heads) is the value knob (`value_knob`): it moves the floats,
    H d_k d_v, at a fixed rank bound; set it and leave `expand_v` at its default (the two are
    one setting; a different expand_v beside it is refused). Deliberate differences from
    fla: d_v is set from d_model / n_heads (or `head_v_dim`), not from the key dim, so the
    key knob moves the key dimension alone; `conv_size=0` (an ablation) drops the mixer's
    convolution, keeps the SiLU (fla's `use_short_conv=False`) and hands the block's shared
    convolution back.
    State per layer: H d_k d_v floats, plus the convolution's window of
    (conv_size - 1) (2 H d_k + H d_v) floats (conv state, `conv_state_size`).
    Normalisation, beta and the delta rule run in float32 (`models.precision`; the chunk
    form's triangular solve has no bf16 kernel on CPU)."""

    state_knob = "head_k_dim"
    value_knob = "head_v_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        expand_v: float = 1.0,
        head_v_dim: int | None = None,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        default = inspect.signature(type(self)).parameters["expand_v"].default
        require(
            head_v_dim is None or expand_v == default,
            "expand_v",
            expand_v,
            f"{default} (its default) when head_v_dim={head_v_dim} sets the value dim",
        )
        self.head_k_dim, self.head_v_dim = head_dims(
            d_model, n_heads, head_k_dim, expand_v, head_v_dim
        )
        require_int("conv_size", conv_size, 0)
        check_mode(mode, chunk_size)
        self.d_model, self.n_heads = d_model, n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.key_width, self.value_width = n_heads * self.head_k_dim, n_heads * self.head_v_dim
        self.widths = [self.key_width, self.key_width, self.value_width]
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConvolution(sum(self.widths), conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.beta = nn.Linear(d_model, n_heads, bias=False)
        self.norm = HeadRMSNorm(self.head_v_dim)
        self.out = nn.Linear(self.value_width, d_model, bias=False)

    def features(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q (l2norm / sqrt(d_k)), k (l2norm: fla's x / sqrt(|x|^2 + 1e-6)): [B, H, T, d_k];
        v: [B, H, T, d_v]; in float32 or wider; and the convolution's window moved on (a
        one-token x with `window` given: the recurrent step), else None."""
        projected = self.qkv(x)
        projected, window = conv_or_silu(self.conv, projected, window)
        q, k, v = projected.split(self.widths, -1)
        with autocast_off(x):
            q, k, v = at_least_fp32(self.heads(q), self.heads(k), self.heads(v))
            q = l2norm(q) * self.head_k_dim**-0.5
            return q, l2norm(k), v, window

    def write_rate(self, x: torch.Tensor) -> torch.Tensor:
        """beta = sigmoid(w_beta^T x): [B, H, T] in (0, 1), float32 or wider."""
        logit = self.beta(x).transpose(1, 2)
        with autocast_off(x):
            return torch.sigmoid(at_least_fp32(logit)[0])

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o RMSNorm_h(o): x [B, T, d_model] (the layer input), o [B, H, T, d_v]."""
        return self.out(self.norm(o).to(x.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        beta = self.write_rate(x)
        with autocast_off(x):
            o = delta_rule(q, k, v, beta, mode=self.mode, chunk_size=self.chunk_size)
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        beta = self.write_rate(x[:, None])
        with autocast_off(x):
            o, S = delta_rule(
                q, k, v, beta, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, self.packed(S, window)
