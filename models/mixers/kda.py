"""Kimi Delta Attention (KDA; Kimi Team 2025, *Kimi Linear*): Gated DeltaNet with a gate per
key dimension, built as fla's `fla/layers/kda.py` (docs/background.md, "The gated DPLR
rule")."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require_int
from models.kernels import check_mode
from models.kernels.dplr import kda_rule
from models.mixers.base import KeyValueStateMixer, State
from models.mixers.deltanet import head_dims
from models.mixers.head_norm import HeadRMSNorm, l2norm
from models.mixers.short_conv import ShortConvolution, conv_or_silu
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("kda")
class KimiDeltaAttention(KeyValueStateMixer):
    """Per head h, with d_k = `head_k_dim`, d_v = expand_v * d_model / n_heads and a gate
    w_t in (0, 1]^d_k on every key dimension:

        q_t, k_t, v_t = SiLU(conv_4(W_{q,k,v} x_t))          (a causal depthwise conv each)
        q_t <- l2norm(q_t) / sqrt(d_k),   k_t <- l2norm(k_t),   beta_t = sigmoid(w_beta^T x_t)
        log w_t = -exp(A_log_h) softplus(F_2 F_1 x_t + dt_bias)      (F_1: d_model -> r)
        S_t = (I - beta_t k_t k_t^T) diag(w_t) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
        y_t = W_o (RMSNorm_h(o_t) * sigmoid(G_2 G_1 x_t + g_bias))     (G_1: d_model -> r)

    The gate comes first, then the delta correction of what the decayed state holds at k_t
    (fla's `naive_recurrent_kda`). With every key dimension's gate equal this is Gated
    DeltaNet's update; the per-dimension gate lets a head keep some key directions for long
    and clear others at once.

    As fla builds it: q, k, v each through their own short convolution (kernel `conv_size`,
    no bias) + SiLU, owned by the mixer (`owns_short_conv`); q and k normalised as fla's
    `l2norm` (eps 1e-6 under the root); q scaled by d_k^-1/2 (the kernel's default scale);
    beta from a bias-free projection of the layer input; the gate from a bias-free low-rank
    projection (`f_proj`, rank r = `gate_rank`, default d_v as fla's `head_v_dim`) plus a bias
    per key channel (`dt_bias`, softplus^-1 of a dt drawn log-uniform in [0.001, 0.1], clamped
    at 1e-4) times -exp(A_log) per head (A drawn uniform in [1, 16]); the output normalised
    per head (RMSNorm, eps 1e-5) and gated by the sigmoid (not swish) of a low-rank projection
    with a bias (`g_proj`, rank r).

    fla's weights map onto these: q_proj, k_proj, v_proj stacked in that order as `qkv`;
    q_conv1d, k_conv1d, v_conv1d stacked as `conv.conv`; b_proj -> `beta`; f_proj, g_proj,
    A_log, dt_bias by the same names; o_norm.weight -> `norm.weight`; o_proj -> `out`.

    `head_k_dim` is the state knob (`state_knob`): S is d_k x d_v per head, rank_bound H d_k
    (docs/background.md, "The gated DPLR rule"), heads and d_v fixed. Deliberate differences
    from fla: d_v is expand_v * d_model / n_heads rather than expand_v * head_dim, so that
    the knob moves the key dimension alone (at the default d_k = d_model / n_heads the two
    agree); no grouped value heads (`num_v_heads`), no `allow_neg_eigval` and no gate lower
    bound (`safe_gate`, `lower_bound`; all off by default there); Linear layers keep
    PyTorch's initialisation (fla's models redraw them N(0, 0.02)); `conv_size=0` drops the
    convs and keeps the SiLU (fla's `use_short_conv=False`), handing the block's shared conv
    back.
    State per layer: H d_k d_v floats plus the convolutions' window of
    (conv_size - 1) (2 H d_k + H d_v) floats (conv state, `conv_state_size`). Gates, norms and
    the recurrence run in float32 (`models.precision`). Kernel: `models.kernels.dplr.kda_rule`
    (the step loop as specification, the chunk form of the gated DPLR rule)."""

    state_knob = "head_k_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        expand_v: float = 1.0,
        gate_rank: int | None = None,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 16,
    ) -> None:
        super().__init__()
        self.head_k_dim, self.head_v_dim = head_dims(d_model, n_heads, head_k_dim, expand_v)
        require_int("conv_size", conv_size, 0)
        check_mode(mode, chunk_size)
        rank = self.head_v_dim if gate_rank is None else gate_rank
        require_int("gate_rank", rank, 1)
        self.d_model, self.n_heads = d_model, n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.key_width, self.value_width = n_heads * self.head_k_dim, n_heads * self.head_v_dim
        self.widths = [self.key_width, self.key_width, self.value_width]
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConvolution(sum(self.widths), conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.beta = nn.Linear(d_model, n_heads, bias=False)
        self.f_proj = nn.Sequential(
            nn.Linear(d_model, rank, bias=False), nn.Linear(rank, self.key_width, bias=False)
        )
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
        low, high = math.log(1e-3), math.log(1e-1)
        dt = torch.exp(torch.rand(self.key_width) * (high - low) + low).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.g_proj = nn.Sequential(
            nn.Linear(d_model, rank, bias=False), nn.Linear(rank, self.value_width, bias=True)
        )
        self.norm = HeadRMSNorm(self.head_v_dim)
        self.out = nn.Linear(self.value_width, d_model, bias=False)

    def features(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q (l2norm / sqrt(d_k)), k (l2norm): [B, H, T, d_k]; v: [B, H, T, d_v]; in float32
        or wider; and the convolutions' window moved on (a one-token x with `window` given:
        the recurrent step), else None."""
        projected = self.qkv(x)
        projected, window = conv_or_silu(self.conv, projected, window)
        q, k, v = projected.split(self.widths, -1)
        with autocast_off(x):
            q, k, v = at_least_fp32(self.heads(q), self.heads(k), self.heads(v))
            return l2norm(q) * self.head_k_dim**-0.5, l2norm(k), v, window

    def write_rate(self, x: torch.Tensor) -> torch.Tensor:
        """beta = sigmoid(w_beta^T x): [B, H, T] in (0, 1), float32 or wider."""
        logit = self.beta(x).transpose(1, 2)
        with autocast_off(x):
            return torch.sigmoid(at_least_fp32(logit)[0])

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log w_t = -exp(A_log_h) softplus(F_2 F_1 x_t + dt_bias) <= 0: [B, H, T, d_k], in
        float32 or wider."""
        logit = self.f_proj(x)
        with autocast_off(x):
            logit, dt_bias, A_log = at_least_fp32(logit, self.dt_bias, self.A_log)
            log_gate = self.heads(F.softplus(logit + dt_bias))
            return -torch.exp(A_log)[:, None, None] * log_gate

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * sigmoid(G_2 G_1 x + g_bias)); x [B, T, d_model], o
        [B, H, T, d_v]."""
        gate = self.g_proj(x)
        return self.out(self.norm(o).to(gate.dtype) * torch.sigmoid(gate))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        beta, log_gate = self.write_rate(x), self.log_gate(x)
        with autocast_off(x):
            o = kda_rule(q, k, v, beta, log_gate, mode=self.mode, chunk_size=self.chunk_size)
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        beta, log_gate = self.write_rate(x[:, None]), self.log_gate(x[:, None])
        with autocast_off(x):
            o, S = kda_rule(
                q, k, v, beta, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, self.packed(S, window)
