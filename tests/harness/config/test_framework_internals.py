"""The private framework APIs behind `harness.config.framework_internals` are where it expects
them: an upgrade of Hydra or Lightning that moves one fails here, by name."""

import builtins
import importlib
import importlib.machinery
import typing

import pytest

from harness.config import framework_internals
from harness.config.framework_internals import (
    PRIVATE_APIS,
    FrameworkMoved,
    hydra_args_parser,
    lightning_precisions,
)


@pytest.mark.parametrize("name", PRIVATE_APIS)
def test_each_private_api_is_where_the_adapter_expects_it(name: str) -> None:
    module, attribute = name.rsplit(".", 1)
    assert hasattr(importlib.import_module(module), attribute), f"{name} moved"


def test_hydra_parser_reads_a_command_line() -> None:
    args, unknown = hydra_args_parser().parse_known_args(["-m", "model=favor", "seed=1,2"])
    assert args.multirun and list(args.overrides) == ["model=favor", "seed=1,2"] and not unknown


def test_lightning_precisions_hold_the_usual_values() -> None:
    precisions = lightning_precisions()
    assert {"32-true", "bf16-mixed", "16-mixed", "64-true", 32, 64} <= set(precisions)


def test_lightning_precisions_read_from_source_are_those_lightning_imports() -> None:
    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT

    imported = tuple(
        v for group in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(group)
    )
    assert lightning_precisions() == imported


def test_a_moved_api_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def without_hydra_internal(name, *args, **kwargs):
        if name == "hydra._internal.utils":
            raise ImportError("No module named 'hydra._internal.utils'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_hydra_internal)
    with pytest.raises(FrameworkMoved, match=r"hydra\._internal\.utils\.get_args_parser"):
        framework_internals.hydra_args_parser()


def test_a_moved_precision_list_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    (tmp_path / "__init__.py").write_text("")
    spec = importlib.machinery.ModuleSpec("lightning", None, origin=str(tmp_path / "__init__.py"))
    monkeypatch.setattr(framework_internals.importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(FrameworkMoved, match=r"precision\._PRECISION_INPUT"):
        framework_internals.lightning_precisions()
