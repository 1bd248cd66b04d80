"""Log-linear Mamba-2 (Guo et al. 2025, *Log-Linear Attention*): Mamba-2 whose one state per
head becomes a Fenwick tree of O(log T) states, each read with its own weight, built as fla's
`fla/layers/log_linear_mamba2.py` (docs/background.md, "Log-linear Mamba-2")."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_int
from models.kernels import check_mode
from models.kernels.log_linear import log_linear_attention, log_linear_step, num_levels
from models.mixers.base import Mixer, State
from models.mixers.short_conv import ShortConvolution, conv_or_silu
from models.precision import at_least_fp32, autocast_off
from models.registry import register

MAX_LEVELS = 15
"""Level weights per head and token: fla's count, ceil(log2 16384) + 1, enough for
T <= 16,384 (a longer sequence is refused)."""


@register("log_linear_mamba2")
class LogLinearMamba2(Mixer):
    """Per head h (P = expand * d_model / n_heads channels, N = `d_state`), as Mamba-2 with
    its state split by the Fenwick tree of the prefix:

        z, xBC, u, dl = W_in x_t + b_in;    x_t, B_t, C_t = SiLU(conv_4(xBC))
        dt_t = softplus(u_t + dt_bias_h),   log a_t = -dt_t exp(A_log_h)
        lambda_t^(l) = softplus(L_{h,l} dl_{t,h,l})              (one weight per level l)
        y_t = sum_l lambda_t^(l) sum_{j in level l of t} (prod_{j<s<=t} a_s) (C_t . B_j) dt_j x_j
              + D_h x_t
        out_t = W_o RMSNorm(y_t * swish(z_t)) + b_o

    Level 0 of token t is t itself and level l >= 1 the block of 2^(l-1) tokens for the set
    bit l - 1 of t (`models.kernels.log_linear`). With every lambda equal this is Mamba-2;
    the weights let a query read recent and distant blocks of its context differently, and
    the states (one N x P matrix per level) grow with log T, not T.

    As fla builds it: one projection with a bias for z, x, B, C, dt and the level inputs dl
    (n_heads * 15); one causal depthwise convolution without bias over x, B and C, then
    SiLU, owned by the mixer (`owns_short_conv`); dt = softplus(u + dt_bias) with dt drawn
    log-uniform in [0.001, 0.1] (floor 1e-4); A_log = log(1..H) (fla's `A = arange(1, H+1)`,
    not Mamba-2's uniform draw); L = 1; D = 1 per head; the value x scaled by dt; the gated
    RMSNorm after the gate (eps 1e-5, per group); the output projection with a bias.

    fla's weights map onto these by the same names: in_proj, conv1d -> `conv.conv`, dt_bias,
    A_log, L, D, norm.weight -> `norm_weight`, out_proj -> `out`.

    `d_state` is the state knob (`state_knob`): rank_bound levels(T) H N
    (docs/background.md, "Log-linear Mamba-2"), heads and P fixed. State after T tokens:
    levels(T) = ceil(log2 T) + 1 matrices of H N P floats, plus the position (one number, it
    says which levels merge next), plus the convolution's window of
    (conv_size - 1) (expand d_model + 2 n_groups N) floats (conv state, `conv_state_size`):
    it grows with T (`grows_with_seq_len`), as log T. Deliberate differences from fla: the
    number of heads is set (2) and the head dimension follows, as the zoo's `mamba2`; Linear
    layers keep PyTorch's initialisation; no `dt_limit`; `conv_size=0` drops the convolution
    and keeps the SiLU, handing the block's shared one back; the chunk form needs
    `chunk_size` a power of 2 (fla fixes 64). Gates, level weights, kernel, skip and norm run
    in float32 (`models.precision`)."""

    state_knob = "d_state"
    grows_with_seq_len = True

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
        power = chunk_size & (chunk_size - 1) == 0
        require(power, "chunk_size", chunk_size, "a power of 2 (the chunks are Fenwick blocks)")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, inner // n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.d_state, self.n_groups, self.inner = d_state, n_groups, inner
        self.conv_widths = [inner, n_groups * d_state, n_groups * d_state]  # x, B, C
        self.widths = [inner, sum(self.conv_widths), n_heads, n_heads * MAX_LEVELS]
        self.in_proj = nn.Linear(d_model, sum(self.widths), bias=True)
        conv_width = sum(self.conv_widths)
        self.conv = ShortConvolution(conv_width, conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        low, high = math.log(1e-3), math.log(1e-1)
        dt = torch.exp(torch.rand(n_heads) * (high - low) + low).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n_heads + 1).float()))
        self.L = nn.Parameter(torch.ones(n_heads, MAX_LEVELS))
        self.D = nn.Parameter(torch.ones(n_heads))
        self.norm_weight = nn.Parameter(torch.ones(inner))
        self.out = nn.Linear(inner, d_model, bias=True)

    def no_weight_decay(self) -> set[str]:
        """The level scales L (a matrix, which the recipe's rule would decay; fla spares it)."""
        return {"L"}

    def per_head(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        """[B, T, groups * d] -> [B, H, T, d], each group's d channels given to its heads."""
        b, t, width = x.shape
        x = x.view(b, t, groups, 1, width // groups).permute(0, 2, 3, 1, 4)
        heads = x.expand(b, groups, self.n_heads // groups, t, width // groups)
        return heads.reshape(b, self.n_heads, t, width // groups)

    def projections(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """q = C, k = B: [B, H, T, N]; v = dt x and x: [B, H, T, P]; log a: [B, H, T]; level
        weights [B, H, T, 15]; all in float32 or wider; z [B, T, inner] in x's dtype; and the
        convolution's window moved on (a one-token x with `window` given), else None."""
        z, xbc, u, dl = self.in_proj(x).split(self.widths, -1)
        xbc, window = conv_or_silu(self.conv, xbc, window)
        value, key, query = xbc.split(self.conv_widths, -1)
        b, t, _ = x.shape
        with autocast_off(x):
            value, key, query, u, dl = at_least_fp32(value, key, query, u, dl)
            dt = F.softplus(u + self.dt_bias.to(u.dtype)).transpose(1, 2)  # [B, H, T]
            log_gate = -dt * torch.exp(self.A_log.to(u.dtype))[:, None]
            dl = dl.view(b, t, self.n_heads, MAX_LEVELS).transpose(1, 2)
            weights = F.softplus(self.L.to(dl.dtype)[:, None] * dl)
            k = self.per_head(key, self.n_groups)
            q = self.per_head(query, self.n_groups)
            x_heads = self.per_head(value, self.n_heads)
        return q, k, x_heads * dt[..., None], x_heads, log_gate, weights, z, window

    def output(self, o: torch.Tensor, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """W_o RMSNorm((o + D x) * swish(z)) + b_o: o, x [B, H, T, P], z [B, T, inner]."""
        b, h, t, p = o.shape
        with autocast_off(o):
            y = o + self.D.to(o.dtype)[:, None, None] * x
            y = y.transpose(1, 2).reshape(b, t, h * p) * F.silu(z.to(o.dtype))
            y = y.view(b, t, self.n_groups, -1)
            y = F.rms_norm(y, y.shape[-1:], eps=1e-5).view(b, t, h * p)
            y = y * self.norm_weight.to(o.dtype)
        return self.out(y.to(z.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(x.shape[1] <= 2 ** (MAX_LEVELS - 1), "seq_len", x.shape[1], "<= 16384")
        q, k, v, x_heads, log_gate, weights, z, _ = self.projections(x)
        with autocast_off(x):
            o = log_linear_attention(
                q, k, v, log_gate, weights, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(o, x_heads, z)

    def levels(self, seq_len: int) -> int:
        """Level states after `seq_len` tokens: ceil(log2 T) + 1."""
        return num_levels(seq_len)

    def state_size(self, seq_len: int) -> int:
        matrices = self.levels(seq_len) * self.n_heads * self.d_state * self.head_dim
        return matrices + 1 + self.conv_state_size()

    def conv_state_size(self) -> int:
        return self.conv.window_floats if self.conv is not None else 0

    def rank_bound(self, seq_len: int) -> int:
        """levels(T) H N: the read-out sum_l lambda^(l) S_l^T q is linear in the stacked
        features (lambda^(l) q)_l, each level's state of rank <= N; the query's own level
        weights pick how it reads them (docs/background.md, "Log-linear Mamba-2"). The
        convolution's window adds none."""
        return self.levels(seq_len) * self.n_heads * self.d_state

    def init_state(self, batch_size: int) -> State:
        """(S [B, H, levels, N, P] in float32 or wider, one empty level; the position [B];
        the convolution's window)."""
        kw = self._state_kwargs()
        S = torch.zeros(batch_size, self.n_heads, 1, self.d_state, self.head_dim, **kw)
        position = torch.zeros(batch_size, dtype=torch.long, device=S.device)
        if self.conv is None:
            return S, position
        return S, position, self.conv.init_window(batch_size, **self._tensor_kwargs())

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        window = state[2] if self.conv is not None else None
        q, k, v, x_heads, log_gate, weights, z, window = self.projections(x[:, None], window)
        t = int(state[1][0])
        with autocast_off(x):
            o, (S, _) = log_linear_step(
                q[:, :, 0], k[:, :, 0], v[:, :, 0], log_gate[:, :, 0], weights[:, :, 0],
                (state[0], t),
            )  # fmt: skip
        y = self.output(o[:, :, None], x_heads, z)[:, 0]
        position = state[1] + 1
        return y, (S, position) if self.conv is None else (S, position, window)
