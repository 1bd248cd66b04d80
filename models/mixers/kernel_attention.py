"""Kernelised linear attention (eq. 2-4, causal form eq. 8-9) with a pluggable feature map.

Registered entries differ only in the feature map: `linear` (a choice of positive maps:
ELU+1 by default, eq. 5; FAVOR+, eq. 7; Based's Taylor map), `favor` (FAVOR+ with its own
defaults), `identity` (Exercise 2), `rff` (eq. 6).
"""

import math

import torch
from torch import nn

from common.checks import require, require_choice, require_int
from models.feature_maps import TaylorFeatureMap, build_feature_map
from models.kernels import check_mode, linear_attention, taylor_linear_attention
from models.mixers.base import DenominatorCollapse, MultiHeadMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register

SIGNED_FEATURE_MAPS = ("rff", "identity")


def denominator_eps(feature_map: torch.nn.Module) -> float | torch.Tensor:
    """The eps of eq. 9's denominator: 1e-6. FAVOR+ shifts every key by a constant c, so S
    and z carry e^-c and its eps is scaled alike; it is also smaller (1e-12, floored within
    fp32's range): positive features need eps only against 0/0, and a larger one swamps the
    tiny kernel values of large-norm inputs. FAVOR+'s is a 0-d tensor computed from c on its
    device, so that no value leaves the graph (`torch.compile` would break it there)."""
    shift = getattr(feature_map, "key_shift", None)
    if shift is None:
        return 1e-6
    return (1e-12 * torch.exp(-shift())).clamp_min(1e-37)


