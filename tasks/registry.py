"""The tasks' registry: `@register("name")` on each task class, `build_task` by name."""

from typing import Any

from common.registry import Registry
from tasks.base import Task

TASKS = Registry("task")
register = TASKS.register


def build_task(name: str, **params: Any) -> Task:
    """Construct the registered task `name`; unknown names list the known ones."""
    return TASKS.build(name, **params)
