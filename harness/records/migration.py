"""An older record brought up to this version's layout (`harness.records.schema.SCHEMA_VERSION`),
as every reader of records gets it (`read_summary`, `records_of`), so that no reader keeps a
fallback of its own."""

from harness.config.hashing import identity_hash
from harness.records.schema import SCHEMA_VERSION


def migrated(record: dict) -> dict:
    """`record` in the current layout; a current one is returned as it is. From version 1
    (no `schema_version`):
    - `config_hash` recomputed from the record's own `config` by the settings' roles, so that
      an older run and a rerun of its command share a hash (a sweep rerun into its folder skips
      it); a record without its config keeps its hash;
    - its `state` completed (`completed_state`)."""
    if record.get("schema_version", 1) >= SCHEMA_VERSION:
        return record
    upgraded = {**record, "schema_version": SCHEMA_VERSION}
    config = record.get("config")
    if isinstance(config, dict):
        upgraded["config_hash"] = identity_hash(config)
    if isinstance(record.get("state"), dict):
        backbone = (config or {}).get("backbone") or {}
        upgraded["state"] = completed_state(record["state"], backbone)
    return upgraded


def completed_state(state: dict, backbone: dict) -> dict:
    """A version-1 `state` with the keys later records always have: the mixer's floats per
    layer (the whole state less the block's short convolution window, (kernel - 1) x d_model),
    the convolutions' floats (the rest), and the stack's rank bound (the per-layer bound times
    the layers)."""
    state = dict(state)
    floats = state.get("floats_per_layer")
    if state.get("mixer_floats_per_layer") is None and floats is not None:
        kernel, width = backbone.get("short_conv") or 0, backbone.get("d_model") or 0
        state["mixer_floats_per_layer"] = floats - max(kernel - 1, 0) * width
    mixer = state.get("mixer_floats_per_layer")
    if state.get("conv_floats_per_layer") is None and None not in (floats, mixer):
        state["conv_floats_per_layer"] = floats - mixer
    per_layer, layers = state.get("rank_bound_per_layer"), backbone.get("n_layers")
    if state.get("rank_bound_stack") is None and None not in (per_layer, layers):
        state["rank_bound_stack"] = per_layer * layers
    return state
