"""The run-level settings as Hydra structured configs: each dataclass field is a setting's
default, its type and its place in the schema at once (the `schema` node of Hydra's ConfigStore,
the first entry of `conf/config.yaml`'s defaults list), so Hydra itself refuses an unknown key
(`optim.lrr=1`) or a wrong type (`optim.lr=abc`) while it composes. A field's metadata adds
what a type cannot say: its range or choices (`check_settings`, the one place ranges are
checked) and its role (identity, plumbing or readout: `role_of`).

    python run.py --cfg job                  # every setting with its value
    RunSettings().optim.lr                   # 0.002, the default
    role_of("threads")                       # "plumbing"

A group's own keys are declared elsewhere: `task.*` and `model.*` by the registered
constructors (`harness.config.group_nodes`), `backbone.*` by conf/backbone/. Importing this
module imports neither torch nor Lightning."""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from common.checks import is_int, is_real, require
from harness.config.figure_specs import specs_of
from harness.readouts.convergence import MIN_DELTA

IDENTITY = "identity"
"""A setting that changes what a run measures: in the config hash, a column of the report."""
PLUMBING = "plumbing"
"""A setting that says where and how a run is carried out, every value giving the same outcome
(threads, devices, logging, a mixer's computation mode): neither in the config hash nor a
column of the report, which lists it apart."""
READOUT = "readout"
"""A setting that says how a record is read (the load curve's threshold): not in the config
hash, since the report reads a record anew under another value."""

Check = tuple[Callable[[Any], bool], str]
"""A range or choice: the test a value must pass, and what it allows in words."""


class Setting(NamedTuple):
    """A declared key's default, range or choices, and role."""

    default: Any
    check: Check | None
    role: str


def at_least(low: float, note: str = "") -> Check:
    return (lambda v: is_real(v) and v >= low), f"a number >= {low}{note}"


def above(low: float, note: str = "") -> Check:
    return (lambda v: is_real(v) and v > low), f"a number > {low}{note}"


def fraction(low_open: bool = False, note: str = "") -> Check:
    test = (lambda v: 0 < v <= 1) if low_open else (lambda v: 0 <= v <= 1)
    return (lambda v: is_real(v) and test(v)), f"a number in {'(' if low_open else '['}0, 1]{note}"


def one_of(*choices: Any) -> Check:
    return (lambda v: v in choices and not isinstance(v, bool)), "one of " + ", ".join(
        dict.fromkeys(map(str, choices))
    )


def setting(default: Any, check: Check | None = None, role: str | None = None) -> Any:
    """A field: its default, its range or choices (`check`) and its role (None: its
    section's)."""
    return field(default=default, metadata={"check": check, "role": role})


def group(cls: type, role: str = IDENTITY) -> Any:
    """A section of settings (`optim`, `data`, ...), every key of it of `role` unless its own
    field says otherwise."""
    return field(default_factory=cls, metadata={"role": role})


DECAY_CHOICES = ("matrices", "all")
"""`optim.decay`: weight decay on weight matrices only, or on every parameter."""
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
"""`trainer.accelerator`; `harness.config.devices` checks the request against the machine."""
PRECISIONS = (64, 32, 16, "transformer-engine", "transformer-engine-float16", "16-true", "16-mixed")
PRECISIONS += ("bf16-true", "bf16-mixed", "32-true", "64-true", "64", "32", "16", "bf16")
"""Lightning's `precision` values (its `_PRECISION_INPUT`; `tests/test_configs.py` holds the two
equal), here so that a refusal comes before Lightning is imported."""
STRATEGIES = ("auto", "ddp")
"""`trainer.strategy`: the data-parallel strategies a run can record (`harness.config.devices`)."""
LOGGERS = ("none", "wandb")
"""The `logger` group's options (conf/logger/<name>.yaml), each naming itself in `name`."""
STEPS_OR_FRACTION: Check = (
    lambda v: (is_int(v) and v >= 1) or (isinstance(v, float) and 0 < v <= 1),
    "an integer >= 1 (steps) or a fraction in (0, 1] (of trainer.max_steps)",
)


