"""Task generators, registered by name: `build_task("assoc_recall", seq_len=64)`."""

from typing import Any

from common.registry import Registry
from tasks.base import IGNORE, Task

TASKS = Registry("task")
register = TASKS.register


def build_task(name: str, **params: Any) -> Task:
    """Construct the registered task `name`; unknown names list the known ones."""
    return TASKS.build(name, **params)


from tasks import (  # noqa: E402,F401  (fills the registry)
    assoc_recall,
    copy,
    induction,
    needle,
    noisy_recall,
    selective_copy,
)

__all__ = ["IGNORE", "TASKS", "Task", "build_task", "register"]
