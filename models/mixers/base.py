"""The mixer interface every registered sequence mixer implements (README "Extending")."""

from collections.abc import Callable

import torch
from torch import nn

from common.checks import require, require_int
from models.precision import keep_buffers_wide, wide_dtype


class DenominatorCollapse(ArithmeticError):
    """A normalised linear attention whose denominator phi(q)^T z (eq. 9) collapsed: with
    signed features (pitfall 2) the "weights" no longer average the values. The harness
    records the run as diverged with this message."""


State = tuple[torch.Tensor, ...]


class Mixer(nn.Module):
    """A causal sequence mixer: `forward(x)` maps [B, T, d_model] -> [B, T, d_model] and
    y[:, t] depends on x[:, :t+1] only.

    Generation is recurrent: `init_state(batch)` gives the empty state and
    `step(x_t, state) -> (y_t, state)` consumes one token [B, d_model]. `state_size(T)` is the
    number of floats that state holds after T tokens (`sum(s.numel() for s in state) / B`).
    """

    registry_name: str
    grows_with_seq_len: bool = False
    owns_short_conv: bool = False
    """True where the mixer convolves its own projections (fla's DeltaNet, Mamba-2): the
    backbone then leaves its shared short convolution out of that mixer's block."""
    state_knob: str | None = None
    """The constructor parameter that sets the key dimension per head, the knob that moves
    `rank_bound` (docs/background.md, section 17); the mixer holds its resolved value under
    the same attribute name. None: the mixer has no such knob."""
    value_knob: str | None = None
    """The constructor parameter that sets the value dimension per head d_v: it moves
    `state_size` and leaves `rank_bound` as it is (docs/background.md, section 17); the mixer
    holds its resolved value under the same attribute name. None: no such knob."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> "Mixer":
        """Module casts (`.half()`, `.to(torch.bfloat16)`) keep the mixer's own floating
        buffers (decays, constants) in float32 or wider (`models.precision`)."""
        return keep_buffers_wide(self, lambda: super(Mixer, self)._apply(fn, recurse))

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this mixer) of parameters the optimiser must not decay towards
        zero: decay rates, bonuses, token-shift mixes, whose zero is no neutral value. The
        training recipe already spares every parameter that is not a weight matrix;
        a mixer lists here what that rule would not catch, or what must stay spared."""
        return set()

    def state_size(self, seq_len: int) -> int:
        raise NotImplementedError

    def conv_state_size(self) -> int:
        """Floats of `state_size` that are the mixer's own convolution windows (the last few
        inputs, never an earlier binding): conv state, left out of where bindings are kept
        (docs/background.md, section 17). 0 for a mixer without its own convolution."""
        return 0

    def rank_bound(self, seq_len: int) -> int:
        """The most bindings a linear read-out of the state recovers exactly after `seq_len`
        tokens (docs/background.md, section 17): the number of linearly independent key
        directions the state can hold, summed over heads, or the tokens a KV cache keeps."""
        raise NotImplementedError

    def init_state(self, batch_size: int) -> State:
        raise NotImplementedError

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        raise NotImplementedError

    def _tensor_kwargs(self) -> dict:
        param = next(self.parameters())
        return {"device": param.device, "dtype": param.dtype}

    def _state_kwargs(self) -> dict:
        """Recurrent states (sums over every step so far) are carried in float32 or wider,
        also in a bf16 / fp16 model (`models.precision`)."""
        param = next(self.parameters())
        return {"device": param.device, "dtype": wide_dtype(param.dtype)}


class MultiHeadMixer(Mixer):
    """Shared projections of the attention-like mixers: q, k, v, out; heads split d_model."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        require_int("d_model", d_model, 1)
        require_int("n_heads", n_heads, 1)
        require(d_model % n_heads == 0, "n_heads", n_heads, f"a divisor of d_model={d_model}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T, d_model] -> q, k, v each [B, H, T, head_dim], contiguous (one copy here
        instead of one in each kernel, feature map or matmul that reads them)."""
        b, t, _ = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim)
        return qkv.permute(2, 0, 3, 1, 4).contiguous().unbind(0)

    def merge_heads(self, o: torch.Tensor) -> torch.Tensor:
        """[B, H, T, head_dim] -> out-projected [B, T, d_model]."""
        b, h, t, d = o.shape
        return self.out(o.transpose(1, 2).reshape(b, t, h * d))


class MatrixStateMixer(MultiHeadMixer):
    """A multi-head mixer whose whole state is one head_dim x head_dim matrix per head (RetNet,
    DeltaNet, GLA and the gated delta rule): H d^2 floats whatever the length."""

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.head_dim * self.head_dim

    def rank_bound(self, seq_len: int) -> int:
        """H * head_dim: S = K^T V per head has rank <= head_dim, the key dimension
        (docs/background.md, section 17)."""
        return self.n_heads * self.head_dim

    def init_state(self, batch_size: int) -> State:
        shape = (batch_size, self.n_heads, self.head_dim, self.head_dim)
        return (torch.zeros(shape, **self._state_kwargs()),)


class KeyValueStateMixer(Mixer):
    """A mixer whose state is one d_k x d_v matrix per head (`n_heads`, `head_k_dim`,
    `head_v_dim`), with its own short convolution `conv` (None: none): the delta rule's and
    GLA's reference layers. State per layer: H d_k d_v floats plus the convolution's window."""

    n_heads: int
    head_k_dim: int
    head_v_dim: int
    conv: nn.Module | None

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H * d] -> [B, H, T, d], contiguous."""
        b, t, width = x.shape
        return x.view(b, t, self.n_heads, width // self.n_heads).transpose(1, 2).contiguous()

    def state_size(self, seq_len: int) -> int:
        return self.n_heads * self.head_k_dim * self.head_v_dim + self.conv_state_size()

    def conv_state_size(self) -> int:
        return self.conv.window_floats if self.conv is not None else 0

    def rank_bound(self, seq_len: int) -> int:
        """H * d_k: each head's state is a sum of (gated or corrected) rank-1 writes k u^T, of
        rank <= d_k, the key dimension (docs/background.md, section 17); the convolution's
        window adds none."""
        return self.n_heads * self.head_k_dim

    def init_state(self, batch_size: int) -> State:
        """(S,) or, with a convolution, (S, its window)."""
        shape = (batch_size, self.n_heads, self.head_k_dim, self.head_v_dim)
        S = torch.zeros(shape, **self._state_kwargs())
        if self.conv is None:
            return (S,)
        return S, self.conv.init_window(batch_size, **self._tensor_kwargs())

    def window_of(self, state: State) -> torch.Tensor | None:
        """The convolution's window in `state`, None without a convolution."""
        return state[1] if self.conv is not None else None

    def packed(self, S: torch.Tensor, window: torch.Tensor | None) -> State:
        """The state after a step, as `init_state` lays it out."""
        return (S,) if self.conv is None else (S, window)
