"""Mamba-2's recurrence (Dao & Gu 2024, state-space duality): linear attention with one
input-dependent scalar gate per head (docs/background.md, section 16)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_int
from models.kernels import check_mode, gated_linear_attention
from models.mixers.base import MultiHeadMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


class MambaGate(nn.Module):
    """Mamba-2's gate, one per head h and token t:

        dt_t = softplus(u_t + dt_bias_h) > 0,   A_h = exp(A_log_h) > 0,
        a_t = exp(-dt_t A_h) in (0, 1),          log a_t = -dt_t A_h

    u_t is a projection of the input. dt is a step size: a large dt forgets much of the
    state and (in Mamba-2) writes the current token strongly; a small one keeps the state.
    Initialised as Mamba-2: A uniform in [1, 16], softplus(dt_bias) log-uniform in
    [0.001, 0.1], both drawn from the torch RNG."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        A = torch.empty(n_heads).uniform_(1.0, 16.0)
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
class Mamba2(MultiHeadMixer):
    """Mamba-2's selective state space as gated linear attention, per head h:

        S_t = a_t S_{t-1} + (dt_t B_t) x_t^T,   y_t = S_t^T C_t + D_h x_t      (S: d_state x P)
        a_t = exp(-dt_t A_h) (`MambaGate`)
        out_t = W_o RMSNorm(y_t * swish(z_t))

    z, x, B, C and the gate's input come from one projection of the input: x [P = head_dim
    per head] is the value, B [d_state] the key (times dt: Mamba-2's discretisation of the
    input), C [d_state] the query; B and C are shared by the heads of each of `n_groups`
    groups (1: by every head, Mamba-2's default). The RMSNorm normalises each group's
    d_model / n_groups channels (Mamba-2's gated norm). The backbone's short convolution
    stands in for Mamba-2's own (its conv over x, B, C). With A = 0 the gate is 1 and this
    is unnormalised linear attention (eq. 8 without normaliser) with keys dt_t B_t.
    State per layer: H * d_state * head_dim floats. Gate, kernel, skip and norm run in
    float32 (`models.precision`)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        d_state: int = 32,
        n_groups: int = 1,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        require_int("d_state", d_state, 1)
        require_int("n_groups", n_groups, 1)
        require(n_heads % n_groups == 0, "n_groups", n_groups, f"a divisor of n_heads={n_heads}")
        self.mode, self.chunk_size = mode, chunk_size
        self.d_state, self.n_groups = d_state, n_groups
        del self.qkv  # one projection to z, x, B, C, dt instead
        self.widths = [d_model, d_model, n_groups * d_state, n_groups * d_state, n_heads]
        self.in_proj = nn.Linear(d_model, sum(self.widths), bias=False)
        self.gate = MambaGate(n_heads)
        self.D = nn.Parameter(torch.ones(n_heads))
        self.norm_weight = nn.Parameter(torch.ones(d_model))

    def per_head(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        """[B, T, groups * d] -> [B, H, T, d], each group's d channels given to its heads."""
        b, t, width = x.shape
        x = x.view(b, t, groups, 1, width // groups).permute(0, 2, 3, 1, 4)  # [B, G, 1, T, d]
        heads = x.expand(b, groups, self.n_heads // groups, t, width // groups)
        return heads.reshape(b, self.n_heads, t, width // groups)

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q = C, k = dt B: [B, H, T, d_state]; v = x: [B, H, T, head_dim]; log a: [B, H, T];
        all in float32 or wider; and z [B, T, d_model] (the output gate) in x's dtype."""
        z, value, key, query, u = self.in_proj(x).split(self.widths, -1)
        dt, log_gate = self.gate(u)
        with autocast_off(x):
            value, key, query = at_least_fp32(value, key, query)
            k = self.per_head(key, self.n_groups) * dt[..., None]
            q = self.per_head(query, self.n_groups)
            v = self.per_head(value, self.n_heads)
        return q, k, v, log_gate, z

    def output(self, o: torch.Tensor, v: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """W_o RMSNorm((o + D v) * swish(z)): o, v [B, H, T, head_dim], z [B, T, d_model]."""
        b, h, t, p = o.shape
        with autocast_off(o):
            y = o + self.D.to(o.dtype)[:, None, None] * v
            y = y.transpose(1, 2).reshape(b, t, h * p) * F.silu(z.to(o.dtype))
            y = y.view(b, t, self.n_groups, -1)
            y = F.rms_norm(y, y.shape[-1:], eps=1e-5).view(b, t, h * p)
            y = y * self.norm_weight.to(o.dtype)
        return self.out(y.to(z.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, log_gate, z = self.projections(x)
        with autocast_off(x):
            o = gated_linear_attention(
                q, k, v, log_gate, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(o, v, z)

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.d_state * self.head_dim

    def rank_bound(self, seq_len: int) -> int:
        """H * d_state: per head S = sum_t (gates) dt_t B_t x_t^T has rank <= d_state, the
        key (B) dimension (docs/background.md, section 17). Heads of one group share B; the
        bound counts each head's d_state all the same (it is an upper bound either way)."""
        return self.n_heads * self.d_state

    def init_state(self, batch_size: int) -> State:
        kw = self._state_kwargs()
        return (torch.zeros(batch_size, self.n_heads, self.d_state, self.head_dim, **kw),)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, log_gate, z = self.projections(x[:, None])
        with autocast_off(x):
            o, S = gated_linear_attention(
                q, k, v, log_gate, mode="recurrent", initial_state=state[0], return_state=True
            )
        return self.output(o, v, z)[:, 0], (S,)
