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


def inherited_init(
    node: ast.ClassDef, path: Path, classes: dict[str, ast.ClassDef]
) -> ast.FunctionDef:
    """The `__init__` the class runs: its own, else the first one up its bases among the
    folder's `classes` (a subclass that adds nothing takes its parent's parameters)."""
    queue, seen = [node], set()
    while queue:
        current = queue.pop(0)
        inits = (n for n in current.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        init = next(inits, None)
        if init is not None:
            return init
        seen.add(current.name)
        bases = [
            b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in current.bases
        ]
        queue += [classes[b] for b in bases if b in classes and b not in seen]
    raise TypeError(f"{path.name}: {node.name} has no __init__, nor a base in its folder with one")


def signature_defaults(
    node: ast.ClassDef, path: Path, classes: dict[str, ast.ClassDef] | None = None
) -> dict[str, Any]:
    """The parameters of the `__init__` the class runs (`inherited_init`, its bases looked up
    in `classes`) that have a default, with that (literal) default, in order."""
    init = inherited_init(node, path, classes or {})
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


def parsed_classes(folder: Path) -> list[tuple[ast.ClassDef, Path]]:
    """Every top-level class in the folder's modules, with its file."""
    return [
        (node, path)
        for path in sorted(folder.glob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef)
    ]


@functools.cache
def group_nodes(group: str) -> dict[str, dict[str, Any]]:
    """{option: node} of the `model` or `task` group, read from the registered classes."""
    found = parsed_classes(SOURCES[group])
    classes = {node.name: node for node, _ in found}
    nodes = {}
    for node, path in found:
        name = registered_name(node)
        if not name:
            continue
        params = signature_defaults(node, path, classes)
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