@dataclass
class Plateau:
    """A run has converged when the last third of its training gained less than twice the
    validation accuracy's standard error (`harness.readouts.convergence`); it has left the floor
    when its best validation beat the binding-free floor by more than `min_delta`."""

    min_delta: float = setting(MIN_DELTA, at_least(0))


@dataclass
class Capacity:
    """The load curve's readout (`threshold`: the accuracy a load must reach for `capacity.n90`
    and the limit verdict) and the capacity protocol (`harness.config.capacity_protocol`: its
    loads and context from the stack's rank bound R), which sets the loads a run trains and
    tests on, and so its identity while it is on (`harness.config.hashing`)."""

    threshold: float = setting(0.9, fraction(low_open=True), READOUT)
    protocol: bool = False
    bound_multiple: Any = setting(2, at_least(1))  # Any: an int stays an int in the hash
    max_load: int | None = setting(None, at_least(1, " (null: derived from the rank bound)"))


@dataclass
class Data:
    """Examples per split and per optimiser step (the global batch under data parallelism)
    and the data seed (`harness.training.data_module`)."""

    num_train: int = setting(100000, at_least(1))
    num_val: int = setting(1000, at_least(1))
    num_test: int = setting(2000, at_least(1))
    batch_size: int = setting(64, at_least(1))
    seed: int = setting("${seed}", at_least(0))


@dataclass
class Checkpoint:
    """Kill-safety: rerunning a killed command resumes from `dir`; `keep`: keep the final
    weights as <run dir>/model.pt (`python -m harness.evaluate`)."""

    dir: str = "${oc.env:RECALL_HARNESS_CKPT,outputs/checkpoints}"
    keep: bool = False


@dataclass
class Optim:
    """AdamW, linear warm-up (`warmup_fraction` of `trainer.max_steps`) then cosine decay to
    `min_lr_ratio` x lr (or `constant`), weight decay on weight matrices only (or `all`),
    gradient clipping at a global L2 norm (null: none) (`harness.training.optimizer`)."""

    lr: float = setting(0.002, above(0))
    weight_decay: float = setting(0.1, at_least(0))
    decay: str = setting("matrices", one_of(*DECAY_CHOICES))
    schedule: str = setting("cosine", one_of("cosine", "constant"))
    warmup_fraction: float = setting(0.05, fraction())
    min_lr_ratio: float = setting(0.1, fraction())
    grad_clip: float | None = setting(1.0, above(0, " (null: no clipping)"))


@dataclass
class Trainer:
    """The arguments of Lightning's `Trainer` (`+trainer.<argument>=` adds another); device
    requests are checked against the machine by `harness.config.devices`. `max_steps` is the
    default budget, `val_check_interval` in steps (or a fraction of them)."""

    accelerator: str = setting("auto", one_of(*ACCELERATORS))
    devices: Any = 1
    precision: Any = setting("32-true", one_of(*PRECISIONS), IDENTITY)
    max_steps: int = setting(1200, at_least(1), IDENTITY)
    max_epochs: int | None = setting(-1, at_least(-1, " (-1 or null: no epoch limit)"))
    val_check_interval: Any = setting(100, STEPS_OR_FRACTION, IDENTITY)
    check_val_every_n_epoch: int | None = setting(None, at_least(1))
    num_sanity_val_steps: int = setting(0, at_least(-1, " (-1: the whole validation set)"))
    log_every_n_steps: int = setting(20, at_least(1))
    enable_progress_bar: bool = True
    enable_model_summary: bool = False
    deterministic: Any = setting(False, (lambda v: v in (True, False, "warn"), "true, false, warn"))
    use_distributed_sampler: bool = False  # the data module shards every split per rank itself
    strategy: str = setting("auto", one_of(*STRATEGIES))
    num_nodes: int = setting(1, at_least(1))


@dataclass
class Logger:
    """W&B (`harness.records.wandb_run`): `mode` offline needs no account; `init_timeout`
    seconds before online falls back to offline. `logger=none` logs nothing."""

    name: str = setting("wandb", one_of(*LOGGERS))
    project: str = "recall-harness"
    entity: str | None = None
    mode: str = setting("offline", one_of("offline", "online", "disabled"))
    init_timeout: float = setting(15, above(0, " (seconds)"))


