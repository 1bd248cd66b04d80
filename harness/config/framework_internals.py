"""The two private framework APIs the harness needs, each behind one function here, so that an
upgrade that moves one fails in one place, naming it
(`tests/harness/config/test_framework_internals.py` imports both on every run of the suite).

    hydra._internal.utils.get_args_parser      Hydra's own command-line parser: the command line
                                               is checked before Hydra composes, with Hydra's
                                               flags (`--config-name`, `--cfg`, `-m`, ...)
    lightning.fabric.plugins.precision.precision._PRECISION_INPUT
                                               the `precision` values a Trainer takes; Lightning
                                               has no public list of them. Read from Lightning's
                                               source file, not imported, so that a refusal of
                                               `trainer.precision` comes before Lightning loads
"""

import argparse
import ast
import importlib.util
from pathlib import Path

PRIVATE_APIS = (
    "hydra._internal.utils.get_args_parser",
    "lightning.fabric.plugins.precision.precision._PRECISION_INPUT",
)


class FrameworkMoved(ImportError):
    """A private API that an upgrade of Hydra or Lightning moved or removed."""


def _moved(name: str, error: Exception) -> FrameworkMoved:
    return FrameworkMoved(
        f"{name} is not where this harness expects it ({error}); the upgrade moved it: "
        "pin the version in requirements.txt or adapt harness/config/framework_internals.py"
    )


def hydra_args_parser() -> argparse.ArgumentParser:
    """Hydra's parser of `python run.py ...` (overrides, `-m`, `--config-name`, ...)."""
    try:
        from hydra._internal.utils import get_args_parser
    except ImportError as error:
        raise _moved(PRIVATE_APIS[0], error) from error
    return get_args_parser()


def lightning_precisions() -> tuple:
    """Every `precision` value a Lightning Trainer accepts (`32-true`, `bf16-mixed`, 32, ...),
    in the order of Lightning's `_PRECISION_INPUT` union of literals, read from its source
    without importing Lightning (seconds of start-up)."""
    name = PRIVATE_APIS[1]
    try:
        package = importlib.util.find_spec("lightning")
        source = Path(package.origin).parent / "fabric/plugins/precision/precision.py"
        literals = {
            node.targets[0].id: node.value
            for node in ast.parse(source.read_text()).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        }
        groups = literals["_PRECISION_INPUT"].slice.elts  # Union[INT, STR, STR_ALIAS]
        return tuple(
            ast.literal_eval(value)
            for group in groups
            for value in getattr(literals[group.id].slice, "elts", [literals[group.id].slice])
        )
    except (AttributeError, KeyError, OSError, TypeError, ValueError) as error:
        raise _moved(name, ImportError(f"{type(error).__name__}: {error}")) from error
