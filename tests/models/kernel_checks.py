"""What the kernel tests measure besides values: the peak memory of a call, the nodes of an
autograd graph, a fast form against its step loop, a split sequence against the whole."""

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def peak_bytes(call: Callable[[], object]) -> int:
    """The largest amount of CPU memory allocated at once while `call()` runs."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted(
        (e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start
    )
    current = peak = 0
    for e in events:
        current += e.self_cpu_memory_usage
        peak = max(peak, current)
    return peak


def graph_nodes(out: torch.Tensor) -> list[str]:
    """Names of the autograd nodes behind `out`."""
    seen, stack, names = set(), [out.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return names


def assert_same_rule(
    actual: tuple[torch.Tensor, torch.Tensor],
    expected: tuple[torch.Tensor, torch.Tensor],
    leaves: list[torch.Tensor],
) -> None:
    """A recurrence's fast form against its step loop in float64: outputs o and final state S
    within 1e-10, and the gradients of sin(o).sum() + (S^2).sum() with respect to `leaves`
    within 1e-9 (relative)."""
    (o, S), (o_expected, S_expected) = actual, expected
    torch.testing.assert_close(o, o_expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S, S_expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum() + S.square().sum(), leaves)
    grads_expected = torch.autograd.grad(o_expected.sin().sum() + S_expected.square().sum(), leaves)
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


def assert_split_continues(
    rule: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    inputs: tuple[torch.Tensor, ...],
    cut: int,
    mode: str,
) -> None:
    """A recurrence run on inputs[..., :cut, :] and continued from its final state on the
    rest equals the whole sequence in one call: outputs and final state within 1e-10.
    `inputs` are [B, H, T, ...] tensors, split along T."""
    whole, S_whole = rule(*inputs, mode=mode, chunk_size=8, return_state=True)
    first, S = rule(*(x[:, :, :cut] for x in inputs), mode=mode, chunk_size=8, return_state=True)
    second, S_end = rule(
        *(x[:, :, cut:] for x in inputs), mode=mode, chunk_size=8, initial_state=S,
        return_state=True,
    )  # fmt: skip
    torch.testing.assert_close(torch.cat([first, second], 2), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S_end, S_whole, rtol=1e-10, atol=1e-10)
