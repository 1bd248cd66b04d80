"""What the `train` section times: every mode of every kernel of `models.kernels` and every
registered mixer, each as a `Form` whose `make(T)` returns one forward+backward call."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from models import MIXERS, build_mixer
from models.kernels import (
    delta_rule,
    gated_delta_rule,
    gated_linear_attention,
    linear_attention,
    linear_attention_cumsum,
    rwkv4_wkv,
)
from models.kernels import softmax_attention as sdpa
from models.mixers.retnet import retnet_gammas
from studies.bench.settings import Settings

SOFTMAX_KERNEL = "softmax_sdpa"
CHUNK_KERNEL = "linear/chunk"
NAIVE_KERNEL = "linear/cumsum_naive"
MODE_EXPONENTS = {"chunk": (1, 1), "parallel": (2, 2), "recurrent": (1, 1)}  # (time, memory)

Call = Callable[[], None]


@dataclass
class Form:
    """One thing to time: `make(T)` returns a closure running one forward+backward."""

    group: str  # "kernel" or "mixer"
    name: str
    make: Callable[[int], Call]
    time_exp: float  # how its time grows with T (1 linear, 2 quadratic), for skip estimates
    mem_exp: float
    flops: Callable[[int], float] | None = None  # useful FLOPs of one forward+backward


def leaves(*xs: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    return [x.detach().to(device).requires_grad_() for x in xs]


def fwd_bwd(forward: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> Call:
    """One call: forward on `inputs`, backward of the sum of the output."""

    def call() -> None:
        for x in inputs:
            x.grad = None
        out = forward(*inputs)
        out.backward(torch.ones_like(out))

    return call


def chunk_flops(B: int, H: int, T: int, D: int, Dv: int, C: int) -> float:
    """Matmul FLOPs of chunk-mode linear attention, forward + backward (= 3 x forward: each
    matmul's backward is two matmuls of its size). Per block of length L: scores Q K^T
    (2 L^2 D), scores V (2 L^2 Dv), the block's state K^T V and the query-state product
    Q S (2 L D Dv each). Elementwise work (masking, cumsum, normalisation) is not counted."""
    total, full = 0.0, T // C * C
    for length, count in ((C, T // C), (T - full, 1 if full < T else 0)):
        total += count * 2 * (length * length * (D + Dv) + 2 * length * D * Dv)
    return 3.0 * B * H * total


def sdpa_flops(B: int, H: int, T: int, d: int) -> float:
    """Causal softmax attention: Q K^T and P V over the lower triangle, 2 * 2 T^2/2 d each
    head forward; forward + backward counted as 3 x forward, as for the chunk kernel."""
    return 3.0 * B * H * 2 * T * T * d


# ----------------------------------------------------------------------------- kernel calls


def qkv(s: Settings, T: int, positive: bool = False) -> list[torch.Tensor]:
    """q, k, v [B, H, T, d] drawn for length T; positive: elu + 1 (eq. 5), feature-mapped."""
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(s.batch, s.heads, T, s.head_dim, generator=g) for _ in range(3))
    if positive:
        q, k = F.elu(q) + 1, F.elu(k) + 1
    return leaves(q, k, v, device=s.device)


def softmax_call(s: Settings, T: int) -> Call:
    return fwd_bwd(sdpa, qkv(s, T))


def naive_call(s: Settings, T: int) -> Call:
    return fwd_bwd(linear_attention_cumsum, qkv(s, T, positive=True))


def linear_call(s: Settings, mode: str, T: int, decay: bool) -> Call:
    """linear_attention in `mode`; with RetNet's per-head decay if `decay`."""
    gammas = retnet_gammas(s.heads).float().to(s.device) if decay else None
    attend = partial(linear_attention, decay=gammas, mode=mode, chunk_size=s.chunk_size)
    return fwd_bwd(attend, qkv(s, T, positive=True))


def wkv_call(s: Settings, mode: str, T: int) -> Call:
    g, channels = torch.Generator().manual_seed(T), s.heads * s.head_dim
    w, u = torch.rand(channels, generator=g), 0.1 * torch.randn(channels, generator=g)
    k, v = (torch.randn(s.batch, T, channels, generator=g) for _ in range(2))
    attend = partial(rwkv4_wkv, mode=mode, chunk_size=s.chunk_size)
    return fwd_bwd(attend, leaves(w, u, k, v, device=s.device))


def delta_inputs(s: Settings, T: int, g: torch.Generator) -> list[torch.Tensor]:
    """q, L2-normalised k, v [B, H, T, d] and beta [B, H, T] in (0, 1)."""
    q, k, v = (torch.randn(s.batch, s.heads, T, s.head_dim, generator=g) for _ in range(3))
    beta = torch.sigmoid(torch.randn(s.batch, s.heads, T, generator=g))
    return [q, F.normalize(k, dim=-1), v, beta]


def delta_call(s: Settings, mode: str, T: int) -> Call:
    attend = partial(delta_rule, mode=mode, chunk_size=s.chunk_size)
    return fwd_bwd(
        attend, leaves(*delta_inputs(s, T, torch.Generator().manual_seed(T)), device=s.device)
    )


def log_gates(s: Settings, T: int, g: torch.Generator, per_dim: bool) -> torch.Tensor:
    """log a_t = logsigmoid(x + 3) <= 0 (gates near 0.95): [B, H, T, d] or [B, H, T]."""
    shape = (s.batch, s.heads, T, *([s.head_dim] if per_dim else []))
    return F.logsigmoid(torch.randn(*shape, generator=g) + 3)


def gla_inputs(s: Settings, T: int, per_dim: bool) -> list[torch.Tensor]:
    """q, k, v and the log-gates of `gated_linear_attention`, as leaves drawn for length T."""
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(s.batch, s.heads, T, s.head_dim, generator=g) for _ in range(3))
    return leaves(q, k, v, log_gates(s, T, g, per_dim), device=s.device)


