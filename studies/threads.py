"""Run a block with a given number of torch threads, restoring the previous setting."""

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """`with torch_threads(1): ...`; count 0 keeps the current setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count or previous)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
