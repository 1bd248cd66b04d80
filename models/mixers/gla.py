"""GLA: gated linear attention, a state forgotten by input, one gate per key dimension
(Yang et al. 2024), built as fla's `fla/layers/gla.py` (docs/background.md, section 16)."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import is_real, require, require_int
from models.kernels import check_mode, gated_linear_attention
from models.mixers.base import KeyValueStateMixer, State
from models.mixers.head_norm import HeadRMSNorm
from models.mixers.short_conv import ShortConvolution
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("gla")
class GatedLinearAttention(KeyValueStateMixer):
    """Per head, with d_k = `head_k_dim` and d_v = d_model / n_heads, a gate a_t in
    (0, 1]^d_k on every key dimension:

        S_t = diag(a_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t / sqrt(d_k)
        log a_t = logsigmoid(W_2 W_1 x_t + b) / tau      (W_1: d_model -> gate_rank)
        y_t = W_o (RMSNorm_h(o_t) * swish(W_g x_t))

    As fla's `fla/layers/gla.py` builds it: q, k, v plain projections (no feature map), the
    key dimension half of d_model (fla's `expand_k` = 0.5: d_k = d_model / (2 n_heads) by
    default), the value dimension d_model (`expand_v` = 1), q scaled by d_k^-1/2, a gate of
    rank 16 with normaliser tau = 16, and a per-head RMSNorm gated by swish. Each of q, k, v
    has its own causal conv (kernel `conv_size`, no bias) + SiLU, owned by the mixer (the
    block's shared conv then off): fla's `use_short_conv=True`, which is not fla's default.
    That is the one deliberate difference: in this harness's small MQAR models GLA fed by the
    block's shared conv (`conv_size=0`, fla's default) does not learn the lookup within the
    `capacity_law` budget, and with its own convs it does (docs/background.md, section 16,
    "The reference layers"). With tau = 16 every gate is at least sigmoid(.)^(1/16), so a key
    dimension forgets slowly unless the input drives its logit far below 0. A dimension whose
    gate is near 1 keeps its bindings (RetNet's gamma = 1: no forgetting); a gate near 0
    clears that dimension of the state before the write.

    `head_k_dim` is the state knob (`state_knob`): S is d_k x d_v per head, rank_bound H d_k
    (docs/background.md, section 17), heads and d_v fixed. Remaining differences from fla,
    kept on purpose: no grouped key-value heads (`num_kv_heads`) and no gate clamp
    (`clamp_min`, off by default there). State per layer: H d_k d_v floats (S only; no
    normaliser), plus the convs' window of (conv_size - 1) (2 H d_k + H d_v) floats (conv
    state, `conv_state_size`). Gates, kernel and norm run in float32 (`models.precision`)."""

    state_knob = "head_k_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        gate_rank: int = 16,
        gate_temperature: float = 16.0,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        require_int("d_model", d_model, 1)
        require_int("n_heads", n_heads, 1)
        require(d_model % n_heads == 0, "n_heads", n_heads, f"a divisor of d_model={d_model}")
        check_mode(mode, chunk_size)
        require_int("gate_rank", gate_rank, 1)
        require(
            is_real(gate_temperature) and gate_temperature > 0,
            "gate_temperature",
            gate_temperature,
            "a number > 0",
        )
        self.head_k_dim = max(1, d_model // (2 * n_heads)) if head_k_dim is None else head_k_dim
        require_int("head_k_dim", self.head_k_dim, 1)
        require_int("conv_size", conv_size, 0)
        self.d_model, self.n_heads, self.head_v_dim = d_model, n_heads, d_model // n_heads
        self.mode, self.chunk_size = mode, chunk_size
        self.gate_temperature = float(gate_temperature)
        key_width = n_heads * self.head_k_dim
        self.widths = [key_width, key_width, d_model]
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConvolution(sum(self.widths), conv_size) if conv_size else None
        self.owns_short_conv = conv_size > 0
        self.forget_gate = nn.Sequential(
            nn.Linear(d_model, gate_rank, bias=False), nn.Linear(gate_rank, key_width)
        )
        self.output_gate = nn.Linear(d_model, d_model, bias=False)
        self.norm = HeadRMSNorm(self.head_v_dim)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log a_t = logsigmoid(W_2 W_1 x_t + b) / tau: [B, H, T, d_k], <= 0, in float32
        or wider."""
        logit = self.forget_gate(x)
        with autocast_off(x):
            (logit,) = at_least_fp32(logit)
            log_gate = F.logsigmoid(logit) / self.gate_temperature
        return self.heads(log_gate)

    def features(
        self, x: torch.Tensor, window: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q (scaled by d_k^-1/2), k: [B, H, T, d_k]; v: [B, H, T, d_v]; in float32 or wider;
        with `conv_size` > 0 each through its causal conv + SiLU, and the conv's window moved
        on (a one-token x with `window` given: the recurrent step), else None."""
        projected = self.qkv(x)
        if self.conv is not None and window is None:
            projected = self.conv(projected)
        elif self.conv is not None:
            step, window = self.conv.step(projected[:, 0], window)
            projected = step[:, None]
        q, k, v = (self.heads(p) for p in projected.split(self.widths, -1))
        with autocast_off(x):
            q, k, v = at_least_fp32(q, k, v)
            return q * self.head_k_dim**-0.5, k, v, window

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v as `features`; log-gates as `log_gate`: the kernel's inputs."""
        q, k, v, _ = self.features(x)
        return q, k, v, self.log_gate(x)

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * swish(W_g x)); x [B, T, d_model], o [B, H, T, d_v]."""
        return self.out(self.norm(o, self.output_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projections = self.projections(x)
        with autocast_off(x):
            o = gated_linear_attention(*projections, mode=self.mode, chunk_size=self.chunk_size)
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        log_gate = self.log_gate(x[:, None])
        with autocast_off(x):
            o, S = gated_linear_attention(
                q, k, v, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, self.packed(S, window)
