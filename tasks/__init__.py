"""Task generators, registered by name: `build_task("assoc_recall", seq_len=64)`."""

from tasks import (  # noqa: F401  (each module registers its task)
    assoc_recall,
    copy,
    induction,
    needle,
    noisy_recall,
    overwrite_recall,
    selective_copy,
)
from tasks.base import IGNORE, Task
from tasks.registry import TASKS, build_task, register

__all__ = ["IGNORE", "TASKS", "Task", "build_task", "register"]
