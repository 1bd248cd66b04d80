"""A name -> class registry filled by a decorator; unknown names list the known ones."""

import inspect
import re
import sys
from collections.abc import Callable
from typing import Any


class Registry:
    """Maps registry names (the options `model=<name>`, `task=<name>`) to constructors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: `@REGISTRY.register("name")`."""

        def add(cls: type) -> type:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = cls
            cls.registry_name = name
            return cls

        return add

    def get(self, name: str) -> Callable[..., Any]:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def parameters(self, name: str) -> dict[str, inspect.Parameter]:
        """The constructor parameters of entry `name`, in order."""
        return dict(inspect.signature(self.get(name)).parameters)

    def defaults(self, name: str) -> dict[str, Any]:
        """The constructor parameters of entry `name` that have a default, with that default
        (the single source of truth for defaults; `harness.config.group_nodes` reads the same from
        the source)."""
        return {
            key: p.default
            for key, p in self.parameters(name).items()
            if p.default is not inspect.Parameter.empty
        }

    def build(self, name: str, **params: Any) -> Any:
        """Construct entry `name`; a parameter it does not take is a clear `ValueError`."""
        cls = self.get(name)
        accepted = list(self.parameters(name))
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise ValueError(
                f"{self.kind} {name!r} has no parameter {unknown[0]!r}; "
                f"its parameters: {', '.join(accepted)}"
            )
        return cls(**params)

    def described(self, name: str) -> tuple[str, str]:
        """Entry `name`'s source file (relative to the repo) and what it is: the first
        sentence of its module's docstring, or of its class's where the module registers
        several entries: the rows of the generated tables (`python -m models`, `-m tasks`)."""
        cls = self.get(name)
        shared = [c for c in self._entries.values() if c.__module__ == cls.__module__]
        text = inspect.getdoc(cls) if len(shared) > 1 else sys.modules[cls.__module__].__doc__
        return cls.__module__.replace(".", "/") + ".py", first_sentence(text)


def first_sentence(text: str | None) -> str:
    """The text up to its first full stop (not that of "eq.", "et al." or "e.g."), on one line."""
    flat = " ".join((text or "").split())
    end = re.search(r"(?<!eq)(?<! al)(?<!e\.g)\.(\s|$)", flat)
    return flat if end is None else flat[: end.start() + 1]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of `rows` under `header`."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
