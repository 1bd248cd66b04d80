"""The two private framework APIs the harness needs, each behind one function here, so that an
upgrade that moves one fails in one place, naming it
(`tests/harness/config/test_framework_internals.py` imports both on every run of the suite).

    hydra._internal.utils.get_args_parser      Hydra's own command-line parser: the command line
                                               is checked before Hydra composes, with Hydra's
                                               flags (`--config-name`, `--cfg`, `-m`, ...)
    lightning.fabric.connector._PRECISION_INPUT  the `precision` values a Trainer takes; Lightning
                                               has no public list of them
"""

import argparse
import typing

PRIVATE_APIS = (
    "hydra._internal.utils.get_args_parser",
    "lightning.fabric.connector._PRECISION_INPUT",
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
    """Every `precision` value a Lightning Trainer accepts (`32-true`, `bf16-mixed`, 32, ...)."""
    try:
        from lightning.fabric.connector import _PRECISION_INPUT
    except ImportError as error:
        raise _moved(PRIVATE_APIS[1], error) from error
    return tuple(v for group in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(group))
