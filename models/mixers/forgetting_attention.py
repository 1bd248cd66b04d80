"""The Forgetting Transformer's attention (FoX; Lin et al. 2025): softmax attention with a
forget gate per head, built as fla's `fla/layers/forgetting_attn.py` (docs/background.md,
"The Forgetting Transformer")."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require
from models.kernels import check_mode
from models.kernels.forgetting import forgetting_attention, forgetting_step
from models.mixers.base import MultiHeadMixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


@register("forgetting_attention")
class ForgettingAttention(MultiHeadMixer):
    """Per head h, with d = d_model / n_heads:

        q_t, k_t, v_t = W_{q,k,v} x_t,   log f_t = logsigmoid(w_f^T x_t + b_f)     (one per head)
        o_t = sum_{s<=t} softmax_s(q_t^T k_s / sqrt(d) + sum_{r=s+1..t} log f_r) v_s
        y_t = W_o o_t          (W_o (sigmoid(W_g x_t) * o_t) with `use_output_gate`)

    A forget gate f_t < 1 multiplies the weight of every earlier key by f_t for every later
    query: softmax attention with a learned, data-dependent recency bias. With f = 1 it is
    `softmax`.

    As fla builds it, at its defaults: q, k, v bias-free projections of the layer input, no
    short convolution of its own (the block's shared one is used, as for `softmax`); the
    forget gate a projection with a bias per head, logsigmoid in float32; no output gate and
    no q/k norm by default (`use_output_gate`: a bias-free sigmoid gate on o; `qk_norm`: an
    RMSNorm over each head's q and k, eps 1e-5, with a gain per channel: fla's `GroupNorm`
    with `is_rms_norm`). Deliberate differences from fla: no grouped key-value heads
    (`num_kv_heads`), no `qkv_bias` and no `window_size` (`sliding_window` is the windowed
    mixer), all off by default there; Linear layers keep PyTorch's initialisation (fla's
    models redraw them N(0, 0.02)), except the forget gate's bias: every b_f starts at
    `forget_bias` = 5, f_t near 0.993 (a key 100 tokens back down by about e^-0.7), a long
    initial decay time as the FoX authors' code offers (`fgate_bias_init`, off there and
    absent in fla). With fla's b_f = 0 (or PyTorch's small draw, `forget_bias=None`) f_t
    starts near 1/2, a key 10 tokens back down by about e^-7: attention is local before any
    lookup can form, and MQAR was not learned from there within the headline preset's budget.

    State: a KV cache, as `softmax`'s, plus one log-forget sum per head and cached token:
    T (2 d_model + H) floats per layer, growing with the sequence (`grows_with_seq_len`);
    rank_bound T, the tokens the cache keeps (docs/background.md, section 17). No state
    knob. The scores, the decay sums and the softmax run in float32 (`models.precision`).
    Kernel: `models.kernels.forgetting` (`forgetting_step` token by token as specification;
    the scores with the decay matrix as SDPA's mask, in blocks of `chunk_size` queries against
    their prefix ("chunk", the default: a causal half of the T x T work, cache-sized) or
    whole ("parallel"))."""

    grows_with_seq_len = True

    def __init__(
        self,
        d_model: int,
        n_heads: int = 2,
        use_output_gate: bool = False,
        qk_norm: bool = False,
        forget_bias: float | None = 5.0,
        mode: str = "chunk",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(d_model, n_heads)
        check_mode(mode, chunk_size)
        self.mode, self.chunk_size = mode, chunk_size
        self.use_output_gate, self.qk_norm = use_output_gate, qk_norm
        self.f_proj = nn.Linear(d_model, n_heads, bias=True)
        if forget_bias is not None:
            require(math.isfinite(forget_bias), "forget_bias", forget_bias, "a finite number")
            nn.init.constant_(self.f_proj.bias, forget_bias)
        if use_output_gate:
            self.g_proj = nn.Linear(d_model, d_model, bias=False)
        if qk_norm:
            self.q_norm = nn.Parameter(torch.ones(n_heads, 1, self.head_dim))
            self.k_norm = nn.Parameter(torch.ones(n_heads, 1, self.head_dim))

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v [B, H, T, d] and log f [B, H, T], in float32 or wider; q and k
        RMS-normalised per head with `qk_norm`."""
        q, k, v = self.split_heads(x)
        logit = self.f_proj(x).transpose(1, 2)
        with autocast_off(x):
            q, k, v, logit = at_least_fp32(q, k, v, logit)
            if self.qk_norm:
                d = (self.head_dim,)
                q = F.rms_norm(q, d, eps=1e-5) * self.q_norm.to(q.dtype)
                k = F.rms_norm(k, d, eps=1e-5) * self.k_norm.to(k.dtype)
            return q, k, v, F.logsigmoid(logit)

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """W_o o, or W_o (sigmoid(W_g x) * o) with the output gate; o [B, H, T, d]."""
        b, h, t, d = o.shape
        o = o.transpose(1, 2).reshape(b, t, h * d).to(x.dtype)
        if self.use_output_gate:
            o = torch.sigmoid(self.g_proj(x)) * o
        return self.out(o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, log_forget = self.features(x)
        with autocast_off(x):
            o = forgetting_attention(
                q, k, v, log_forget, mode=self.mode, chunk_size=self.chunk_size
            )
        return self.output(x, o)

    def state_size(self, seq_len: int) -> int:
        return seq_len * (2 * self.d_model + self.n_heads)

    def rank_bound(self, seq_len: int) -> int:
        """seq_len: the KV cache keeps every token, each readable apart (docs/background.md,
        section 17); the forget gate reweights the tokens and removes none."""
        return seq_len

    def init_state(self, batch_size: int) -> State:
        """(keys, values, decay): an empty cache, and its log-forget sums in float32."""
        empty = torch.zeros(batch_size, self.n_heads, 0, self.head_dim, **self._tensor_kwargs())
        decay = torch.zeros(batch_size, self.n_heads, 0, **self._state_kwargs())
        return empty, empty.clone(), decay

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        q, k, v, log_forget = self.features(x[:, None])
        with autocast_off(x):
            o, state = forgetting_step(
                q[:, :, 0], k[:, :, 0], v[:, :, 0], log_forget[:, :, 0], state
            )
        return self.output(x[:, None], o[:, :, None])[:, 0], state
