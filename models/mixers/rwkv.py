"""RWKV-4 (eq. 11): time-mixing (a per-channel decayed weighted average of past values, with
a bonus for the current token) followed by channel-mixing, both with token shift."""

import torch
from torch import nn

from common.checks import require_int
from models.kernels import check_mode, rwkv4_wkv
from models.mixers.base import Mixer, State
from models.precision import at_least_fp32, autocast_off
from models.registry import register


def token_shift(x: torch.Tensor) -> torch.Tensor:
    """x [B, T, C] -> x_{t-1} [B, T, C], zeros before the first token."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)


def mix(x: torch.Tensor, prev: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Token shift interpolation mu * x_t + (1 - mu) * x_{t-1}, per channel, in the dtype that
    arithmetic would promote to (one `lerp`: ~10% faster than the arithmetic)."""
    dtype = torch.promote_types(torch.promote_types(x.dtype, prev.dtype), mu.dtype)
    return torch.lerp(prev.to(dtype), x.to(dtype), mu.to(dtype))


@register("rwkv")
class RWKV(Mixer):
    """One RWKV-4 layer as a mixer, on d_model channels (no heads).

    Time-mixing: k, v, r from token-shifted inputs (learned mu_k, mu_v, mu_r),
        a = W_o (sigmoid(r_t) * wkv_t),   wkv = eq. 11 with w = exp(time_decay), u = time_first.
    Channel-mixing, on h' = LayerNorm(x + a) (x is the mixer's input, already normalised by
    the block), with its own token shift (mu'_k, mu'_r):
        c = sigmoid(W'_r h'_r) * W'_v relu(W'_k h'_k)^2.
    The mixer returns a + c, so the block's residual x_res + mixer(norm(x_res)) adds both of
    RWKV's residual updates (the channel-mix reads x + a, the normalised stream, instead of the
    raw one). State per layer: 5 * d_model floats: the previous time-mix input, wkv's
    (num, den, max) and the previous channel-mix input.

    chunk_size defaults to 16: the chunked wkv is elementwise work O(T * chunk_size * C)
    (per-channel decays leave no matmul), so short chunks are fastest (B=64, T=64, C=64,
    forward+backward, one thread: 16 -> ~160 ms, 64 -> ~700 ms).
    """

    def __init__(self, d_model: int, mode: str = "chunk", chunk_size: int = 16) -> None:
        super().__init__()
        require_int("d_model", d_model, 1)
        check_mode(mode, chunk_size)
        self.d_model, self.mode, self.chunk_size = d_model, mode, chunk_size
        ramp = torch.arange(d_model, dtype=torch.float32) / max(d_model - 1, 1)
        # decay rates w = exp(time_decay) spread from e^-5 (long memory) to e^2 (~last token)
        self.time_decay = nn.Parameter(-5 + 7 * ramp**1.5)
        self.time_first = nn.Parameter(torch.full((d_model,), -1.2) + 0.5 * (ramp - 0.5))
        self.mu_k = nn.Parameter(1 - 0.5 * ramp)
        self.mu_v = nn.Parameter(1 - 0.4 * ramp)
        self.mu_r = nn.Parameter(1 - 0.6 * ramp)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model)
        self.cmu_k = nn.Parameter(1 - 0.5 * ramp)
        self.cmu_r = nn.Parameter(1 - 0.5 * ramp)
        self.ckey = nn.Linear(d_model, 4 * d_model, bias=False)
        self.cvalue = nn.Linear(4 * d_model, d_model, bias=False)
        self.creceptance = nn.Linear(d_model, d_model, bias=False)

    def no_weight_decay(self) -> set[str]:
        """The decay rates, the current-token bonus and the token-shift mixes (decaying
        time_decay towards 0 would pull every channel's memory towards w = 1)."""
        return {"time_decay", "time_first", "mu_k", "mu_v", "mu_r", "cmu_k", "cmu_r"}

    def rkv(self, x: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Receptance, key, value of the time-mix from x_t and x_{t-1}: each [B, T, C]."""
        r = self.receptance(mix(x, prev, self.mu_r))
        return r, self.key(mix(x, prev, self.mu_k)), self.value(mix(x, prev, self.mu_v))

    def wkv(
        self, k: torch.Tensor, v: torch.Tensor, mode: str, state: State | None = None
    ) -> tuple[torch.Tensor, State]:
        """eq. 11 per channel with w = exp(time_decay), u = time_first; k, v [B, T, C].
        Computed in float32 or wider (`models.precision`), as is the returned state; the
        output comes back in the dtype of v."""
        with autocast_off(k):
            time_decay, u, k32, v32 = at_least_fp32(self.time_decay, self.time_first, k, v)
            wkv, state = rwkv4_wkv(
                time_decay.exp(),
                u,
                k32,
                v32,
                mode=mode,
                chunk_size=self.chunk_size,
                initial_state=state,
                return_state=True,
            )
        return wkv.to(v.dtype), state

    def channel_mix(self, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        k = torch.relu(self.ckey(mix(h, prev, self.cmu_k))).square()
        return torch.sigmoid(self.creceptance(mix(h, prev, self.cmu_r))) * self.cvalue(k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, k, v = self.rkv(x, token_shift(x))
        wkv, _ = self.wkv(k, v, self.mode)
        a = self.out(torch.sigmoid(r) * wkv)
        h = self.norm(x + a)
        return a + self.channel_mix(h, token_shift(h))

    def state_size(self, seq_len: int) -> int:
        return 5 * self.d_model

    def rank_bound(self, seq_len: int) -> int:
        """d_model: each channel's wkv is a decayed average of that channel's values, a
        one-dimensional key (exp(k_t)) with no query, so each channel holds rank 1; the
        receptance only scales channels, and the token shifts hold one previous input
        (docs/background.md, section 17)."""
        return self.d_model

    def init_state(self, batch_size: int) -> State:
        """(x_{t-1}, num, den, max, h'_{t-1}); wkv's (num, den, max) in float32 or wider."""
        inputs = torch.zeros(batch_size, self.d_model, **self._tensor_kwargs())
        sums = torch.zeros(batch_size, self.d_model, **self._state_kwargs())
        max_exponent = torch.full_like(sums, float("-inf"))
        return inputs, sums, sums.clone(), max_exponent, inputs.clone()

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        x_prev, num, den, max_exponent, h_prev = state
        r, k, v = self.rkv(x[:, None], x_prev[:, None])
        wkv, (num, den, max_exponent) = self.wkv(k, v, "recurrent", (num, den, max_exponent))
        a = self.out(torch.sigmoid(r) * wkv)[:, 0]
        h = self.norm(x + a)
        y = a + self.channel_mix(h, h_prev)
        return y, (x, num, den, max_exponent, h)
