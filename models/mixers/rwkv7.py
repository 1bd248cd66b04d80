"""RWKV-7 "Goose" (Peng et al. 2025): RWKV whose state follows a generalised delta rule, built
as fla's `fla/layers/rwkv7.py` (docs/background.md, "The gated DPLR rule")."""

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_int
from models.kernels import check_mode
from models.kernels.dplr import gated_dplr
from models.mixers.base import Mixer, State
from models.mixers.rwkv import token_shift
from models.precision import at_least_fp32, autocast_off
from models.registry import register

MIN_LOG_DECAY = -math.exp(-0.5)
"""log w_t = MIN_LOG_DECAY * sigmoid(.) in (-0.6065, 0): a channel keeps at least
exp(-e^{-1/2}) = 0.545 of its state per step. The chunk form is given it as its bound on
every log-gate (`gated_dplr`'s `min_log_gate`)."""


def low_rank_default(d_model: int, head_k_dim: int, scale: float, by_head: bool) -> int:
    """fla's default rank of a LoRA: max(32, scale sqrt(d_model) rounded to a multiple of 32),
    scale times head_dim / 64 for the decay, a and value LoRAs (`by_head`)."""
    factor = head_k_dim / 64 if by_head else 1.0
    return max(32, int(round(scale * d_model**0.5 * factor / 32) * 32))


