"""What every kernel shares: the modes, the checks of its inputs, and the split of a sequence
into blocks (docs/background.md, section 5).

Each recurrent kernel has a plain step loop, `mode="recurrent"`, which is its specification,
beside faster forms that the tests compare against it:

- "parallel": the masked T x T form over the whole sequence (one block);
- "chunk": the same masked form inside blocks of `chunk_size` steps, with the recurrent state
  carried from block to block. A sequence whose length is not a multiple of `chunk_size` is
  run as its longest whole-chunk prefix followed by one shorter block (no padding).

States are returned with `return_state=True` and accepted as `initial_state`, so a sequence can
be split anywhere and continued.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from common.checks import require_choice, require_int

MODES = ("chunk", "parallel", "recurrent")


def check_mode(mode: str, chunk_size: int) -> None:
    """`mode` is one of MODES and `chunk_size` an integer >= 1 (else the clear ValueError)."""
    require_choice("mode", mode, MODES)
    require_int("chunk_size", chunk_size, 1)


def check_shape(name: str, x: Tensor, shape: Sequence[int]) -> None:
    """x has exactly `shape` (else a ValueError naming `name`, the expected and the given)."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """q, k [B, H, T, D] of one shape and v [B, H, T, Dv], T >= 1."""
    ok = q.dim() == 4 and k.shape == q.shape and v.dim() == 4 and v.shape[:3] == q.shape[:3]
    if not ok or q.shape[2] == 0:
        raise ValueError(
            "expected q, k of shape [B, H, T, D] and v of shape [B, H, T, Dv] (same B, H, T >= 1),"
            f" got q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}"
        )


def in_blocks(
    block_fn: Callable[..., tuple[Tensor, Any]],
    seqs: Sequence[Tensor],
    time_dim: int,
    block_len: int,
    state: Any,
) -> tuple[Tensor, Any]:
    """Run `block_fn(*pieces, L=length, state=state, last=last) -> (out, state)` on the
    longest prefix made of whole blocks (L = block_len), then on the remaining (< block_len)
    steps as one shorter block; `last` tells a block that no other block follows it."""
    T = seqs[0].shape[time_dim]
    full = T // block_len * block_len
    parts = [part for part in ((0, full, block_len), (full, T - full, T - full)) if part[1]]
    outs = []
    for index, (start, length, size) in enumerate(parts):
        pieces = [x if length == T else x.narrow(time_dim, start, length) for x in seqs]
        out, state = block_fn(*pieces, L=size, state=state, last=index == len(parts) - 1)
        outs.append(out)
    return (outs[0] if len(outs) == 1 else torch.cat(outs, time_dim)), state


def check_log_gate(name: str, log_gate: Tensor) -> float | None:
    """Every log-gate is finite and <= 0, a gate exp(log_gate) in (0, 1] (else a ValueError
    naming `name` and its largest value). Returns the smallest log-gate, or None where none
    is read: while torch.compile traces (the check is skipped) or with no log-gates."""
    if torch.compiler.is_compiling() or log_gate.numel() == 0:
        return None
    low, high = (float(x) for x in torch.aminmax(log_gate.detach()))
    if not (-math.inf < low and high <= 0):  # NaN fails both
        raise ValueError(
            f"{name} must be finite and <= 0 (a gate exp({name}) in (0, 1]),"
            f" got values in [{low:.4g}, {high:.4g}]"
        )
    return low


def normal_floor(x: Tensor) -> float:
    """log of the smallest normal number of x's dtype (-87.3 in float32): exp of anything below
    is a subnormal, which costs the CPU up to ten times a normal number in every product it
    enters, while adding less than 1e-38 to any sum (docs/background.md, section 14)."""
    return math.log(torch.finfo(x.dtype).tiny)


def gate_exp(x: Tensor) -> Tensor:
    """exp(x) for exponents x <= 0 of products of gates, with those below `normal_floor`
    flushed to exactly 0 (no gradient there either) instead of a subnormal."""
    return torch.exp(x.masked_fill(x < normal_floor(x), float("-inf")))


def causal_exp(diff: Tensor, dim: tuple[int, int]) -> Tensor:
    """exp(diff), in place (diff is a fresh tensor of differences), where the index along
    dim[0] is at least the one along dim[1] (the causal lower triangle, where
    diff = b_t - b_s <= 0), 0 elsewhere (exp(-inf): no overflow, and no gradient), and 0 where
    the exponent is below `normal_floor` (no subnormals)."""
    T = diff.shape[dim[0]]
    shape = [1] * diff.dim()
    shape[dim[0]] = shape[dim[1]] = T
    lower = torch.ones(T, T, dtype=torch.bool, device=diff.device).tril().view(shape)
    return diff.masked_fill_(~lower | (diff < normal_floor(diff)), float("-inf")).exp_()


def causal_gaps(b: Tensor) -> Tensor:
    """G[..., i, j] = exp(b_i - b_j) for j <= i, else 0, from b [..., L] (cumulative
    log-gates, so every exponent kept is <= 0): `causal_exp` with the gradient
    db_i = sum_j (dG * G)[i, j] - sum_j (dG * G)[j, i] in one pass (`_CausalGaps`)."""
    return _CausalGaps.apply(b)


class _CausalGaps(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, b: Tensor) -> Tensor:
        gaps = causal_exp(b.unsqueeze(-1) - b.unsqueeze(-2), dim=(-2, -1))
        ctx.save_for_backward(gaps)
        return gaps

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (gaps,) = ctx.saved_tensors
        weighted = grad * gaps
        return weighted.sum(-1) - weighted.sum(-2)
