"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024): the delta rule with Mamba-2's gate, built
as fla's `fla/layers/gated_deltanet.py` (docs/background.md, sections 15 and 16)."""

import torch
from torch import nn

from models.kernels import gated_delta_rule
from models.mixers.base import State
from models.mixers.deltanet import DeltaNet
from models.mixers.mamba2 import MambaGate
from models.precision import autocast_off
from models.registry import register


@register("gated_deltanet")
class GatedDeltaNet(DeltaNet):
    """DeltaNet (`models.mixers.deltanet`: q, k, v each through a causal conv + SiLU, q and k
    L2-normalised, q scaled by d_k^-1/2, beta_t = sigmoid(w_beta^T x_t)) whose state first
    decays by Mamba-2's gate, per head h:

        S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
        a_t = exp(-A_h softplus(w_a^T x_t + dt_bias_h))      (`MambaGate`)
        y_t = W_o (RMSNorm_h(o_t) * swish(W_g x_t))

    As fla builds it: beta, the gate's input (bias-free w_a) and the output gate W_g read the
    layer input; A is drawn uniform in (0, 16] and softplus(dt_bias) log-uniform in
    [0.001, 0.1]; the value dimension is `expand_v` = 2 times d_model / n_heads; the output
    norm is gated per head. The delta rule replaces the value stored at a key; the gate clears
    the whole state at once when a_t -> 0, which the delta rule alone can do only one key
    direction per token. With a_t = 1 this is DeltaNet's update.

    `head_k_dim` is the state knob (`state_knob`, rank_bound H d_k); `head_v_dim` (None =
    expand_v * d_model / n_heads) is the value knob (`value_knob`), as in DeltaNet: it moves
    the floats at a fixed rank bound. Deliberate differences from fla: d_v is
    expand_v * d_model / n_heads rather than expand_v * d_k, so that the key knob moves the
    key dimension alone (at the default d_k = d_model / n_heads the two agree); no grouped
    value heads (`num_v_heads`); `conv_size=0` as in DeltaNet. State per layer:
    H d_k d_v floats plus the convolution's window of (conv_size - 1) (2 H d_k + H d_v)
    floats (conv state). Gates and the delta rule run in float32 (`models.precision`)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        expand_v: float = 2.0,
        head_v_dim: int | None = None,
        conv_size: int = 4,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            head_k_dim,
            expand_v,
            head_v_dim=head_v_dim,
            conv_size=conv_size,
            mode=mode,
            chunk_size=chunk_size,
        )
        self.forget_input = nn.Linear(d_model, n_heads, bias=False)
        self.forget_gate = MambaGate(n_heads, A_low=0.0)
        self.output_gate = nn.Linear(d_model, self.value_width, bias=False)

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log a_t = -A_h softplus(w_a^T x_t + dt_bias_h) <= 0: [B, H, T], float32 or wider."""
        return self.forget_gate(self.forget_input(x))[1]

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o (RMSNorm_h(o) * swish(W_g x)); x [B, T, d_model], o [B, H, T, d_v]."""
        return self.out(self.norm(o, self.output_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        beta, log_gate = self.write_rate(x), self.log_gate(x)
        with autocast_off(x):
            o = gated_delta_rule(
                q, k, v, beta, log_gate, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        beta, log_gate = self.write_rate(x[:, None]), self.log_gate(x[:, None])
        with autocast_off(x):
            o, S = gated_delta_rule(
                q, k, v, beta, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, self.packed(S, window)
