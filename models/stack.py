"""Which mixer each layer of a stack gets: one registered mixer repeated (`model=deltanet`), or a
hybrid's list of mixers, one per layer (`model=hybrid 'model.layers=[gated_deltanet,softmax]'`,
docs/hybrids.md)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.checks import InvalidValue, require, require_choice
from models.registry import MIXERS

HYBRID = "hybrid"
"""The model name of a stack with a mixer per layer (`conf/model/hybrid.yaml`); every other
model name is a registered mixer, repeated in every layer."""
ABBREVIATIONS = {"gated_deltanet": "gdn", "sliding_window": "swa"}
"""Short names of mixers in a hybrid's label (`gdn+softmax`); the others keep their names."""
HYBRID_JOIN = "+"
"""Joins a hybrid's layers in its label."""
LAYER_FORM = "a mixer's name or {name: <mixer>, <its parameters>}"


@dataclass(frozen=True)
class Layer:
    """One layer's mixer: its registry name, the parameters given to it (d_model aside) and,
    in a hybrid, its entry's index in `model.layers` (None: the model's one mixer)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    entry: int | None = None

    def key(self, param: str) -> str:
        """The parameter's name as the user wrote it: `layers[1].n_heads`, or `n_heads`."""
        return param if self.entry is None else f"layers[{self.entry}].{param}"


def layer_of(index: int, entry: Any) -> Layer:
    """`entry` of `model.layers` as a `Layer`, or `InvalidValue` naming `layers[index]`."""
    key = f"layers[{index}]"
    if isinstance(entry, str):
        name, params = entry, {}
    elif isinstance(entry, Mapping) and "name" in entry:
        params = {k: v for k, v in entry.items() if k != "name"}
        name = entry["name"]
    else:
        raise InvalidValue(key, entry, LAYER_FORM)
    require_choice(f"{key}.name", name, MIXERS.names())
    accepted = [p for p in MIXERS.parameters(name) if p != "d_model"]
    for param, value in params.items():
        allowed = f"a parameter of {name}: {', '.join(accepted) or 'it has none'}"
        require(param in accepted, f"{key}.{param}", value, allowed)
    return Layer(name, params, index)


def hybrid_layers(layers: Any, n_layers: int) -> list[Layer]:
    """A hybrid's `model.layers`, repeated to `n_layers` (the list is a period: 2 entries and
    n_layers=4 give a, b, a, b); each entry checked, a bad one named by its index."""
    example = "one mixer per layer, bottom first, e.g. 'model.layers=[gated_deltanet,softmax]'"
    require(layers is not None, "layers", layers, f"set for model=hybrid: {example}")
    form = f"a non-empty list, each entry {LAYER_FORM}"
    require(isinstance(layers, Sequence) and not isinstance(layers, str), "layers", layers, form)
    require(len(layers) > 0, "layers", layers, form)
    period = [layer_of(i, entry) for i, entry in enumerate(layers)]
    allowed = f"a multiple of the {len(period)} entries of model.layers (the list repeats)"
    require(n_layers % len(period) == 0, "n_layers", n_layers, allowed)
    return period * (n_layers // len(period))


def stack_layers(mixer: str, mixer_params: dict | None, n_layers: int) -> list[Layer]:
    """The mixer of every layer: a hybrid's list (`mixer_params["layers"]`), or `mixer` with
    `mixer_params` in all `n_layers`."""
    params = dict(mixer_params or {})
    if mixer != HYBRID:
        return [Layer(mixer, params)] * n_layers
    layers = params.pop("layers", None)
    for key, value in params.items():
        raise InvalidValue(key, value, "unset: a hybrid's parameters are its layers'")
    return hybrid_layers(layers, n_layers)


def resolved_layers(layers: Any) -> list[dict]:
    """A hybrid's `model.layers` as the record keeps it: each entry's name and every
    parameter, the constructor's defaults filled in."""
    resolved = []
    for i, entry in enumerate(layers):
        layer = layer_of(i, entry)
        defaults = {k: v for k, v in MIXERS.defaults(layer.name).items() if k != "d_model"}
        resolved.append({"name": layer.name, **defaults, **layer.params})
    return resolved


def hybrid_label(names: Sequence[str]) -> str:
    """A stack named by its layers' mixers, in order: `gdn+softmax` (`ABBREVIATIONS`)."""
    return HYBRID_JOIN.join(ABBREVIATIONS.get(name, name) for name in names)


def layers_text(layers: Sequence[Any]) -> str:
    """`model.layers` as written, in one short text: `gdn(head_k_dim=4)+softmax`."""
    parts = []
    for entry in layers:
        entry = {"name": entry} if isinstance(entry, str) else dict(entry)
        name = entry.pop("name", "?")
        name = ABBREVIATIONS.get(name, name)
        params = ",".join(f"{k}={v}" for k, v in entry.items())
        parts.append(f"{name}({params})" if params else name)
    return HYBRID_JOIN.join(parts)
