"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024): the delta rule with Mamba-2's gate
(docs/background.md, section 16)."""

import torch
from torch import nn

from models.kernels import gated_delta_rule
from models.mixers.base import State
from models.mixers.deltanet import DeltaNet
from models.mixers.gla import GatedHeadNorm
from models.mixers.mamba2 import MambaGate
from models.precision import autocast_off
from models.registry import register


@register("gated_deltanet")
class GatedDeltaNet(DeltaNet):
    """DeltaNet (`models.mixers.deltanet`) whose state first decays by Mamba-2's gate, per
    head h:

        S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
        a_t = exp(-dt_t A_h) (`MambaGate`, dt_t = softplus(w_a^T x_t + dt_bias_h))
        y_t = W_o (RMSNorm_h(o_t) * swish(W_g x_t))

    with q_t, k_t L2-normalised and beta_t = sigmoid(w_beta^T x_t). The delta rule replaces
    the value stored at a key; the gate clears the whole state at once when a_t -> 0, which
    the delta rule alone can do only one key direction per token. With a_t = 1 this is
    DeltaNet's update. The per-head RMSNorm makes any scale of q immaterial (q is not
    scaled). State per layer: H * head_dim^2 floats. Gates and the delta rule run in float32
    (`models.precision`)."""

    def __init__(
        self, d_model: int, n_heads: int = 2, mode: str = "chunk", chunk_size: int = 64
    ) -> None:
        super().__init__(d_model, n_heads, mode, chunk_size)
        self.forget_input = nn.Linear(d_model, n_heads, bias=False)
        self.forget_gate = MambaGate(n_heads)
        self.output_gate = nn.Linear(d_model, d_model, bias=False)
        self.norm = GatedHeadNorm(self.head_dim)

    def gated_projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k (unit norm per head), v: [B, H, T, head_dim]; beta in (0, 1) and log a <= 0:
        [B, H, T]; all in float32 or wider."""
        _, log_gate = self.forget_gate(self.forget_input(x))
        return *self.projections(x), log_gate

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * swish(W_g x)); x [B, T, d_model], o [B, H, T, head_dim]."""
        return self.out(self.norm(o, self.output_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projections = self.gated_projections(x)
        with autocast_off(x):
            o = gated_delta_rule(*projections, mode=self.mode, chunk_size=self.chunk_size)
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        projections = self.gated_projections(x[:, None])
        with autocast_off(x):
            o, S = gated_delta_rule(
                *projections, mode="recurrent", initial_state=state[0], return_state=True
            )
        return self.output(x[:, None], o)[:, 0], (S,)
