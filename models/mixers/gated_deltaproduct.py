"""Gated DeltaProduct (Siems et al. 2025): n_h delta-rule steps per token under Gated
DeltaNet's gate, built as fla's `fla/layers/gated_deltaproduct.py` (docs/background.md,
"Gated DeltaProduct")."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_int
from models.kernels import check_mode, gated_delta_rule
from models.mixers.base import KeyValueStateMixer, State
from models.mixers.deltanet import head_dims
from models.mixers.head_norm import HeadRMSNorm, l2norm
from models.mixers.mamba2 import MambaGate
from models.mixers.short_conv import ShortConvolution, conv_or_silu
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("gated_deltaproduct")
class GatedDeltaProduct(KeyValueStateMixer):
    """Per head h and token t, with n = `num_householder` keys k_{t,1..n}, values v_{t,1..n}
    and write rates beta_{t,1..n}:

        S <- a_t S_{t-1},   then for j = 1..n:
            S <- (I - beta_tj k_tj k_tj^T) S + beta_tj k_tj v_tj^T
        S_t = S,   o_t = S_t^T q_t,   y_t = W_o (RMSNorm_h(o_t) * swish(W_g x_t))
        a_t = exp(-A_h softplus(w_a^T x_t + dt_bias_h))      (`MambaGate`, A in (0, 16])

    The transition of a token is a product of n generalised Householder matrices
    I - beta k k^T (with beta in (0, 2), `allow_neg_eigval`: eigenvalues down to -1), the
    gate applied once per token. With n = 1 and beta in (0, 1) this is Gated DeltaNet. The
    state keeps its size, d_k x d_v per head, whatever n, and so does its rank bound.

    As fla builds it: q (d_k per head), the n keys and the n values are projections of the
    layer input, each through its own short convolution (kernel `conv_size`, no bias) + SiLU,
    owned by the mixer (`owns_short_conv`); the keys' and values' projections lay out token t
    as (n, heads, dim), the write rates as (n, heads); q and k normalised as fla's `l2norm`
    (eps 1e-6), q scaled by d_k^-1/2; beta = 2 sigmoid(w_b^T x) (`allow_neg_eigval`, fla's
    default; False: sigmoid); the gate as Gated DeltaNet's (A uniform in (0, 16], dt
    log-uniform in [0.001, 0.1]); expand_v 2; the output RMS-normalised per head and gated by
    swish. The kernel is `gated_delta_rule` on the sequence of T n sub-steps (fla's
    fused_recurrent path): the gate on each token's first sub-step, 0 on the others, the query
    on its last, zero on the others, whose outputs are dropped; its step loop is the
    specification and its chunk form (chunks of `chunk_size` tokens, n times as many
    sub-steps) the fast one: 16 tokens a chunk ran 1.3x as fast as 64 on one CPU thread at
    T = 1,024 (docs/performance.md, "The current mixers").

    fla's weights map onto these: q_proj, k_proj, v_proj stacked in that order as `qkv`;
    q_conv1d, k_conv1d, v_conv1d stacked as `conv.conv`; b_proj -> `beta`; a_proj ->
    `forget_input`; A_log, dt_bias -> `forget_gate.A_log`, `forget_gate.dt_bias`; g_proj ->
    `output_gate`; o_norm.weight -> `norm.weight`; o_proj -> `out`.

    `head_k_dim` is the state knob (`state_knob`): rank_bound H d_k (docs/background.md,
    "Gated DeltaProduct"), heads, d_v and n fixed. Deliberate differences from fla: d_v is
    expand_v * d_model / n_heads rather than expand_v * head_dim, so that the knob moves the
    key dimension alone (the two agree at the default d_k); no grouped value heads
    (`num_v_heads`); the forget gate and output gate always on (fla's defaults); Linear
    layers keep PyTorch's initialisation; `conv_size=0` drops the convs and keeps the SiLU,
    handing the block's shared conv back. State per layer: H d_k d_v floats plus the
    convolutions' window of (conv_size - 1) (H d_k + n H d_k + n H d_v) floats (conv state).
    Gates, norms and the recurrence run in float32 (`models.precision`)."""

    state_knob = "head_k_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        expand_v: float = 2.0,
        num_householder: int = 2,
        allow_neg_eigval: bool = True,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 16,
    ) -> None:
        super().__init__()
        self.head_k_dim, self.head_v_dim = head_dims(d_model, n_heads, head_k_dim, expand_v)
        require_int("num_householder", num_householder, 1)
        require(isinstance(allow_neg_eigval, bool), "allow_neg_eigval", allow_neg_eigval, "a bool")
        require_int("conv_size", conv_size, 0)
        check_mode(mode, chunk_size)
        self.d_model, self.n_heads, self.num_householder = d_model, n_heads, num_householder
        self.allow_neg_eigval = allow_neg_eigval
        self.mode, self.chunk_size = mode, chunk_size
        self.key_width, self.value_width = n_heads * self.head_k_dim, n_heads * self.head_v_dim
        n = num_householder
        self.widths = [self.key_width, n * self.key_width, n * self.value_width]
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConvolution(sum(self.widths), conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.beta = nn.Linear(d_model, n * n_heads, bias=False)
        self.forget_input = nn.Linear(d_model, n_heads, bias=False)
        self.forget_gate = MambaGate(n_heads, A_low=0.0)
        self.output_gate = nn.Linear(d_model, self.value_width, bias=False)
        self.norm = HeadRMSNorm(self.head_v_dim)
        self.out = nn.Linear(self.value_width, d_model, bias=False)

    def sub_steps(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, n * H * d] laid out (n, H, d) per token -> [B, H, T * n, d]: token t's n
        sub-steps in order."""
        b, t, width = x.shape
        n, h = self.num_householder, self.n_heads
        x = x.view(b, t, n, h, width // (n * h)).permute(0, 3, 1, 2, 4)
        return x.reshape(b, h, t * n, width // (n * h))

    def features(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The kernel's q (l2norm / sqrt(d_k) on each token's last sub-step, zero on the
        others), k (l2norm) [B, H, T n, d_k]; v [B, H, T n, d_v]; in float32 or wider; and the
        convolutions' window moved on (a one-token x with `window`: the step), else None."""
        projected = self.qkv(x)
        projected, window = conv_or_silu(self.conv, projected, window)
        q, k, v = projected.split(self.widths, -1)
        with autocast_off(x):
            q, k, v = at_least_fp32(self.heads(q), self.sub_steps(k), self.sub_steps(v))
            q = l2norm(q) * self.head_k_dim**-0.5  # [B, H, T, d_k]
            q = F.pad(q.unsqueeze(3), (0, 0, self.num_householder - 1, 0)).flatten(2, 3)
            return q, l2norm(k), v, window

    def write_rate(self, x: torch.Tensor) -> torch.Tensor:
        """beta_tj = sigmoid(w_b^T x_t), times 2 with `allow_neg_eigval`: [B, H, T n]."""
        logit = self.beta(x)
        with autocast_off(x):
            beta = torch.sigmoid(at_least_fp32(logit)[0])
            beta = 2 * beta if self.allow_neg_eigval else beta
            b, t, _ = beta.shape
            beta = beta.view(b, t, self.num_householder, self.n_heads).permute(0, 3, 1, 2)
            return beta.reshape(b, self.n_heads, t * self.num_householder)

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log a_t on each token's first sub-step, 0 on the others: [B, H, T n]."""
        log_gate = self.forget_gate(self.forget_input(x))[1]  # [B, H, T]
        return F.pad(log_gate.unsqueeze(-1), (0, self.num_householder - 1)).flatten(2, 3)

    def last_sub_steps(self, o: torch.Tensor) -> torch.Tensor:
        """[B, H, T n, d_v] -> each token's last sub-step [B, H, T, d_v]."""
        b, h, tn, d = o.shape
        return o.view(b, h, tn // self.num_householder, self.num_householder, d)[:, :, :, -1]

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * swish(W_g x)); x [B, T, d_model], o [B, H, T, d_v]."""
        return self.out(self.norm(o, self.output_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        beta, log_gate = self.write_rate(x), self.log_gate(x)
        chunk = self.chunk_size * self.num_householder
        with autocast_off(x):
            o = gated_delta_rule(q, k, v, beta, log_gate, mode=self.mode, chunk_size=chunk)
        return self.output(x, self.last_sub_steps(o))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        beta, log_gate = self.write_rate(x[:, None]), self.log_gate(x[:, None])
        with autocast_off(x):
            o, S = gated_delta_rule(
                q, k, v, beta, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(x[:, None], self.last_sub_steps(o))[:, 0]
        return y, self.packed(S, window)
