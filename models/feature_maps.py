"""Feature maps phi: R^d -> R^D for linear attention (docs/background.md, section 3).

Each map is an `nn.Module` applied to the last dim of `[..., d]` and reports `out_dim`, the
number of features it really produces (the D in the state size D x d_v + D).
Random projections are drawn from the torch RNG at construction (`torch.manual_seed` fixes them).
Features are computed and returned in float32 or wider, also for bf16 / fp16 inputs and under
autocast (`models.precision`): the kernel that consumes them runs in float32.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_choice, require_int
from models.kernels import taylor_features
from models.precision import autocast_off, wide_dtype

FEATURE_MAPS = ("elu", "identity", "rff", "favor", "taylor")


class EluFeatureMap(nn.Module):
    """phi(x) = elu(x) + 1 (eq. 5): positive, but not an approximation of softmax."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.out_dim = head_dim

    def forward(self, x: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        return F.elu(x.to(wide_dtype(x.dtype))).add_(1)  # elu's backward reads x, not its output


class IdentityFeatureMap(nn.Module):
    """phi(x) = x (Exercise 2): linear attention becomes a linear layer; weights can be negative."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.out_dim = head_dim

    def forward(self, x: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        return x.to(wide_dtype(x.dtype))


def gaussian_directions(num: int, dim: int, orthogonal: bool, generator=None) -> torch.Tensor:
    """`num` rows omega_i ~ N(0, I_dim); orthogonal: blocks of orthogonal rows, each rescaled
    by the norm of an independent Gaussian vector so every row is still marginally N(0, I).

    Each block is a Haar-uniform orthogonal matrix: the Q of a Gaussian matrix's QR with its
    columns' signs fixed by sign(diag(R)). `torch.linalg.qr` alone returns a Q whose signs are
    tied to the input (its R has a fixed sign pattern), so its rows are not uniform on the
    sphere and the estimator of eq. 7 is biased (up to +-5% at |q' + k'| = 2, depending on the
    direction, a bias that does not shrink with D); with the correction each row is uniform
    and the rows of a block are exactly orthogonal."""
    if not orthogonal:
        return torch.randn(num, dim, generator=generator)
    blocks = []
    for _ in range(math.ceil(num / dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator))
        q = q * torch.sign(torch.diagonal(r))  # column j times sign(R_jj): Haar-uniform Q
        blocks.append(q.T)
    rows = torch.cat(blocks)[:num]
    norms = torch.randn(num, dim, generator=generator).norm(dim=1, keepdim=True)
    return rows * norms


class RandomFeatureMap(nn.Module):
    """Shared part of `rff` and `favor`: a buffer of random directions omega, with redraws.

    `redraw(step)` draws new omegas from a generator seeded by (seed, step), where `seed` was
    drawn from the torch RNG at construction, so a redraw schedule is reproducible.
    """

    def __init__(self, head_dim: int, num_directions: int, orthogonal: bool) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.orthogonal = orthogonal
        self.seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self.register_buffer("omega", self._draw(num_directions, 0))

    def _draw(self, num: int, step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed + 1_000_003 * step)
        return gaussian_directions(num, self.head_dim, self.orthogonal, generator)

    def redraw(self, step: int) -> None:
        self.omega.copy_(self._draw(self.omega.shape[0], step))


class RffFeatureMap(RandomFeatureMap):
    """Random Fourier features (eq. 6): phi(x) = [cos(w_i^T x), sin(w_i^T x)]_i / sqrt(D/2).

    E[phi(q)^T phi(k)] = exp(-|q - k|^2 / 2): the Gaussian kernel, not softmax's. With x scaled
    by d^(-1/4), exp(-|q-k|^2/2) = exp(q^T k/sqrt(d)) exp(-|q|^2/2) exp(-|k|^2/2).
    Features can be negative (pitfall 2): nothing here clamps them.
    """

    def __init__(self, head_dim: int, feature_dim: int, orthogonal: bool = True) -> None:
        require(feature_dim % 2 == 0, "feature_dim", feature_dim, "even for rff (cos and sin)")
        super().__init__(head_dim, feature_dim // 2, orthogonal)
        self.out_dim = feature_dim

    def forward(self, x: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        with autocast_off(x):
            x = x.to(wide_dtype(x.dtype))
            proj = x @ (self.omega.to(x.dtype).T * self.head_dim**-0.25)  # w_i^T x'
            features = torch.cat([proj.cos(), proj.sin()], dim=-1)
            return features.mul_(self.omega.shape[0] ** -0.5)  # cat's backward needs no output


class FavorFeatureMap(RandomFeatureMap):
    """FAVOR+ positive random features (eq. 7), an unbiased estimator of exp(q^T k / sqrt(d)):

        phi(x) = exp(w_i^T x' - |x'|^2 / 2 - c) / sqrt(D),   x' = x d^(-1/4).

    Computed and returned in fp32 (in fp16, key features of ~1e-10 would be 0). The
    stabiliser c never looks at other tokens, so future tokens cannot change causal outputs
    (performer-pytorch's key stabiliser takes a max over the whole sequence and does, its
    issue #82):
    - keys: c = max_i |w_i|^2 / 2, the analytic maximum of w_i^T x - |x|^2/2 over all x, so
      features are <= 1 / sqrt(D) and never overflow; the same c for every key cancels in the
      normalised output (the mixer scales eps by `key_scale`);
    - queries: c = the token's own max over features, which cancels in its own ratio (eq. 9).
    """

    def __init__(self, head_dim: int, feature_dim: int, orthogonal: bool = True) -> None:
        super().__init__(head_dim, feature_dim, orthogonal)
        self.out_dim = feature_dim

    def key_shift(self) -> torch.Tensor:
        return self.omega.pow(2).sum(dim=1).max() / 2

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The exponents of eq. 7 before any shift, w_i^T x' - |x'|^2 / 2, in float32 or wider
        with autocast off (`models.precision`); x' = x d^(-1/4) is folded into the products
        (w_i^T x' = (w_i d^(-1/4))^T x, |x'|^2 = |x|^2 d^(-1/2)), not applied to x."""
        with autocast_off(x):
            x = x.to(wide_dtype(x.dtype))
            scale = self.head_dim**-0.25
            square = torch.linalg.vecdot(x, x).unsqueeze(-1)
            return torch.addmm(
                square.flatten(0, -2) * (-0.5 * scale * scale),
                x.flatten(0, -2),
                self.omega.to(x.dtype).T * scale,
            ).unflatten(0, x.shape[:-1])

    def forward(self, x: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        """exp(logits - c) / sqrt(D), the 1/sqrt(D) taken inside the exponential (one pass)."""
        with autocast_off(x):
            logits = self.logits(x)
            if is_query:
                shift = logits.amax(dim=-1, keepdim=True).detach()
            else:
                shift = self.key_shift().to(logits.dtype)
            return torch.exp(logits - (shift + 0.5 * math.log(self.out_dim)))


class TaylorFeatureMap(nn.Module):
    """Second-order Taylor map (Based): phi(x) = [1, x', x' (x) x' / sqrt(2)], x' = x d^(-1/4),
    so phi(q)^T phi(k) = 1 + s + s^2/2 with s = q^T k / sqrt(d).
    It holds the full outer product: out_dim = 1 + d + d^2 (273 for d = 16). A mixer can also
    hand `scaled(x)` to `models.kernels.taylor_linear_attention`, which applies the same map
    but computes weights inside a chunk from s, without the D features."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.out_dim = 1 + head_dim + head_dim**2

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        """x' = x d^(-1/4), the input of the features."""
        return x * self.head_dim**-0.25

    def forward(self, x: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        return taylor_features(self.scaled(x.to(wide_dtype(x.dtype))))


def build_feature_map(
    name: str, head_dim: int, feature_dim: int | None = None, **kw: object
) -> nn.Module:
    """Build feature map `name` for inputs of size `head_dim`; `feature_dim` is the number of
    features for `rff` and `favor` (default: head_dim); the fixed-size maps (`elu`,
    `identity`, `taylor`) accept only None."""
    require_choice("feature_map", name, FEATURE_MAPS)
    require_int("head_dim", head_dim, 1)
    if name in ("rff", "favor"):
        feature_dim = head_dim if feature_dim is None else feature_dim
        require_int("feature_dim", feature_dim, 1)
        cls = RffFeatureMap if name == "rff" else FavorFeatureMap
        return cls(head_dim, feature_dim, **kw)
    require(feature_dim is None, "feature_dim", feature_dim, f"None for the {name} feature map")
    fixed = {"elu": EluFeatureMap, "identity": IdentityFeatureMap, "taylor": TaylorFeatureMap}
    return fixed[name](head_dim, **kw)
