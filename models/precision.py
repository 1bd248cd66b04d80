"""Mixed precision (bf16 / fp16): which parts of a mixer run in float32.

Under `torch.autocast` (Lightning's `bf16-mixed`, `16-mixed`) or on a model cast to half,
the projections run in low precision, which is where the speed is. The recurrence itself
does not survive it: bf16 keeps 8 significant bits, so RetNet's gamma = 1 - 2^-9 rounds to
1 (eq. 10 loses its decay); fp16's smallest number is 6e-8, so FAVOR+ key features
e^(w^T x' - |x'|^2/2 - c) of ~1e-10 become 0 and eq. 9 becomes 0/0; a state summed over
thousands of steps (eq. 8) drifts; `torch.linalg.solve_triangular` (DeltaNet) has no bf16
kernel on CPU. So every mixer computes its feature maps, decays, exponentials, normalisers
and kernel (`models.kernels`) in float32 with autocast off, carries its recurrent state in
float32, and casts only the kernel's output back.
"""

import torch
from torch import Tensor


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """`dtype` widened to at least float32 (float64 stays float64)."""
    return torch.promote_types(dtype, torch.float32)


def at_least_fp32(*tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors in float32, or float64 if they already are."""
    return tuple(t.to(wide_dtype(t.dtype)) for t in tensors)


def autocast_off(like: Tensor) -> torch.autocast:
    """A context that turns autocast off on `like`'s device, so that matmuls inside run in
    the dtype of their inputs (float32) and not in autocast's bf16 / fp16."""
    return torch.autocast(like.device.type, enabled=False)
