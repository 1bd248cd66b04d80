"""Sequence mixers, registered by name: `build_mixer("favor", d_model=64, n_heads=2)`."""

from models import mixers  # noqa: F401  (its modules register themselves)
from models.registry import MIXERS, build_mixer, register

__all__ = ["MIXERS", "build_mixer", "register"]
