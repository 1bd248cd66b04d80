"""What the approximation studies compare against, in float64: random queries and keys of a
given norm, the exact softmax kernel and causal attention (eq. 1), linear attention's outputs
(eq. 9) through the repository's chunk kernel, FAVOR+ features as eq. 7 writes them, and the
feature maps under study."""

import math

import torch

from models.feature_maps import FavorFeatureMap, build_feature_map
from models.kernels import linear_attention

HEAD_DIM = 32  # the head dimension d of every study


def random_qkv(norm: float, num_seqs: int, T: int, d: int, seed: int) -> tuple:
    """q, k: random directions with |x'| = norm; v ~ N(0, 1); each [num_seqs, T, d], fp64."""
    g = torch.Generator().manual_seed(seed)

    def directions() -> torch.Tensor:
        x = torch.randn(num_seqs, T, d, generator=g, dtype=torch.float64)
        return x / x.norm(dim=-1, keepdim=True) * norm * d**0.25

    return directions(), directions(), torch.randn(num_seqs, T, d, generator=g, dtype=torch.float64)


def study_feature_map(name: str, D: int | None, seed: int) -> torch.nn.Module:
    """Feature map `name` for head dim HEAD_DIM with D features, drawn from seed `seed`;
    `favor_iid` is FAVOR+ with independent (not orthogonal) directions."""
    torch.manual_seed(seed)
    if name == "favor_iid":
        return build_feature_map("favor", HEAD_DIM, D, orthogonal=False)
    return build_feature_map(name, HEAD_DIM, D)


def favor_raw(fmap: FavorFeatureMap, x: torch.Tensor) -> torch.Tensor:
    """Eq. 7 exactly as written, no stabiliser: exp(w_i^T x' - |x'|^2/2) / sqrt(D)."""
    return torch.exp(fmap.logits(x)) / math.sqrt(fmap.out_dim)


def causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()


def exact_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """kappa(q, k) = exp(q^T k / sqrt(d)) for every pair: [..., T, T]."""
    return torch.exp(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention (eq. 1)."""
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(
        ~causal(q.shape[-2]), float("-inf")
    )
    return scores.softmax(-1) @ v


def linear_outputs(
    fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, eps: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 9 through the repository's chunk kernel: (outputs, denominators phi(q)^T z).
    The denominator rides along as an extra value column of ones, unnormalised; the output is
    then numerator / (denominator + eps), exactly the kernel's own normalisation."""
    ones = torch.ones_like(v[..., :1])
    raw = linear_attention(fq[None], fk[None], torch.cat([v, ones], -1)[None], normalize=False)
    num, den = raw[0, ..., :-1], raw[0, ..., -1:]
    return num / (den + eps), den


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||_F / ||b||_F."""
    return float((a - b).norm() / b.norm())
