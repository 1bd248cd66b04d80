"""Sequence mixers, registered by name: `build_mixer("favor", d_model=64, n_heads=2)`."""

from typing import Any

from common.registry import Registry

MIXERS = Registry("model")
register = MIXERS.register


def build_mixer(name: str, d_model: int, **params: Any) -> Any:
    """Construct the registered mixer `name` (an `nn.Module`, see `models.mixers.base.Mixer`)."""
    return MIXERS.build(name, d_model=d_model, **params)


from models import mixers  # noqa: E402,F401  (fills the registry)

__all__ = ["MIXERS", "build_mixer", "register"]
