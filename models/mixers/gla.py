"""GLA: gated linear attention, a state forgotten by input, one gate per key dimension
(Yang et al. 2024; docs/background.md, section 16)."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import is_real, require, require_int
from models.kernels import check_mode, gated_linear_attention
from models.mixers.base import MatrixStateMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


class GatedHeadNorm(nn.Module):
    """y = RMSNorm(o_h) * swish(g): each head's output normalised per token (one gain vector
    of head_dim shared by the heads), then gated elementwise by swish of a projection of the
    input (GLA's and Gated DeltaNet's output, as fla's fused norm-and-gate). The norm runs in
    float32 or wider (`models.precision`)."""

    def __init__(self, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """o [B, H, T, head_dim] (float32 or wider), gate [B, T, H * head_dim] (the output
        gate's pre-activation) -> [B, T, H * head_dim] in the dtype of `gate`."""
        b, h, t, d = o.shape
        with autocast_off(o):
            normed = F.rms_norm(o, (d,), self.weight.to(o.dtype), self.eps)
        normed = normed.transpose(1, 2).reshape(b, t, h * d).to(gate.dtype)
        return normed * F.silu(gate)


@register("gla")
class GatedLinearAttention(MatrixStateMixer):
    """Per head, with a gate a_t in (0, 1]^d_k on every key dimension:

        S_t = diag(a_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t
        log a_t = logsigmoid(W_2 W_1 x_t + b) / tau      (W_1: d_model -> gate_rank)
        y_t = W_o (RMSNorm_h(o_t) * swish(W_g x_t))

    q is scaled by head_dim^-1/2. The gate's low-rank projection (rank 16) and temperature
    tau = 16 are the paper's: with tau = 16 every gate is at least sigmoid(.)^(1/16), so a
    key dimension forgets slowly unless the input drives its logit far below 0. A dimension
    whose gate is near 1 keeps its bindings (RetNet's gamma = 1: no forgetting); a gate near 0
    clears that dimension of the state before the write. State per layer: H * head_dim^2
    floats (S only; no normaliser). Gates, kernel and norm run in float32
    (`models.precision`)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        gate_rank: int = 16,
        gate_temperature: float = 16.0,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        require_int("gate_rank", gate_rank, 1)
        require(
            is_real(gate_temperature) and gate_temperature > 0,
            "gate_temperature",
            gate_temperature,
            "a number > 0",
        )
        self.mode, self.chunk_size = mode, chunk_size
        self.gate_temperature = float(gate_temperature)
        self.forget_gate = nn.Sequential(
            nn.Linear(d_model, gate_rank, bias=False), nn.Linear(gate_rank, d_model)
        )
        self.output_gate = nn.Linear(d_model, d_model, bias=False)
        self.norm = GatedHeadNorm(self.head_dim)

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log a_t = logsigmoid(W_2 W_1 x_t + b) / tau: [B, H, T, head_dim], <= 0, in float32
        or wider."""
        b, t, _ = x.shape
        logit = self.forget_gate(x)
        with autocast_off(x):
            (logit,) = at_least_fp32(logit)
            log_gate = F.logsigmoid(logit) / self.gate_temperature
        return log_gate.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q (scaled by head_dim^-1/2), k, v: [B, H, T, head_dim]; log-gates as `log_gate`;
        all in float32 or wider."""
        q, k, v = self.split_heads(x)
        log_gate = self.log_gate(x)
        with autocast_off(x):
            q, k, v = at_least_fp32(q, k, v)
            return q * self.head_dim**-0.5, k, v, log_gate

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * swish(W_g x)); x [B, T, d_model], o [B, H, T, head_dim]."""
        return self.out(self.norm(o, self.output_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projections = self.projections(x)
        with autocast_off(x):
            o = gated_linear_attention(*projections, mode=self.mode, chunk_size=self.chunk_size)
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        projections = self.projections(x[:, None])
        with autocast_off(x):
            o, S = gated_linear_attention(
                *projections, mode="recurrent", initial_state=state[0], return_state=True
            )
        return self.output(x[:, None], o)[:, 0], (S,)
