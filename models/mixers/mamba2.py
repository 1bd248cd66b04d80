"""Mamba-2's recurrence (Dao & Gu 2024, state-space duality): linear attention with one
input-dependent scalar gate per head, built as mamba_ssm's `Mamba2Simple`
(docs/background.md, section 16)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_int
from models.kernels import check_mode, gated_linear_attention
from models.mixers.base import Mixer, State
from models.mixers.short_conv import ShortConvolution
from models.precision import at_least_fp32, autocast_off
from models.registry import register


class MambaGate(nn.Module):
    """Mamba-2's gate, one per head h and token t:

        dt_t = softplus(u_t + dt_bias_h) > 0,   A_h = exp(A_log_h) > 0,
        a_t = exp(-dt_t A_h) in (0, 1),          log a_t = -dt_t A_h

    u_t is a projection of the input. dt is a step size: a large dt forgets much of the
    state and (in Mamba-2) writes the current token strongly; a small one keeps the state.
    Initialised as Mamba-2: A uniform in (A_low, A_high] ([1, 16]; Gated DeltaNet draws it
    in (0, 16]), softplus(dt_bias) log-uniform in [0.001, 0.1], both from the torch RNG."""

    def __init__(self, n_heads: int, A_low: float = 1.0, A_high: float = 16.0) -> None:
        super().__init__()
        require(0 <= A_low < A_high, "A_low", A_low, f"in [0, A_high={A_high})")
        A = A_low + (A_high - A_low) * (1 - torch.rand(n_heads))  # (A_low, A_high]: A > 0
        self.A_log = nn.Parameter(torch.log(A))
        low, high = math.log(1e-3), math.log(1e-1)
        dt = torch.exp(torch.rand(n_heads) * (high - low) + low)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)

    def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """u [B, T, H] -> (dt, log a), each [B, H, T], in float32 or wider."""
        with autocast_off(u):
            u, dt_bias, A_log = at_least_fp32(u, self.dt_bias, self.A_log)
            dt = F.softplus(u + dt_bias).transpose(1, 2)
            return dt, -dt * torch.exp(A_log)[:, None]


@register("mamba2")
class Mamba2(Mixer):
    """Mamba-2's selective state space as gated linear attention, built as mamba_ssm's
    `Mamba2Simple`; per head h (P = expand * d_model / n_heads channels, N = `d_state`):

        z, xBC, u = W_in x_t;    x_t, B_t, C_t = SiLU(conv_4(xBC) + bias)
        S_t = a_t S_{t-1} + (dt_t B_t) x_t^T,   y_t = S_t^T C_t + D_h x_t      (S: N x P)
        a_t = exp(-dt_t A_h),  dt_t = softplus(u_t + dt_bias_h)     (`MambaGate`)
        out_t = W_o RMSNorm(y_t * swish(z_t))

    x (the value) is the head's P channels of the inner stream, B (the key, times dt:
    Mamba-2's discretisation of the input) and C (the query) have N channels shared by the
    heads of each of `n_groups` groups (1: by every head, Mamba-2's default). As mamba_ssm
    builds it: one causal depthwise convolution with bias (kernel `conv_size`) over x, B and
    C together, then SiLU, owned by the mixer (the backbone's shared convolution is off for
    it, `owns_short_conv`); z and u skip the convolution; the inner width is `expand` = 2
    times d_model; A in [1, 16], dt log-uniform in [0.001, 0.1], D = 1; the gated RMSNorm
    normalises after the gate (each group's channels). With A = 0 the gate is 1 and this is
    unnormalised linear attention (eq. 8 without normaliser) with keys dt_t B_t.

    `d_state` is the state knob (`state_knob`): rank_bound H N (docs/background.md, section
    17), heads and P fixed. Deliberate differences from `Mamba2Simple`: the number of heads
    is set (2, as Zoology's MQAR configs) and the head dimension follows from it, where
    mamba_ssm fixes `headdim` (128) and derives the heads; no `dt_limit`, no learnable
    initial state (both off by default there); `conv_size=0` (an ablation) drops the
    convolution, keeps the SiLU and hands the block's shared convolution back.
    State per layer: H N P floats plus the convolution's window of
    (conv_size - 1) (expand d_model + 2 n_groups N) floats (conv state, `conv_state_size`).
    Gate, kernel, skip and norm run in float32 (`models.precision`)."""

    state_knob = "d_state"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        d_state: int = 32,
        expand: int = 2,
        n_groups: int = 1,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        require_int("d_model", d_model, 1)
        require_int("n_heads", n_heads, 1)
        require_int("expand", expand, 1)
        inner = expand * d_model
        require(inner % n_heads == 0, "n_heads", n_heads, f"a divisor of expand * d_model={inner}")
        require_int("d_state", d_state, 1)
        require_int("n_groups", n_groups, 1)
        require(n_heads % n_groups == 0, "n_groups", n_groups, f"a divisor of n_heads={n_heads}")
        require_int("conv_size", conv_size, 0)
        check_mode(mode, chunk_size)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, inner // n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.d_state, self.n_groups, self.inner = d_state, n_groups, inner
        self.conv_widths = [inner, n_groups * d_state, n_groups * d_state]  # x, B, C
        self.widths = [inner, sum(self.conv_widths), n_heads]  # z, xBC, u
        self.in_proj = nn.Linear(d_model, sum(self.widths), bias=False)
        conv_width = sum(self.conv_widths)
        self.conv = ShortConvolution(conv_width, conv_size, bias=True) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.gate = MambaGate(n_heads)
        self.D = nn.Parameter(torch.ones(n_heads))
        self.norm_weight = nn.Parameter(torch.ones(inner))
        self.out = nn.Linear(inner, d_model, bias=False)

    def per_head(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        """[B, T, groups * d] -> [B, H, T, d], each group's d channels given to its heads."""
        b, t, width = x.shape
        x = x.view(b, t, groups, 1, width // groups).permute(0, 2, 3, 1, 4)  # [B, G, 1, T, d]
        heads = x.expand(b, groups, self.n_heads // groups, t, width // groups)
        return heads.reshape(b, self.n_heads, t, width // groups)

    def projections(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """q = C, k = dt B: [B, H, T, d_state]; v = x: [B, H, T, head_dim]; log a: [B, H, T];
        all in float32 or wider; z [B, T, inner] (the output gate) in x's dtype; and the
        convolution's window moved on (a one-token x with `window` given), else None."""
        z, xbc, u = self.in_proj(x).split(self.widths, -1)
        if self.conv is None:
            xbc = F.silu(xbc)
        elif window is None:
            xbc = self.conv(xbc)
        else:
            step, window = self.conv.step(xbc[:, 0], window)
            xbc = step[:, None]
        value, key, query = xbc.split(self.conv_widths, -1)
        dt, log_gate = self.gate(u)
        with autocast_off(x):
            value, key, query = at_least_fp32(value, key, query)
            k = self.per_head(key, self.n_groups) * dt[..., None]
            q = self.per_head(query, self.n_groups)
            v = self.per_head(value, self.n_heads)
        return q, k, v, log_gate, z, window

    def output(self, o: torch.Tensor, v: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """W_o RMSNorm((o + D v) * swish(z)): o, v [B, H, T, head_dim], z [B, T, inner]."""
        b, h, t, p = o.shape
        with autocast_off(o):
            y = o + self.D.to(o.dtype)[:, None, None] * v
            y = y.transpose(1, 2).reshape(b, t, h * p) * F.silu(z.to(o.dtype))
            y = y.view(b, t, self.n_groups, -1)
            y = F.rms_norm(y, y.shape[-1:], eps=1e-5).view(b, t, h * p)
            y = y * self.norm_weight.to(o.dtype)
        return self.out(y.to(z.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, log_gate, z, _ = self.projections(x)
        with autocast_off(x):
            o = gated_linear_attention(
                q, k, v, log_gate, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(o, v, z)

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.d_state * self.head_dim + self.conv_state_size()

    def conv_state_size(self) -> int:
        return self.conv.window_floats if self.conv is not None else 0

    def rank_bound(self, seq_len: int) -> int:
        """H * d_state: per head S = sum_t (gates) dt_t B_t x_t^T has rank <= d_state, the
        key (B) dimension (docs/background.md, section 17). Heads of one group share B; the
        bound counts each head's d_state all the same (it is an upper bound either way).
        The convolution's window adds none."""
        return self.n_heads * self.d_state

    def init_state(self, batch_size: int) -> State:
        kw = self._state_kwargs()
        S = torch.zeros(batch_size, self.n_heads, self.d_state, self.head_dim, **kw)
        if self.conv is None:
            return (S,)
        return S, self.conv.init_window(batch_size, **self._tensor_kwargs())

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        window = state[1] if self.conv is not None else None
        q, k, v, log_gate, z, window = self.projections(x[:, None], window)
        with autocast_off(x):
            o, S = gated_linear_attention(
                q, k, v, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(o, v, z)[:, 0]
        return y, (S,) if self.conv is None else (S, window)
