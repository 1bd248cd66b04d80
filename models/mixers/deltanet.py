"""DeltaNet: linear attention whose state is corrected, not only added to (the delta rule)."""

import torch
import torch.nn.functional as F
from torch import nn

from models.kernels import check_mode, delta_rule
from models.mixers.base import MatrixStateMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("deltanet")
class DeltaNet(MatrixStateMixer):
    """Per head, with L2-normalised q_t, k_t and a write strength beta_t = sigmoid(w_beta^T x_t):

        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,   o_t = S_t^T q_t

    S_{t-1}^T k_t is what the memory returns for k_t; the update moves it towards v_t by
    beta_t, so writing a key again replaces its value (beta = 1: exactly) instead of summing
    values as eq. 8 does. Chunked (WY) form for training. State: H * head_dim^2 floats.
    Normalisation, beta and the delta rule run in float32 (`models.precision`; the chunk
    form's triangular solve has no bf16 kernel on CPU)."""

    def __init__(
        self, d_model: int, n_heads: int = 2, mode: str = "chunk", chunk_size: int = 64
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        self.mode, self.chunk_size = mode, chunk_size
        self.beta = nn.Linear(d_model, n_heads)

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k (unit norm per head), v: [B, H, T, head_dim]; beta: [B, H, T] in (0, 1); all
        in float32 or wider."""
        q, k, v = self.split_heads(x)
        beta_logit = self.beta(x).transpose(1, 2)
        with autocast_off(x):
            q, k, v, beta_logit = at_least_fp32(q, k, v, beta_logit)
            return F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, torch.sigmoid(beta_logit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projections = self.projections(x)
        with autocast_off(x):
            o = delta_rule(*projections, mode=self.mode, chunk_size=self.chunk_size)
        return self.merge_heads(o.to(x.dtype))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        projections = self.projections(x[:, None])
        with autocast_off(x):
            o, S = delta_rule(
                *projections, mode="recurrent", initial_state=state[0], return_state=True
            )
        return self.merge_heads(o.to(x.dtype))[:, 0], (S,)
