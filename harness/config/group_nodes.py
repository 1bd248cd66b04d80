"""The `model` and `task` config groups, read from their constructors: each class registered
with `@register("<name>")` in `models/mixers/` or `tasks/` is the option `<name>` of its group,
a node holding `name` and every constructor parameter with its default (Hydra's ConfigStore).
A new mixer or task is one file plus its import; no yaml repeats a default.

The signatures are read from the source (`ast`), not by importing it, so that the command line
answers before torch is imported; a default must therefore be a literal. The `model` node
leaves out `d_model` (the backbone's); the `task` node adds the harness's own keys
(`TASK_KEYS`). A yaml file in `conf/<group>/` is an option too (`conf/model/hybrid.yaml`, a
stack that is no registry entry)."""

import ast
import functools
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = ROOT / "conf"
SOURCES = {"model": ROOT / "models" / "mixers", "task": ROOT / "tasks"}
"""Where each group's registered classes live."""
NOT_CONFIG = {"model": ("self", "d_model"), "task": ("self",)}
"""Constructor parameters that are no key of the group's node: `d_model` is the backbone's."""
TASK_KEYS = {"eval_seq_lens": [], "test": None, "mixture": None}
"""Keys of every task node that the harness reads, not the generator (docs/tasks.md): extra
test lengths, the test sets' changed parameters, and the training mixture."""
HEADLINE = {"assoc_recall": {"num_kv_pairs": [1, 16]}}
"""Where the harness's default differs from the generator's: `python run.py` trains and tests
MQAR over a range of loads (a load curve, README), `build_task("assoc_recall")` one load."""


def registered_name(node: ast.ClassDef) -> str | None:
    """`name` of a class decorated `@register("name")` (or `@<REGISTRY>.register("name")`)."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and decorator.args:
            function = decorator.func
            called = function.attr if isinstance(function, ast.Attribute) else function.id
            if called == "register" and isinstance(decorator.args[0], ast.Constant):
                return decorator.args[0].value
    return None


def signature_defaults(node: ast.ClassDef, path: Path) -> dict[str, Any]:
    """The parameters of the class's own `__init__` that have a default, with that (literal)
    default, in order."""
    init = next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    if init is None:
        raise TypeError(f"{path.name}: {node.name} registers no __init__ of its own")
    positional = init.args.posonlyargs + init.args.args
    args = positional + init.args.kwonlyargs
    defaults = [None] * (len(positional) - len(init.args.defaults)) + init.args.defaults
    defaults += init.args.kw_defaults
    out = {}
    for arg, default in zip(args, defaults, strict=True):
        if default is not None:
            value = ast.literal_eval(default)
            out[arg.arg] = list(value) if isinstance(value, tuple) else value
    return out


@functools.cache
def group_nodes(group: str) -> dict[str, dict[str, Any]]:
    """{option: node} of the `model` or `task` group, read from the registered classes."""
    nodes = {}
    for path in sorted(SOURCES[group].glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            name = isinstance(node, ast.ClassDef) and registered_name(node)
            if not name:
                continue
            params = signature_defaults(node, path)
            params = {k: v for k, v in params.items() if k not in NOT_CONFIG[group]}
            extra = TASK_KEYS if group == "task" else {}
            nodes[name] = {"name": name, **params, **HEADLINE.get(name, {}), **extra}
    return nodes


def store_group_nodes() -> None:
    """Every `model` and `task` option in Hydra's ConfigStore (idempotent)."""
    store = ConfigStore.instance()
    for group in SOURCES:
        for name, node in group_nodes(group).items():
            store.store(group=group, name=name, node=node)


def group_options() -> dict[str, list[str]]:
    """Every config group but Hydra's (`model`, `task`, `experiment`, ...) and its options:
    the yaml files of `conf/<group>/`, and the registered classes of `model` and `task`."""
    options = {
        str(folder.relative_to(CONF_DIR)): {p.stem for p in folder.glob("*.yaml")}
        for folder in sorted(CONF_DIR.rglob("*"))
        if folder.is_dir() and folder.relative_to(CONF_DIR).parts[0] != "hydra"
    }
    for group in SOURCES:
        options[group] = options.get(group, set()) | set(group_nodes(group))
    return {group: sorted(names) for group, names in options.items()}
