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

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

Kernel = TypeVar("Kernel", bound=Callable[..., Any])


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


def in_fp32(like: str = "v") -> Callable[[Kernel], Kernel]:
    """A decorator for a kernel (`models.kernels`): its floating tensor arguments widened to
    float32 (float64 stays), autocast off, and its output (the first one, where it returns
    (output, state)) cast back to the dtype of its argument `like`; the state stays wide. Every
    sequence kernel of `models.kernels` but softmax's (exact attention, whose softmax is
    stable in half) and the one-token steps the mixers call inside their own float32 blocks
    carries it, so a mixer that calls a kernel is safe in bf16 and fp16 without a cast of its
    own (README "Extending")."""

    def decorate(kernel: Kernel) -> Kernel:
        position = list(inspect.signature(kernel).parameters).index(like)

        @functools.wraps(kernel)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            reference = args[position] if position < len(args) else kwargs[like]
            args = tuple(_widened(a) for a in args)
            kwargs = {key: _widened(value) for key, value in kwargs.items()}
            with autocast_off(reference):
                out = kernel(*args, **kwargs)
            if isinstance(out, Tensor):
                return out.to(reference.dtype)
            return (out[0].to(reference.dtype), *out[1:])

        return wrapped

    return decorate


def _widened(x: Any) -> Any:
    """A floating tensor in at least float32; anything else as it is."""
    is_float = isinstance(x, Tensor) and x.is_floating_point()
    return x.to(wide_dtype(x.dtype)) if is_float else x


def keep_buffers_wide(module: nn.Module, cast: Callable[[], nn.Module]) -> nn.Module:
    """Runs `cast` (a module cast, `nn.Module._apply`) and puts `module`'s own floating
    buffers (decays and constants of a recurrence, e.g. RetNet's gammas) back in float32 or
    wider, on the device the cast chose: a bf16 gamma = 1 - 2^-9 would round to 1."""
    before = {name: b for name, b in module.named_buffers(recurse=False) if b.is_floating_point()}
    cast()
    for name, buffer in before.items():
        moved = getattr(module, name)
        setattr(module, name, buffer.to(moved.device, wide_dtype(moved.dtype)))
    return module