def gated_delta_inputs(s: Settings, T: int) -> list[torch.Tensor]:
    """q, k, v, beta and the per-head log-gates of `gated_delta_rule`, as leaves."""
    g = torch.Generator().manual_seed(T)
    inputs = [*delta_inputs(s, T, g), log_gates(s, T, g, per_dim=False)]
    return leaves(*inputs, device=s.device)


def gla_call(s: Settings, mode: str, T: int, per_dim: bool) -> Call:
    """gated_linear_attention in `mode`, a gate per key dimension (GLA) or per head (Mamba-2)."""
    attend = partial(gated_linear_attention, mode=mode, chunk_size=s.chunk_size)
    return fwd_bwd(attend, gla_inputs(s, T, per_dim))


def gated_delta_call(s: Settings, mode: str, T: int) -> Call:
    attend = partial(gated_delta_rule, mode=mode, chunk_size=s.chunk_size)
    return fwd_bwd(attend, gated_delta_inputs(s, T))


def kernel_forms(s: Settings) -> list[Form]:
    """Every mode of every kernel, on inputs of the benchmark's shape."""
    B, H, d, C = s.batch, s.heads, s.head_dim, s.chunk_size

    def chunk_gflop(T: int) -> float:
        return chunk_flops(B, H, T, d, d, C)

    def sdpa_gflop(T: int) -> float:
        return sdpa_flops(B, H, T, d)

    linear, decayed = partial(linear_call, s, decay=False), partial(linear_call, s, decay=True)
    gla, scalar = partial(gla_call, s, per_dim=True), partial(gla_call, s, per_dim=False)
    forms = [
        Form("kernel", SOFTMAX_KERNEL, partial(softmax_call, s), 2, 1, sdpa_gflop),
        Form("kernel", CHUNK_KERNEL, partial(linear, "chunk"), 1, 1, chunk_gflop),
        Form("kernel", "linear/parallel", partial(linear, "parallel"), 2, 2),
        Form("kernel", "linear/recurrent", partial(linear, "recurrent"), 1, 1),
        Form("kernel", NAIVE_KERNEL, partial(naive_call, s), 1, 1),
        Form("kernel", "linear+decay/chunk", partial(decayed, "chunk"), 1, 1, chunk_gflop),
    ]
    for mode, exponents in MODE_EXPONENTS.items():
        forms.append(Form("kernel", f"rwkv4_wkv/{mode}", partial(wkv_call, s, mode), *exponents))
        forms.append(Form("kernel", f"delta_rule/{mode}", partial(delta_call, s, mode), *exponents))
        forms.append(Form("kernel", f"gla/{mode}", partial(gla, mode), *exponents))
        forms.append(Form("kernel", f"gla_scalar/{mode}", partial(scalar, mode), *exponents))
        make = partial(gated_delta_call, s, mode)
        forms.append(Form("kernel", f"gated_delta_rule/{mode}", make, *exponents))
    return forms


# ----------------------------------------------------------------------------- mixers


def make_mixer(name: str, s: Settings) -> torch.nn.Module:
    """Registered mixer `name` with its defaults, d_model = heads x head_dim."""
    params = {"n_heads": s.heads} if "n_heads" in MIXERS.parameters(name) else {}
    torch.manual_seed(0)
    return build_mixer(name, d_model=s.d_model, **params).to(s.device)


def mixer_call(s: Settings, name: str, T: int) -> Call:
    mixer = make_mixer(name, s).train()
    x = torch.randn(s.batch, T, s.d_model, generator=torch.Generator().manual_seed(T))
    inner = fwd_bwd(mixer, leaves(x, device=s.device))

    def call() -> None:
        mixer.zero_grad(set_to_none=True)
        inner()

    return call


def mixer_forms(s: Settings) -> list[Form]:
    """Every registered mixer (quadratic estimates for those whose state grows with T)."""
    forms = []
    for name in MIXERS.names():
        exponent = 2 if getattr(MIXERS.get(name), "grows_with_seq_len", False) else 1
        forms.append(Form("mixer", name, partial(mixer_call, s, name), exponent, exponent))
    return forms