class KernelAttention(MultiHeadMixer):
    """o_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps), S_t = S_{t-1} + phi(k_t) v_t^T,
    z_t = z_{t-1} + phi(k_t) (eq. 8-9). State per layer: H * (D * d_v + D) floats, D = the
    feature map's out_dim, independent of the sequence length.

    `qk_dim` (None = head_dim): q and k are projected to this many dimensions per head before
    phi (Based projects them to 16, so its Taylor map holds 1 + 16 + 16^2 = 273 features);
    `head_v_dim` (None = head_dim): v is projected to this many, d_v, and the output
    projection reads H d_v. The Taylor map is applied inside `taylor_linear_attention`, which never
    builds the D features within a chunk.
    `redraw_every` > 0 redraws random features every that many training forward passes."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        feature_map: str,
        feature_dim: int | None = None,
        qk_dim: int | None = None,
        normalize: bool = True,
        mode: str = "chunk",
        chunk_size: int = 64,
        redraw_every: int = 0,
        collapse_fraction: float = 1.0,
        head_v_dim: int | None = None,
        **feature_kw: object,
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        require_int("redraw_every", redraw_every, 0)
        if qk_dim is not None:
            require_int("qk_dim", qk_dim, 1)
        if head_v_dim is not None:
            require_int("head_v_dim", head_v_dim, 1)
        self.qk_dim = self.head_dim if qk_dim is None else qk_dim
        self.head_v_dim = self.head_dim if head_v_dim is None else head_v_dim
        self.separate_qk = qk_dim is not None or self.head_v_dim != self.head_dim
        if self.separate_qk:
            del self.qkv  # q, k of qk_dim and v of head_v_dim per head
            self.qk = nn.Linear(d_model, 2 * n_heads * self.qk_dim, bias=False)
            self.value = nn.Linear(d_model, n_heads * self.head_v_dim, bias=False)
        if self.head_v_dim != self.head_dim:  # the output reads H d_v, not d_model
            self.out = nn.Linear(n_heads * self.head_v_dim, d_model, bias=False)
        self.feature_map = build_feature_map(feature_map, self.qk_dim, feature_dim, **feature_kw)
        self.taylor = isinstance(self.feature_map, TaylorFeatureMap)
        self.normalize, self.mode, self.chunk_size = normalize, mode, chunk_size
        require(0 < collapse_fraction <= 1, "collapse_fraction", collapse_fraction, "in (0, 1]")
        self.collapse_fraction = collapse_fraction
        self.watch_denominator = normalize and feature_map in SIGNED_FEATURE_MAPS
        self.redraw_every = redraw_every
        self.register_buffer("train_calls", torch.zeros((), dtype=torch.long))

    @property
    def eps(self) -> float | torch.Tensor:
        return denominator_eps(self.feature_map)

    @property
    def feature_dim(self) -> int:
        return self.feature_map.out_dim

    def projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k: [B, H, T, qk_dim]; v: [B, H, T, head_v_dim]; contiguous (the feature maps and
        the chunk kernel would otherwise each copy them)."""
        if not self.separate_qk:
            return self.split_heads(x)
        b, t, _ = x.shape
        qk = self.qk(x).view(b, t, 2, self.n_heads, self.qk_dim).permute(2, 0, 3, 1, 4)
        return qk[0], qk[1], self.value(x).view(b, t, self.n_heads, -1).transpose(1, 2)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """phi(q), phi(k), v in float32 or wider (`models.precision`); for the Taylor map its
        scaled inputs q', k' instead, which `taylor_linear_attention` maps itself."""
        q, k, v = self.projections(x)
        with autocast_off(x):
            q, k, v = at_least_fp32(q, k, v)
            if self.taylor:
                return self.feature_map.scaled(q), self.feature_map.scaled(k), v
            return self.feature_map(q, is_query=True), self.feature_map(k), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object):
        """eq. 8-9 on the outputs of `features` (the Taylor map's own kernel for `taylor`)."""
        if self.taylor:
            return taylor_linear_attention(q, k, v, eps=self.eps, **kw)
        return linear_attention(q, k, v, normalize=self.normalize, eps=self.eps, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.redraw_every > 0:
            self.train_calls += 1
            if int(self.train_calls) % self.redraw_every == 0:
                self.feature_map.redraw(int(self.train_calls) // self.redraw_every)
        q, k, v = self.features(x)
        with autocast_off(x):
            if self.watch_denominator:  # eq. 9 by hand, its denominators checked first
                num, den = self.numerator_and_denominator(q, k, v)
                self.check_denominator(den)
                o = num / (den + self.eps)
            else:
                o = self.attend(q, k, v, mode=self.mode, chunk_size=self.chunk_size)
        return self.merge_heads(o.to(x.dtype))

    def numerator_and_denominator(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """phi(q_t)^T S_t and phi(q_t)^T z_t of eq. 9: the kernel without its normaliser on
        [v | 1], whose last column is the denominator, so that checking it costs no second
        pass over the sequence."""
        v_and_ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
        out = linear_attention(
            q, k, v_and_ones, normalize=False, mode=self.mode, chunk_size=self.chunk_size
        )
        return out.split([v.shape[-1], 1], -1)

    @torch.no_grad()
    def check_denominator(self, den: torch.Tensor) -> None:
        """With signed features the weights phi(q_t)^T phi(k_s) of eq. 9 need not sum to a
        positive number. Raise `DenominatorCollapse` when more than `collapse_fraction` of the
        denominators `den` = phi(q_t)^T z_t are <= 0 (or any is NaN): the output is then no
        longer an average of values at all. Nothing is ever clamped."""
        fraction = (den <= 0).float().mean().item()
        if not fraction <= self.collapse_fraction:  # also catches NaN
            raise DenominatorCollapse(
                f"{self.registry_name}: the denominator phi(q)^T z of eq. 9 collapsed: "
                f"{fraction:.0%} of them are <= 0 (signed features, pitfall 2)"
            )

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * (self.feature_dim * self.head_v_dim + self.feature_dim)

    def rank_bound(self, seq_len: int) -> int:
        """H * D: S = phi(K)^T V per head has rank <= D, the feature dimension; the
        normaliser z rescales each read-out and adds no rank (docs/background.md,
        section 17)."""
        return self.n_heads * self.feature_dim

    def init_state(self, batch_size: int) -> State:
        kw = self._state_kwargs()
        s = torch.zeros(batch_size, self.n_heads, self.feature_dim, self.head_v_dim, **kw)
        return s, torch.zeros(batch_size, self.n_heads, self.feature_dim, **kw)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        features = self.features(x[:, None])
        with autocast_off(x):
            o, new_state = self.attend(
                *features, mode="recurrent", initial_state=state, return_state=True
            )
        return self.merge_heads(o.to(x.dtype))[:, 0], new_state


LINEAR_FEATURE_MAPS = ("elu", "favor", "taylor")
"""The positive feature maps `linear` takes: nothing else in the architecture changes."""


def taylor_input_dim(feature_dim: int) -> int:
    """The q, k width d whose Taylor features number feature_dim = 1 + d + d^2; refused (one
    line naming the allowed values) when there is none."""
    d = round((math.sqrt(4 * feature_dim - 3) - 1) / 2) if feature_dim >= 1 else 0
    allowed = ", ".join(str(1 + i + i * i) for i in range(1, 10))
    require(
        d >= 1 and 1 + d + d * d == feature_dim,
        "feature_dim",
        feature_dim,
        f"1 + d + d^2 for the taylor map ({allowed}, ...)",
    )
    return d


@register("linear")
class LinearAttention(KernelAttention):
    """Normalised linear attention (eq. 8-9) with a positive feature map: `elu` (ELU+1,
    Katharopoulos et al. 2020, eq. 5; D = qk_dim), `favor` (FAVOR+, eq. 7; D random features
    of qk_dim inputs) or `taylor` (Based's map; D = 1 + qk_dim + qk_dim^2). Only the map
    changes between them, so a sweep over `model.feature_map` compares feature maps inside
    one architecture; `qk_dim` sets the width phi sees (None = head_dim).

    `feature_dim` is D, the state's feature dimension, for every map, so that a sweep over
    `model.feature_map` x `model.feature_dim` compares the maps at equal state (H (D d_v + D)
    floats): ELU+1 then projects q, k to D, Taylor to the d with 1 + d + d^2 = D (D = 7, 21,
    73 for d = 2, 4, 8), FAVOR+ draws D features (of head_dim inputs unless qk_dim is set).
    Setting both feature_dim and qk_dim is refused where they disagree. `feature_dim` is the
    state knob (`state_knob`: rank_bound H D). `head_v_dim` (None = d_model / n_heads) is the
    value knob (`value_knob`): d_v moves the floats, H (D d_v + D), at the same rank bound."""

    state_knob = "feature_dim"
    value_knob = "head_v_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        feature_map: str = "elu",
        feature_dim: int | None = None,
        qk_dim: int | None = None,
        head_v_dim: int | None = None,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        require_choice("feature_map", feature_map, LINEAR_FEATURE_MAPS)
        if feature_map != "favor" and feature_dim is not None:
            require_int("feature_dim", feature_dim, 1)
            implied = feature_dim if feature_map == "elu" else taylor_input_dim(feature_dim)
            require(
                qk_dim in (None, implied),
                "qk_dim",
                qk_dim,
                f"None or {implied}: feature_dim={feature_dim} sets it for the {feature_map} map",
            )
            qk_dim, feature_dim = implied, None
        super().__init__(
            d_model,
            n_heads,
            feature_map,
            feature_dim,
            qk_dim,
            mode=mode,
            chunk_size=chunk_size,
            head_v_dim=head_v_dim,
        )


@register("favor")
class FavorAttention(KernelAttention):
    """Performer's FAVOR+ (eq. 7): positive orthogonal random features estimating softmax.

    The defaults (64 features per head, no redraw) leave the headline run, `python run.py
    model=favor`, at the binding-free floor in its 1,200 steps (test accuracy 0.094 and 0.100
    against the in-context guess's 0.117); so do 16 and 256 features, a redraw every 100
    steps and the rate 1e-2 (docs/results/headline_pilot/). `conf/state_size/favor_d*` size
    its state."""

    state_knob = "feature_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        feature_dim: int = 64,
        orthogonal: bool = True,
        redraw_every: int = 0,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            "favor",
            feature_dim,
            mode=mode,
            chunk_size=chunk_size,
            redraw_every=redraw_every,
            orthogonal=orthogonal,
        )


@register("identity")
class IdentityAttention(KernelAttention):
    """phi(x) = x (Exercise 2): o_t = q_t^T S_t with S_t = sum_{s<=t} k_s v_s^T, a linear map
    of q_t. q^T z can be zero or negative, so the normaliser is off by default
    (`normalize=True` divides by it as eq. 9 does, and a collapse ends the run as for `rff`);
    D = head_dim."""

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        normalize: bool = False,
        collapse_fraction: float = 0.1,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            "identity",
            normalize=normalize,
            mode=mode,
            chunk_size=chunk_size,
            collapse_fraction=collapse_fraction,
        )


@register("rff")
class RffAttention(KernelAttention):
    """Random Fourier features (eq. 6), normalised as eq. 9. Its kernel is the Gaussian one,
    and sin/cos features make phi(q)^T z any sign: the denominator can vanish or go negative
    (pitfall 2). Nothing clamps it: once more than `collapse_fraction` of the denominators
    are <= 0 the forward raises `DenominatorCollapse` and the run ends as diverged."""

    state_knob = "feature_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        feature_dim: int = 64,
        orthogonal: bool = True,
        redraw_every: int = 0,
        collapse_fraction: float = 0.1,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            "rff",
            feature_dim,
            mode=mode,
            chunk_size=chunk_size,
            redraw_every=redraw_every,
            collapse_fraction=collapse_fraction,
            orthogonal=orthogonal,
        )
