"""What the kernel tests measure besides values: the peak memory of a call and the nodes of
an autograd graph."""

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