FIGURES: Check = (
    lambda v: (
        v is None or bool(specs_of(OmegaConf.to_container(v) if OmegaConf.is_config(v) else v))
    ),
    "a mapping from file name to {kind, x, panels, ticks, hue} (harness/config/figure_specs.py)",
)


@dataclass
class Report:
    """The figures a preset's report draws (`harness.config.figure_specs`)."""

    figures: Any = setting(None, FIGURES, READOUT)


@dataclass
class RunSettings:
    """Every setting of a run: the groups (`task`, `model`, `backbone`, from their options) and
    the run-level settings. `early_stop_acc`: stop once validation accuracy reaches it (null:
    never); `threads`: torch threads per job (0: its share of the free cores); `resume`: in a
    sweep folder, skip jobs whose config already has an ok record; `compile`: torch.compile the
    model (docs/performance.md)."""

    task: Any = MISSING
    model: Any = MISSING
    backbone: Any = MISSING
    seed: int = setting(0, at_least(0))
    threads: int = setting(0, at_least(0), PLUMBING)
    resume: bool = setting(True, role=PLUMBING)
    compile: bool = setting(False, role=PLUMBING)
    early_stop_acc: float | None = setting(0.99, fraction(True, " (null: never stop early)"))
    plateau: Plateau = group(Plateau)
    capacity: Capacity = group(Capacity)
    data: Data = group(Data)
    checkpoint: Checkpoint = group(Checkpoint, PLUMBING)
    optim: Optim = group(Optim)
    trainer: Trainer = group(Trainer, PLUMBING)
    logger: Logger = group(Logger, PLUMBING)
    report: Report = group(Report, READOUT)


ConfigStore.instance().store(name="schema", node=RunSettings)

GROUP_ROLES = {"model.mode": PLUMBING, "model.chunk_size": PLUMBING}
"""Roles of keys of the model and task groups (declared by their constructors): every mode
of a mixer computes the same outputs (`models/kernels/`), so its mode and chunk size are
plumbing."""


@functools.cache
def declared(cls: type = RunSettings, prefix: str = "", role: str = IDENTITY) -> dict[str, Setting]:
    """Every declared key (`optim.lr`, ...) and its `Setting`, in declaration order;
    a key's role is its field's where it names one, else its section's."""
    out = {}
    for f in fields(cls):
        own = f.metadata.get("role") or role
        if is_dataclass(f.type):
            out.update(declared(f.type, f"{prefix}{f.name}.", own))
        elif f.default is not MISSING:
            out[f"{prefix}{f.name}"] = Setting(f.default, f.metadata.get("check"), own)
    return out


def role_of(key: str) -> str:
    """A dotted key's role (`IDENTITY`, `PLUMBING`, `READOUT`): declared here (a key inside a
    declared one, `report.figures.<name>`, takes its role) or in `GROUP_ROLES`; Hydra's keys are
    plumbing; any other key (a task's or model's parameter, `backbone.*`, a Lightning argument
    added with `+trainer.`) is identity."""
    if key == "hydra" or key.startswith("hydra."):
        return PLUMBING
    keys, inside = declared(), key
    while inside not in keys and "." in inside:
        inside = inside.rpartition(".")[0]
    return keys[inside].role if inside in keys else GROUP_ROLES.get(key, IDENTITY)


def defaults() -> dict[str, Any]:
    """The declared default of every key (interpolations unresolved): `{"optim.lr": 0.002}`."""
    return {key: spec.default for key, spec in declared().items()}


def check_settings(cfg: DictConfig) -> None:
    """Hold a composed config's values to their declared ranges and choices (Hydra has checked
    the types): raises `ValueError("<key>=<value> is invalid: must be <allowed>")` for the
    first that is out. Null passes where the type allows it."""
    for key, spec in declared().items():
        value = OmegaConf.select(cfg, key, default=None)
        if spec.check is not None and value is not None:
            require(spec.check[0](value), key, value, spec.check[1])
    clip = OmegaConf.select(cfg, "trainer.gradient_clip_val", default=None)
    unset = "unset (the clip lives in optim.grad_clip)"
    require(clip is None, "trainer.gradient_clip_val", clip, unset)