class LoRA(nn.Module):
    """x -> W_2 act(W_1 x) + b (fla's `LoRA`, same parameter names: `lora.0`, `lora.2`):
    W_1 zero and W_2 orthogonal times 0.1 at construction, as fla draws them."""

    def __init__(
        self, d_in: int, d_out: int, rank: int, activation: nn.Module, bias: bool = True
    ) -> None:
        super().__init__()
        self.lora = nn.Sequential(
            nn.Linear(d_in, rank, bias=False), activation, nn.Linear(rank, d_out, bias=bias)
        )
        with torch.no_grad():
            nn.init.zeros_(self.lora[0].weight)
            gain = math.sqrt(rank / d_out) if rank > d_out else 1.0
            nn.init.orthogonal_(self.lora[2].weight, gain=0.1 * gain)
            if bias:
                nn.init.zeros_(self.lora[2].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lora(x)


@register("rwkv7")
class RWKV7(Mixer):
    """RWKV-7's time mixing, per head h with d_k = `head_k_dim` and d_v = d_model / n_heads:

        x^c_t = x_t + (x_{t-1} - x_t) * mu_c      for c in r, w, k, v, a, g  (token shift)
        r, k, v = W_r x^r, W_k x^k, W_v x^v
        log w_t = -e^{-1/2} sigmoid(lora_w(x^w)),   alpha_t = sigmoid(lora_a(x^a))
        kk_t = normalize_h(k_t * k_k),   k_t <- k_t (1 + (alpha_t - 1) k_a)
        S_t = (diag(w_t) - (alpha_t * kk_t) kk_t^T) S_{t-1} + k_t v_t^T,   o_t = S_t^T r_t
        y_t = W_o ((GroupNorm_h(o_t) + (r_t . (k_t * r_k_h)) v_t) * lora_g(x^g))

    The state (d_k x d_v per head, rows by key dimension) first loses a share alpha of what it
    holds at the unit key kk, per channel, while every key dimension decays by its own w_t,
    then k v^T is written: fla's `S_t = S_{t-1} (diag(w_t) - kk (alpha * kk)^T) + v_t k_t^T`
    in its value-by-key layout. It is the gated DPLR rule with a = alpha * kk, b = -kk
    (`models.kernels.dplr.gated_dplr`). The bonus (r . (k * r_k)) v_t reads the current
    token's own value.

    As fla builds it: one token shift feeding six learned mixes, the LoRAs (tanh in the decay
    LoRA, none in a's, a sigmoid between the two matrices of the output gate's, which has no
    bias; ranks `decay_low_rank_dim`, `a_low_rank_dim`, `gate_low_rank_dim`, None: fla's
    formula, 32 at d_model <= 163), kk normalised by `F.normalize` (fla's unfused path), the
    group norm per head with eps 1e-5 d_v and an affine gain and bias, q = r unscaled. The
    initialisation is fla's for a first layer (`layer_idx` 0): mixes 1 - (n / C)^p, k_k =
    0.71 - 0.1 l, k_a = 1.02, r_k = -0.04, the decay LoRA's bias -6 + 6 (n / (K - 1)) + 0.5
    + 2.5 z and a's -0.19 + 0.3 z + 0.4 l (l a ramp in [-0.5, 0.5], z a per-head zigzag),
    W_r, W_v orthogonal, W_k orthogonal times 0.1.

    fla's weights map onto these by the same names (x_r ... x_g flattened from [1, 1, C];
    w_lora, a_lora, g_lora, r_proj, k_proj, v_proj, o_proj, g_norm, k_k, k_a, r_k).

    Deliberate differences from fla, with reasons:
    - No value residual. fla's layers after the first mix their values towards the first
      layer's (`v_first`, a `v_lora` gate). A mixer here sees only its own layer's input (one
      mixer per block, `step(x, state)` per layer), so every layer is built as fla's first
      layer, which has no `v_lora`; carrying v_first would need the backbone to pass a second
      stream between blocks.
    - W_o keeps PyTorch's initialisation, not fla's zeros: with W_o = 0 the layer's output is
      identically 0 at construction (what the zoo's causality and mode tests compare), and
      the residual stream then starts without this mixer.
    - The group norm's gain starts at 1, not fla's ((layer_idx + 1) / n_layers)^0.7, which
      depends on the depth of a stack the mixer does not know; its eps is 1e-5 d_v (fla:
      1e-5 times the head dim, the same number when d_k = d_v).
    - The key dimension `head_k_dim` may differ from d_v (the state knob); fla ties both to
      `head_dim`. The value LoRA, `fuse_norm` and the bf16 fused kernels are left out.
    - The block's shared short convolution stays on (`owns_short_conv` False), as for `rwkv`:
      fla's RWKV-7 has no convolution of its own.

    `head_k_dim` is the state knob (`state_knob`): rank_bound H d_k (docs/background.md, "The
    gated DPLR rule"). State per layer: H d_k d_v floats plus the previous input of d_model
    floats (the token shift's window, conv state, `conv_state_size`). Decays, norms and the
    recurrence run in float32 (`models.precision`)."""

    state_knob = "head_k_dim"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        head_k_dim: int | None = None,
        decay_low_rank_dim: int | None = None,
        a_low_rank_dim: int | None = None,
        gate_low_rank_dim: int | None = None,
        mode: str = "chunk",
        chunk_size: int = 16,
    ) -> None:
        super().__init__()
        require_int("d_model", d_model, 1)
        require_int("n_heads", n_heads, 1)
        require(d_model % n_heads == 0, "n_heads", n_heads, f"a divisor of d_model={d_model}")
        check_mode(mode, chunk_size)
        dk = d_model // n_heads if head_k_dim is None else head_k_dim
        require_int("head_k_dim", dk, 1)
        ranks = {
            "decay_low_rank_dim": (decay_low_rank_dim, 2.5, True),
            "a_low_rank_dim": (a_low_rank_dim, 2.5, True),
            "gate_low_rank_dim": (gate_low_rank_dim, 5.0, False),
        }
        rank = {}
        for name, (value, scale, by_head) in ranks.items():
            rank[name] = low_rank_default(d_model, dk, scale, by_head) if value is None else value
            require_int(name, rank[name], 1)
        self.d_model, self.n_heads, self.head_k_dim = d_model, n_heads, dk
        self.head_v_dim = d_model // n_heads
        self.mode, self.chunk_size = mode, chunk_size
        key_width, value_width = n_heads * dk, d_model
        self.key_width = key_width

        C, K = d_model, key_width
        n_c = torch.arange(C, dtype=torch.get_default_dtype())
        ddd = n_c / C
        for name, power in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7)):
            setattr(self, name, nn.Parameter(1.0 - ddd**power))
        self.x_a = nn.Parameter(1.0 - ddd**0.9)
        self.x_g = nn.Parameter(1.0 - ddd**0.2)
        n_k = torch.arange(K, dtype=torch.get_default_dtype())
        linear = n_k / max(K - 1, 1) - 0.5
        half = (dk - 1) / 2
        zigzag = ((n_k % dk) - half) / half if dk > 1 else torch.zeros(K)
        zigzag = zigzag * zigzag.abs()
        www = -6 + 6 * (n_k / max(K - 1, 1))
        self.k_k = nn.Parameter(0.71 - linear * 0.1)
        self.k_a = nn.Parameter(torch.full((K,), 1.02))
        self.r_k = nn.Parameter(torch.full((n_heads, dk), -0.04))

        self.r_proj = nn.Linear(d_model, K, bias=False)
        self.k_proj = nn.Linear(d_model, K, bias=False)
        self.v_proj = nn.Linear(d_model, value_width, bias=False)
        self.o_proj = nn.Linear(value_width, d_model, bias=False)
        with torch.no_grad():
            nn.init.orthogonal_(self.r_proj.weight)
            nn.init.orthogonal_(self.k_proj.weight, gain=0.1)
            nn.init.orthogonal_(self.v_proj.weight)
        self.w_lora = LoRA(d_model, K, rank["decay_low_rank_dim"], nn.Tanh())
        self.a_lora = LoRA(d_model, K, rank["a_low_rank_dim"], nn.Identity())
        self.g_lora = LoRA(d_model, value_width, rank["gate_low_rank_dim"], nn.Sigmoid(), False)
        with torch.no_grad():
            self.w_lora.lora[2].bias.copy_(www + 0.5 + zigzag * 2.5)
            self.a_lora.lora[2].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        self.g_norm = nn.GroupNorm(n_heads, value_width, eps=self.head_v_dim * 1e-5)

    def no_weight_decay(self) -> set[str]:
        """The token-shift mixes and the key's per-channel scales (r_k is 2-D, so the
        matrices' rule alone would decay it)."""
        return {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "k_k", "k_a", "r_k"}

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H * d] -> [B, H, T, d], contiguous."""
        b, t, width = x.shape
        return x.view(b, t, self.n_heads, width // self.n_heads).transpose(1, 2).contiguous()

    def projections(self, x: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """From x_t and x_{t-1} [B, T, d_model]: the kernel's inputs r, k, v, a = alpha * kk,
        b = -kk, log w ([B, H, T, d], float32 or wider) and the output gate's g
        [B, T, d_model]."""
        delta = prev - x
        xr, xw, xk, xv, xa, xg = (
            torch.addcmul(x, delta, mu.to(x.dtype))
            for mu in (self.x_r, self.x_w, self.x_k, self.x_v, self.x_a, self.x_g)
        )
        r, k, v = self.r_proj(xr), self.k_proj(xk), self.v_proj(xv)
        w_logit, a_logit, g = self.w_lora(xw), self.a_lora(xa), self.g_lora(xg)
        with autocast_off(x):
            r, k, v, w_logit, a_logit, k_k, k_a = at_least_fp32(
                r, k, v, w_logit, a_logit, self.k_k, self.k_a
            )
            log_w = MIN_LOG_DECAY * torch.sigmoid(w_logit)
            alpha = torch.sigmoid(a_logit)
            kk = F.normalize(self.heads(k * k_k), dim=-1)
            k = k.addcmul(k * (alpha - 1), k_a)
            r, k, v, alpha, log_w = (self.heads(t) for t in (r, k, v, alpha, log_w))
            return r, k, v, alpha * kk, -kk, log_w, g

    def output(self, r, k, v, o, g) -> torch.Tensor:
        """W_o ((GroupNorm_h(o) + (r . (k * r_k)) v) * g): r, k [B, H, T, d_k], v, o
        [B, H, T, d_v], g [B, T, d_model]."""
        b, h, t, dv = o.shape
        with autocast_off(o):
            weight, bias, r_k = at_least_fp32(self.g_norm.weight, self.g_norm.bias, self.r_k)
            flat = o.transpose(1, 2).reshape(b * t, h * dv)
            normed = F.group_norm(flat, h, weight, bias, self.g_norm.eps).view(b, t, h, dv)
            bonus = (r * k * r_k[:, None]).sum(-1, keepdim=True) * v  # [B, H, T, d_v]
            mixed = (normed + bonus.transpose(1, 2)).reshape(b, t, h * dv)
        return self.o_proj(mixed.to(g.dtype) * g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, k, v, a, b, log_w, g = self.projections(x, token_shift(x))
        with autocast_off(x):
            kernel = partial(gated_dplr, mode=self.mode, chunk_size=self.chunk_size)
            o = kernel(r, k, v, a, b, log_w, min_log_gate=MIN_LOG_DECAY)
        return self.output(r, k, v, o, g)

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.head_k_dim * self.head_v_dim + self.conv_state_size()

    def conv_state_size(self) -> int:
        """The token shift's window: the previous input, d_model floats."""
        return self.d_model

    def rank_bound(self, seq_len: int) -> int:
        """H d_k: every transition diag(w) + a b^T acts on the key side and never reads a
        value, so the state is a sum of d_k-dimensional key vectors times values; the bonus
        reads only the current token and the token shift holds one previous input
        (docs/background.md, "The gated DPLR rule")."""
        return self.n_heads * self.head_k_dim

    def init_state(self, batch_size: int) -> State:
        """(S [B, H, d_k, d_v] in float32 or wider, x_{t-1} [B, d_model])."""
        shape = (batch_size, self.n_heads, self.head_k_dim, self.head_v_dim)
        S = torch.zeros(shape, **self._state_kwargs())
        return S, torch.zeros(batch_size, self.d_model, **self._tensor_kwargs())

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        S, prev = state
        r, k, v, a, b, log_w, g = self.projections(x[:, None], prev[:, None].to(x.dtype))
        with autocast_off(x):
            o, S = gated_dplr(
                r, k, v, a, b, log_w, mode="recurrent", initial_state=S, return_state=True
            )
        return self.output(r, k, v, o, g)[:, 0], (S, x.to(prev.dtype))
