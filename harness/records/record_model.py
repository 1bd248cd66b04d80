"""The record's types (docs/record.md), checked as a record is read (`checked`): every key the
harness writes, its type, and which keys an older record may lack (null by default). A key
the record does not declare, or a value of another type, is refused with the key's path. An
older record is brought up to this version's layout (`SCHEMA_VERSION`, `migrated`) as every
reader of records gets it (`read_summary`, `records_of`), so that no reader keeps a fallback
of its own."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config.hashing import identity_hash
from harness.readouts.capacity import INTERVAL, LEFT, RIGHT, VERDICTS
from harness.records.schema import FAILED, SCHEMA_VERSION, STATUSES

Number = int | float


class Block(BaseModel):
    """A block of the record: only its declared keys."""

    model_config = ConfigDict(extra="forbid")


class StateBlock(Block):
    """`state`: the floats a layer carries to the next token, and its rank bound (§17)."""

    floats_per_layer: Number
    bytes_per_layer: Number
    bytes_total: Number
    grows_with_seq_len: bool
    mixer_floats_per_layer: Number | None = None
    conv_floats_per_layer: Number | None = None
    rank_bound_per_layer: Number | None = None
    floats_stack: Number | None = None
    mixer_floats_stack: Number | None = None
    rank_bound_stack: Number | None = None
    knob: dict | None = None
    layers: list[dict] | None = None


class TrainBlock(Block):
    """`train`: how long it trained, its validation curve, and whether it converged."""

    steps: int
    epochs: Number
    wall_s: Number
    tokens_per_s: Number | None
    resumed_from_step: int | None
    segments: list[dict]
    val_curve: list[list[Number | None]]  # null: a NaN accuracy
    converged: bool
    floor: Number | None = None  # without it a reader keeps `converged` as it is
    val_standard_error: Number | None = None
    stopped_by: str | None = None
    diverged_at_step: int | None = None


Censoring = Literal[LEFT, RIGHT, INTERVAL] | None


class CapacityBlock(Block):
    """`capacity`: the load curve's readouts (`harness.readouts.capacity.readout`)."""

    load: str
    threshold: Number
    n90: Number | None
    n50: Number | None
    verdict: Literal[VERDICTS] | None  # None: no tested load's floor lets a fall be judged
    judged_at: int | None = None
    censored: list[str] = []
    n90_censoring: Censoring = None
    n50_censoring: Censoring = None
    n90_se: Number | None = None
    n50_se: Number | None = None
    n90_se_log: Number | None = None
    n50_se_log: Number | None = None
    n90_low: Number | None = None
    n90_high: Number | None = None
    n50_low: Number | None = None
    n50_high: Number | None = None
    training: str | None = None
    why: str | None = None


class ProtocolBlock(Block):
    """`protocol`: what the capacity protocol derived from the cell's rank bound."""

    rank_bound_stack: int | None
    loads: list[int]
    seq_len: int


class ThreadsBlock(Block):
    """`threads`: the torch threads at the start, why, and each change while training."""

    count: int
    why: str
    changes: list[list[int]]


class WandbRunBlock(Block):
    """`wandb`: the run's W&B mode, id and local folder."""

    mode: str
    id: str
    run_dir: str


class EvaluatedBlock(Block):
    """`evaluated`: in a re-test's record, the run it re-tested."""

    run_dir: str
    overrides: list[str]
    trained_seq_len: int | None


class Record(Block):
    """A run's `results.json` (and a line of a sweep's `summary.jsonl`): the one declaration of
    its keys, their types and the value a run starts with (`harness.records.record.new_record`
    fills the rest in as the run goes). A key an older record lacks reads as its default."""

    schema_version: Literal[SCHEMA_VERSION] = SCHEMA_VERSION
    status: Literal[STATUSES] = FAILED  # until the run finishes
    task: str | None
    model: str | None
    task_params: dict
    model_params: dict
    seq_len: int | None
    seed: int | None
    config_hash: str | None = None
    commit: str | None = None  # `git rev-parse HEAD` of the code that ran it; null outside git
    choices: dict[str, str | None] = {}  # each config group's option: a swept +state_size too
    num_params: int | None = None
    state: StateBlock | None = None
    metrics: dict[str, Number | None] = {}
    train: TrainBlock | None = None
    capacity: CapacityBlock | None = None  # tested over a range of loads
    protocol: ProtocolBlock | None = None  # capacity.protocol=true
    threads: ThreadsBlock | None = None
    wandb: WandbRunBlock | None = None
    weights: str | None = None  # the kept final weights' path with checkpoint.keep=true
    evaluated: EvaluatedBlock | None = None
    error: str | None = None
    finished_at: str | None = None
    run_dir: str
    config: dict | None = None


class NotARecord(ValueError):
    """A file or line that is not a record: where, which key, and what is wrong with it."""


def checked(record: dict, where: str = "record") -> dict:
    """`record` itself once it has the record's types; else `NotARecord` naming `where`, the
    first offending key's path and what is wrong with it."""
    try:
        Record.model_validate(record)
    except ValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        raise NotARecord(f"{where}: {path}: {first['msg']}") from None
    return record


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
