"""Gated DeltaNet-2 (GDN-2): KDA with its one write rate beta split into an erase gate per key
channel and a write gate per value channel, built as fla's `fla/layers/gdn2.py`
(docs/background.md, "Gated DeltaNet-2")."""

import torch
from torch import nn

from models.kernels.gdn2 import gdn2_rule
from models.mixers.base import State
from models.mixers.kda import KimiDeltaAttention
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("gdn2")
class GatedDeltaNet2(KimiDeltaAttention):
    """Per head h, with d_k = `head_k_dim`, d_v = expand_v * d_model / n_heads, a decay
    exp(g_t) in (0, 1]^d_k, an erase gate b_t in (0, 1)^d_k and a write gate w_t in (0, 1)^d_v:

        q_t, k_t, v_t = SiLU(conv_4(W_{q,k,v} x_t))          (a causal depthwise conv each)
        q_t <- l2norm(q_t) / sqrt(d_k),   k_t <- l2norm(k_t)
        b_t = sigmoid(W_b x_t),   w_t = sigmoid(W_w x_t)                   (no biases)
        g_t = -exp(A_log_h) softplus(F_2 F_1 x_t + dt_bias)                (F_1: d_model -> r)
        S_t = (I - k_t (b_t * k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,  o_t = S_t^T q_t
        y_t = W_o (RMSNorm_h(o_t) * sigmoid(G_2 G_1 x_t + g_bias))        (G_1: d_model -> r)

    The decay comes first, then the erase reads the decayed state at b_t * k_t and the write
    puts w_t * v_t minus that read at k_t (fla's `naive_recurrent_gdn2`). With b_t = w_t =
    beta_t this is KDA (`kda`): erasing and writing are decoupled, so a token can clear some
    key channels of a stored binding without writing a value of its own, or write without
    erasing.

    Everything else is KDA's, as fla builds both: the q, k, v short convolutions (owned by the
    mixer), the l2norm, the q scale, the decay's low-rank projection with `dt_bias` and
    `A_log`, the sigmoid-gated head RMSNorm and the low-rank output gate (`KimiDeltaAttention`'s
    docstring, with its deliberate differences from fla: d_v from d_model, no grouped value
    heads, no `allow_neg_eigval`, PyTorch's Linear initialisation, `conv_size=0`). fla's
    weights map onto these as for KDA, with b_proj -> `b_proj` and w_proj -> `w_proj` in place
    of KDA's beta.

    `head_k_dim` is the state knob (`state_knob`): S is d_k x d_v per head, rank_bound H d_k
    (docs/background.md, "Gated DeltaNet-2"). State per layer: H d_k d_v floats plus the
    convolutions' window of (conv_size - 1) (2 H d_k + H d_v) floats. Gates, norms and the
    recurrence run in float32 (`models.precision`). Kernel: `models.kernels.gdn2.gdn2_rule`
    (the step loop as specification; the chunk form of the gated DPLR rule)."""

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
        super().__init__(
            d_model, n_heads, head_k_dim, expand_v, gate_rank, conv_size, mode, chunk_size
        )
        del self.beta  # KDA's one rate per head, replaced by the two channel-wise gates
        self.b_proj = nn.Linear(d_model, self.key_width, bias=False)
        self.w_proj = nn.Linear(d_model, self.value_width, bias=False)

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """b = sigmoid(W_b x): [B, H, T, d_k] and w = sigmoid(W_w x): [B, H, T, d_v], in
        float32 or wider."""
        erase, write = self.b_proj(x), self.w_proj(x)
        with autocast_off(x):
            erase, write = at_least_fp32(erase, write)
            return torch.sigmoid(self.heads(erase)), torch.sigmoid(self.heads(write))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, _ = self.features(x)
        (erase, write), log_gate = self.gates(x), self.log_gate(x)
        with autocast_off(x):
            o = gdn2_rule(
                q, k, v, erase, write, log_gate, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(x, o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, window = self.features(x[:, None], self.window_of(state))
        (erase, write), log_gate = self.gates(x[:, None]), self.log_gate(x[:, None])
        with autocast_off(x):
            o, S = gdn2_rule(
                q,
                k,
                v,
                erase,
                write,
                log_gate,
                mode="recurrent",
                initial_state=state[0],
                return_state=True,
            )
        y = self.output(x[:, None], o)[:, 0]
        return y, self.packed(S, window)
