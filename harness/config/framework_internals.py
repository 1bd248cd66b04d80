"""The two private Hydra APIs the harness needs, each behind one function here, so that an
upgrade that moves one fails in one place, naming it
(`tests/harness/config/test_framework_internals.py` imports both on every run of the suite).

    hydra._internal.utils.get_args_parser      Hydra's own command-line parser: the command line
                                               is checked before Hydra runs, with Hydra's flags
                                               (`--config-name`, `--cfg`, `-m`, ...)
    hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config
                                               how Hydra applies `key=value`, `+key`, `++key` and
                                               `~key` to a composed config: each value of a sweep
                                               is tried before the first job, with Hydra's errors
"""

import argparse

from hydra.core.override_parser.types import Override
from omegaconf import DictConfig

PRIVATE_APIS = (
    "hydra._internal.utils.get_args_parser",
    "hydra._internal.config_loader_impl.ConfigLoaderImpl",
)


class FrameworkMoved(ImportError):
    """A private API that an upgrade of Hydra moved or removed."""


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


def apply_overrides(overrides: list[Override], cfg: DictConfig) -> None:
    """Apply key overrides to a composed config as Hydra does (its errors, raised as Hydra's
    `ConfigCompositionException`)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        apply = ConfigLoaderImpl._apply_overrides_to_config
    except (ImportError, AttributeError) as error:
        raise _moved(PRIVATE_APIS[1], ImportError(str(error))) from error
    apply(overrides, cfg)
