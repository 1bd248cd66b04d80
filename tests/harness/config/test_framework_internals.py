"""The private framework APIs behind `harness.config.framework_internals` are where it expects
them: an upgrade of Hydra that moves one fails here, by name."""

import builtins
import importlib

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from harness.config import framework_internals
from harness.config.framework_internals import (
    PRIVATE_APIS,
    FrameworkMoved,
    apply_overrides,
    hydra_args_parser,
)


@pytest.mark.parametrize("name", PRIVATE_APIS)
def test_each_private_api_is_where_the_adapter_expects_it(name: str) -> None:
    module, attribute = name.rsplit(".", 1)
    assert hasattr(importlib.import_module(module), attribute), f"{name} moved"


def test_hydra_parser_reads_a_command_line() -> None:
    args, unknown = hydra_args_parser().parse_known_args(["-m", "model=favor", "seed=1,2"])
    assert args.multirun and list(args.overrides) == ["model=favor", "seed=1,2"] and not unknown


def test_overrides_are_applied_as_hydra_applies_them() -> None:
    cfg = OmegaConf.create({"optim": {"lr": 0.1}})
    OmegaConf.set_struct(cfg, True)
    parse = OverridesParser.create().parse_override
    apply_overrides([parse("optim.lr=0.5"), parse("+optim.wd=1")], cfg)
    assert cfg.optim == {"lr": 0.5, "wd": 1}
    with pytest.raises(ConfigCompositionException, match="Could not override 'optim.lrr'"):
        apply_overrides([parse("optim.lrr=1")], cfg)


def test_a_moved_api_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def without_hydra_internal(name, *args, **kwargs):
        if name.startswith("hydra._internal"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_hydra_internal)
    with pytest.raises(FrameworkMoved, match=r"hydra\._internal\.utils\.get_args_parser"):
        framework_internals.hydra_args_parser()
    with pytest.raises(FrameworkMoved, match=r"config_loader_impl\.ConfigLoaderImpl"):
        framework_internals.apply_overrides([], OmegaConf.create())
