"""`python -m tasks`: every registered task as a Markdown table, made from the registry: its
module, what it asks (its docstring's first paragraph) and its parameters with their
defaults (docs/tasks.md has a section for each task it documents)."""

from common.registry import markdown_table
from tasks import TASKS


def task_table() -> str:
    """The table."""
    rows = []
    for name in TASKS.names():
        path, what = TASKS.described(name)
        params = ", ".join(f"`{key}={value}`" for key, value in TASKS.defaults(name).items())
        rows.append([f"[`{name}`]({path})", what, params])
    return markdown_table(["task", "what", "parameters (defaults)"], rows)


if __name__ == "__main__":
    print(task_table())
