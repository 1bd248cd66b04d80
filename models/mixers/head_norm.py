"""The norms of the fla layers: the per-head output norm (DeltaNet, Gated DeltaNet, GLA): RMSNorm
of each head's output, optionally gated (docs/background.md, section 16); and the L2 norm of
the delta rule's queries and keys (`l2norm`)."""

import torch
import torch.nn.functional as F
from torch import nn

from models.precision import autocast_off


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(|x|^2 + eps) over the last dimension, eps = 1e-6 under the root: fla's `l2norm`
    (`fla/modules/l2norm.py`), with which fla's delta-rule layers normalise q and k. Not
    `F.normalize`'s x / max(|x|, 1e-12): the two differ by a relative eps / (2 |x|^2) at
    |x|^2 >> eps (1e-6 at unit norm, 1e-4 at 0.1), and near |x|^2 = eps fla's output has norm
    about 1 / sqrt(2), shrinking to |x| / sqrt(eps) -> 0 at x -> 0, where `F.normalize`'s stays
    at 1 down to |x| = 1e-12. Used by `deltanet`, `gated_deltanet`, `kda` and
    `gated_deltaproduct`."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


class HeadRMSNorm(nn.Module):
    """y = RMSNorm(o_h) * w, or with a gate y = RMSNorm(o_h) * w * swish(g): each head's output
    normalised per token over its d channels (one gain vector w of d shared by the heads), then
    gated elementwise by swish of a projection of the layer input (fla's `RMSNorm` and
    `FusedRMSNormGated`). The norm runs in float32 or wider (`models.precision`)."""

    def __init__(self, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, o: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        """o [B, H, T, d] (float32 or wider), gate None or [B, T, H * d] (the output gate's
        pre-activation) -> [B, T, H * d], in o's dtype without a gate, else in the gate's."""
        b, h, t, d = o.shape
        with autocast_off(o):
            normed = F.rms_norm(o, (d,), self.weight.to(o.dtype), self.eps)
        normed = normed.transpose(1, 2).reshape(b, t, h * d)
        if gate is None:
            return normed
        return normed.to(gate.dtype) * F.silu(gate)
