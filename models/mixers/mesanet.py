"""MesaNet (von Oswald et al. 2025, *MesaNet: Sequence Modeling by Locally Optimal Test-Time
Training*): a read-out that solves for the best linear map from the keys seen to their values,
built as fla's `fla/layers/mesa_net.py` (docs/background.md, "MesaNet")."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import is_real, require, require_int
from models.kernels import check_mode, mesa_attention
from models.mixers.base import KeyValueStateMixer, State
from models.mixers.deltanet import head_dims
from models.mixers.head_norm import HeadRMSNorm, l2norm
from models.mixers.short_conv import ShortConvolution, conv_or_silu
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("mesanet")
class MesaNet(KeyValueStateMixer):
    """Per head h, with d_k = `head_k_dim` and d_v = expand_v * d_model / n_heads:

        q_t, k_t = SiLU(conv_4(W_{q,k} x_t)),  v_t = W_v x_t      (a causal depthwise conv each)
        q_t <- l2norm(q_t),  k_t <- l2norm(k_t)
        a_t = sigmoid(w_a^T x_t + c_a),  beta_t = sigmoid(w_b^T x_t + c_b)
        H_kk_t = a_t H_kk_{t-1} + beta_t k_t k_t^T,   H_kv_t = a_t H_kv_{t-1} + beta_t k_t v_t^T
        o_t = H_kv_t^T (H_kk_t + diag(lamb_h))^{-1} q_t,   lamb = softplus(lambda_params) + 0.25
        y_t = W_o RMSNorm_h(o_t)       (or RMSNorm_h(o_t) * swish(W_g x_t): `use_output_gate`)

    o_t is W_t q_t for the linear map W_t from keys to values that minimises the decayed,
    beta-weighted squared error over every pair seen plus sum_i lamb_i |W e_i|^2: the delta
    rule takes one gradient step on that loss per token, MesaNet solves it. Two keys that
    overlap no longer leak into each other's read-out as they do in the plain sum H_kv^T q.

    As fla builds it: q and k each through their own short convolution (kernel `conv_size`,
    no bias) and SiLU, owned by the mixer (`owns_short_conv`); v is neither convolved nor
    activated; q and k normalised by fla's `l2norm` (eps 1e-6), q not scaled; the gate a_t
    (fla's `g = logsigmoid(a_proj x)`) and beta from projections of the layer input, each with
    a bias; lamb one per head and key channel, softplus of a parameter plus
    `lambda_lower_bound` (0.25), initialised at lamb = 1 and spared by weight decay; the output
    RMS-normalised per head (eps 1e-5, the layer's default), ungated unless `use_output_gate`.

    fla's weights map onto these: q_proj, k_proj, v_proj stacked in that order as `qkv`;
    q_conv1d, k_conv1d stacked as `conv.conv`; a_proj -> `gate`; b_proj -> `beta`;
    lambda_params by the same name; o_norm.weight -> `norm.weight`; g_proj by the same name;
    o_proj -> `out`.

    Deliberate differences from fla: the gate's bias starts at `gate_bias` = 5, a_t near
    0.993 a token (fla's zero bias, or PyTorch's small draw with `gate_bias=None`, starts a_t
    near 1/2: a binding 30 tokens back is down by about 1e-9, and at that start the layer did
    not learn MQAR at T = 64 in 1,200 steps, where with the bias at 5 it did; as FoX's forget
    gate, `models.mixers.forgetting_attention`); the system is solved exactly
    (`models.kernels.mesa`: LU in the step loop, Cholesky in the chunk form) where fla runs
    `max_cg_step_training` = 30 conjugate-gradient steps from zero with divisions guarded by
    1e-5 (`models.kernels.conjugate_gradient`); fla's backward differentiates the exact solve
    (it solves the adjoint system for the gradient),
    so the exact solve is the function fla's kernel approximates, and its 30 guarded steps
    leave x_t about 2e-3 (relative) from it (docs/background.md, "MesaNet"). d_v is expand_v
    * d_model / n_heads rather than the key dim (fla ties them), so that the knob moves the key
    dimension alone (at the default d_k = d_model / n_heads the two agree); Linear layers keep
    PyTorch's initialisation (fla's models redraw them N(0, 0.02)); `conv_size=0` drops the
    convs and keeps the SiLU (an ablation: fla's layer convolves whatever `use_short_conv`
    says), handing the block's shared convolution back.

    `head_k_dim` is the state knob (`state_knob`): the state is H (d_k^2 + d_k d_v) floats
    and the rank bound H d_k (docs/background.md, "MesaNet"), heads and d_v fixed. State per
    layer: H (d_k^2 + d_k d_v) floats plus the convolutions' window of
    (conv_size - 1) 2 H d_k floats (conv state, `conv_state_size`). Under autocast the
    q, k, v, gate and beta projections, the convolutions, normalisation, lamb and the
    recurrence run in float32 (`models.precision`), only the output projection in bf16 /
    fp16: the solve amplifies a rounding of q and k by up to cond(H_kk + diag(lamb))^2, and
    with those projections in bf16 the input's gradient moved by 16% at lamb = 1 and 48% at
    lamb = 0.25 (d_model 64, T = 100)."""

    state_knob = "head_k_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        expand_v: float = 1.0,
        conv_size: int = 4,
        lambda_lower_bound: float = 0.25,
        use_output_gate: bool = False,
        gate_bias: float | None = 5.0,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        self.head_k_dim, self.head_v_dim = head_dims(d_model, n_heads, head_k_dim, expand_v)
        require_int("conv_size", conv_size, 0)
        require(
            is_real(lambda_lower_bound) and 0 < lambda_lower_bound < 1,
            "lambda_lower_bound",
            lambda_lower_bound,
            "a number in (0, 1) (the least lamb, below its initial value 1)",
        )
        check_mode(mode, chunk_size)
        self.d_model, self.n_heads = d_model, n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.lambda_lower_bound = float(lambda_lower_bound)
        self.key_width, self.value_width = n_heads * self.head_k_dim, n_heads * self.head_v_dim
        self.widths = [self.key_width, self.key_width, self.value_width]
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConvolution(2 * self.key_width, conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.gate = nn.Linear(d_model, n_heads, bias=True)
        if gate_bias is not None:
            require(math.isfinite(gate_bias), "gate_bias", gate_bias, "a finite number or null")
            nn.init.constant_(self.gate.bias, gate_bias)
        self.beta = nn.Linear(d_model, n_heads, bias=True)
        initial = torch.tensor(1.0 - self.lambda_lower_bound)  # lamb = 1 at the start
        init = initial + torch.log(-torch.expm1(-initial))  # softplus^-1(1 - lower bound)
        self.lambda_params = nn.Parameter(torch.full((self.key_width,), float(init)))
        self.g_proj = nn.Linear(d_model, self.value_width, bias=False) if use_output_gate else None
        self.norm = HeadRMSNorm(self.head_v_dim)
        self.out = nn.Linear(self.value_width, d_model, bias=False)

    def no_weight_decay(self) -> set[str]:
        return {"lambda_params"}

    def features(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q, k (l2norm): [B, H, T, d_k]; v: [B, H, T, d_v]; in float32 or wider; and the
        convolutions' window moved on (a one-token x with `window` given: the recurrent
        step), else None."""
        with autocast_off(x):  # the solve amplifies rounding in q and k (class docstring)
            qk, v = self.qkv(x).split([2 * self.key_width, self.value_width], -1)
            qk, window = conv_or_silu(self.conv, qk, window)
            q, k = qk.split(self.key_width, -1)
            q, k, v = at_least_fp32(self.heads(q), self.heads(k), self.heads(v))
            return l2norm(q), l2norm(k), v, window

    def rates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """beta = sigmoid(w_b^T x + c_b) and log a = logsigmoid(w_a^T x + c_a): [B, H, T];
        lamb = softplus(lambda_params) + lambda_lower_bound: [H, d_k]; float32 or wider."""
        with autocast_off(x):
            beta_logit, gate_logit = self.beta(x).transpose(1, 2), self.gate(x).transpose(1, 2)
            beta_logit, gate_logit, params = at_least_fp32(
                beta_logit, gate_logit, self.lambda_params
            )
            lamb = F.softplus(params) + self.lambda_lower_bound
            return (
                torch.sigmoid(beta_logit),
                F.logsigmoid(gate_logit),
                lamb.view(self.n_heads, -1),
            )

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o RMSNorm_h(o), or W_o (RMSNorm_h(o) * swish(W_g x)) with the output gate; x
        [B, T, d_model] (the layer input), o [B, H, T, d_v]."""
        if self.g_proj is None:
            return self.out(self.norm(o).to(x.dtype))
        return self.out(self.norm(o, self.g_proj(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        beta, log_gate, lamb = self.rates(x)
        with autocast_off(x):
            o = mesa_attention(
                q, k, v, beta, log_gate, lamb, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(x, o)

    def state_size(self, seq_len: int) -> int:
        """H (d_k^2 + d_k d_v): H_kk and H_kv per head, plus the convolutions' window."""
        dk, dv = self.head_k_dim, self.head_v_dim
        return self.n_heads * (dk * dk + dk * dv) + self.conv_state_size()

    def init_state(self, batch_size: int) -> State:
        """(H_kk, H_kv) or, with a convolution, (H_kk, H_kv, its window)."""
        H, dk, dv = self.n_heads, self.head_k_dim, self.head_v_dim
        H_kk = torch.zeros(batch_size, H, dk, dk, **self._state_kwargs())
        H_kv = torch.zeros(batch_size, H, dk, dv, **self._state_kwargs())
        if self.conv is None:
            return H_kk, H_kv
        return H_kk, H_kv, self.conv.init_window(batch_size, **self._tensor_kwargs())

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        window = state[2] if self.conv is not None else None
        q, k, v, window = self.features(x[:, None], window)
        beta, log_gate, lamb = self.rates(x[:, None])
        with autocast_off(x):
            o, (H_kk, H_kv) = mesa_attention(
                q,
                k,
                v,
                beta,
                log_gate,
                lamb,
                mode="recurrent",
                initial_state=(state[0], state[1]),
                return_state=True,
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, ((H_kk, H_kv) if self.conv is None else (H_kk, H_kv, window))
