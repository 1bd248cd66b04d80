"""The mixers' registry: `@register("name")` on each mixer class, `build_mixer` by name."""

from typing import Any

from common.registry import Registry

MIXERS = Registry("model")
register = MIXERS.register
REFERENCE = "softmax"
"""The mixer every other is measured against: exact attention, whose state is its KV cache."""


def build_mixer(name: str, d_model: int, **params: Any) -> Any:
    """Construct the registered mixer `name` (an `nn.Module`, see `models.mixers.base.Mixer`)."""
    return MIXERS.build(name, d_model=d_model, **params)
