"""The run-level settings, declared once: every key the harness reads at the top of the config
(`seed`, `threads`, `plateau.*`, `data.*`, `checkpoint.*`, `optim.*`, ...) and every key it
passes on to Lightning (`trainer.*`) and to W&B (`logger.*`), with its type, its range or
choices and its default (as Zoology's `TrainConfig`).

    from harness.config.settings import check_settings, declared, RunSettings
    RunSettings().optim.lr                  # 0.002, the default
    declared()["optim.lr"].allowed          # "a number > 0"
    check_settings(cfg)                     # ValueError: optim.lr=0 is invalid: must be > 0

The declaration is both the check and the default: `conf/config.yaml`,
`conf/trainer/default.yaml` and `conf/logger/wandb.yaml` list the same keys with the same
values, so that `python run.py --cfg job` shows every knob, and `tests/test_configs.py` holds
them to it. A group's own keys are declared elsewhere: `task.*` and `model.*` by the
registered constructors, `backbone.*` by `models.backbone.LanguageModel`.

Types: `int`, `float` (an int is a number too), `bool` (`true`/`false`, never a word such as
`yes`), `str`, `Literal[...]` (one of the choices), `X | None` (null allowed, with the meaning
given); a key whose choices are Lightning's (`trainer.precision`, `trainer.strategy`) names the
function that lists them (`choices=`), called when such a key is checked: importing this module
imports neither torch nor Lightning (`python run.py --help` answers before them), and only
`trainer.strategy`'s list needs Lightning imported (`needs_import`). A key
declared with `ABSENT` is not in the default config (a group option such as `trainer=ddp` sets
it, or `+trainer.<key>=` adds it) and is checked when present."""

import functools
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from common.checks import is_int
from harness.config.declared_setting import IDENTITY, PLUMBING, READOUT, Setting, setting
from harness.config.figure_specs import specs_of
from harness.config.framework_internals import lightning_precisions
from harness.readouts.convergence import MIN_DELTA

DECAY_CHOICES = ("matrices", "all")
"""`optim.decay`: weight decay on weight matrices only, or on every parameter."""
SCHEDULES = ("cosine", "constant")
"""`optim.schedule`: after the linear warm-up."""


class _Absent:
    """The marker of a key that the default config does not have."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""The default of a key that the default config does not have."""

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
"""`trainer.accelerator`; `harness.config.devices` checks the request against the machine."""


@functools.cache
def precisions() -> tuple:
    """Lightning's `precision` values (`32-true`, `bf16-mixed`, `16-mixed`, 32, ...)."""
    return lightning_precisions()


@functools.cache
def strategies() -> tuple:
    """Lightning's registered strategies (`ddp`, `ddp_spawn`, `fsdp`, ...);
    `harness.config.devices` narrows them for a data-parallel run."""
    from lightning.pytorch.strategies import StrategyRegistry

    return ("auto", *StrategyRegistry.available_strategies())


GROUP_ROLES = {"model.mode": PLUMBING, "model.chunk_size": PLUMBING}
"""Roles of keys of the model and task groups (declared by their constructors): every mode
of a mixer computes the same outputs (`models/kernels/`), so its mode and chunk size are
plumbing."""

WANDB_MODES = ("offline", "online", "disabled")
LOGGERS = ("none", "wandb")
"""The `logger` group's options (conf/logger/<name>.yaml), each naming itself in `name`."""


def steps_or_fraction(value: Any) -> bool:
    """`trainer.val_check_interval`: a number of steps (an int >= 1), or a fraction of the
    training budget (a float in (0, 1])."""
    return (is_int(value) and value >= 1) or (isinstance(value, float) and 0 < value <= 1)


@dataclass(frozen=True)
class Plateau:
    """A run has converged when the last third of its training gained less than twice the
    validation accuracy's standard error (`harness.readouts.convergence.still_rising`); it has
    left the floor when its best validation beat the binding-free floor by more than
    max(`min_delta`, a tenth of the way to perfect recall)."""

    min_delta: float = setting(MIN_DELTA, low=0)


@dataclass(frozen=True)
class Capacity:
    """The load curve's readout (`harness.readouts.capacity`): the accuracy a load must reach to
    count as held (`capacity.n90`) and to pass the limit verdict; and the capacity protocol
    (`harness.config.capacity_protocol`), whose settings set the loads a run trains and tests
    on, and so its identity (`harness.config.hashing`: only while the protocol is on)."""

    threshold: float = setting(0.9, above=0, high=1, role=READOUT)
    protocol: bool = setting(False)
    bound_multiple: float = setting(2, low=1)
    max_load: int | None = setting(None, low=1, none="derived from the rank bound")


@dataclass(frozen=True)
class Data:
    """Examples per split and per optimiser step (the global batch under data parallelism),
    and the data seed (`harness.training.data_module`)."""

    num_train: int = setting(100000, low=1)
    num_val: int = setting(1000, low=1)
    num_test: int = setting(2000, low=1)
    batch_size: int = setting(64, low=1)
    seed: int = setting("${seed}", low=0)


@dataclass(frozen=True)
class Checkpoint:
    """Kill-safe training state, and the final weights a run may keep
    (`harness.training.checkpoint`)."""

    dir: str = setting("${oc.env:RECALL_HARNESS_CKPT,outputs/checkpoints}", role=PLUMBING)
    keep: bool = setting(False, role=PLUMBING)


@dataclass(frozen=True)
class Optim:
    """AdamW, warm-up then cosine, gradient clipping (`harness.training.optimizer`)."""

    lr: float = setting(0.002, above=0)
    weight_decay: float = setting(0.1, low=0)
    decay: Literal[DECAY_CHOICES] = "matrices"
    schedule: Literal[SCHEDULES] = "cosine"
    warmup_fraction: float = setting(0.05, low=0, high=1, note="a fraction of trainer.max_steps")
    min_lr_ratio: float = setting(0.1, low=0, high=1)
    grad_clip: float | None = setting(1.0, above=0, none="no clipping")


@dataclass(frozen=True)
class Trainer:
    """The arguments of Lightning's `Trainer` that the configs set (`conf/trainer/`); device
    requests are checked against the machine by `harness.config.devices`."""

    accelerator: Literal[ACCELERATORS] = setting("auto", role=PLUMBING)
    devices: Any = setting(
        1, check=lambda _: True, allowed="checked by harness.config.devices", role=PLUMBING
    )
    precision: Any = setting("32-true", choices=precisions)
    max_steps: int = setting(1200, low=1)
    max_epochs: int | None = setting(
        -1, low=-1, none="no epoch limit", note="-1: no limit", role=PLUMBING
    )
    val_check_interval: int | float = setting(
        100,
        check=steps_or_fraction,
        allowed="an integer >= 1 (steps) or a fraction in (0, 1] (of trainer.max_steps)",
    )
    check_val_every_n_epoch: int | None = setting(
        None, low=1, none="validate by steps only", role=PLUMBING
    )
    num_sanity_val_steps: int = setting(
        0, low=-1, note="-1: the whole validation set", role=PLUMBING
    )
    log_every_n_steps: int = setting(20, low=1, role=PLUMBING)
    enable_progress_bar: bool = setting(True, role=PLUMBING)
    enable_model_summary: bool = setting(False, role=PLUMBING)
    deterministic: bool | Literal["warn"] = setting(
        False,
        check=lambda v: isinstance(v, bool) or v == "warn",
        allowed="true, false or warn",
        role=PLUMBING,
    )
    use_distributed_sampler: bool = setting(False, role=PLUMBING)
    strategy: Any = setting(ABSENT, choices=strategies, needs_import=True, role=PLUMBING)
    num_nodes: int = setting(ABSENT, low=1, role=PLUMBING)
    gradient_clip_val: None = setting(
        ABSENT, check=lambda v: v is None, allowed="unset: the clip value lives in optim.grad_clip"
    )


@dataclass(frozen=True)
class Logger:
    """W&B (`harness.records.wandb_run`); `logger=none` has only `name`."""

    name: Literal[LOGGERS] = setting("wandb", role=PLUMBING)
    project: str = setting("recall-harness", role=PLUMBING)
    entity: str | None = setting(None, none="your default W&B entity", role=PLUMBING)
    mode: Literal[WANDB_MODES] = setting("offline", role=PLUMBING)
    init_timeout: float = setting(15, above=0, note="seconds", role=PLUMBING)


def figures_ok(value: Any) -> bool:
    """`report.figures`: figures the report can draw (`harness.config.figure_specs`); a
    mistake raises its own `ValueError`, naming the figure's key."""
    specs_of(OmegaConf.to_container(value) if isinstance(value, DictConfig) else value)
    return True


@dataclass(frozen=True)
class Report:
    """The figures a preset's report draws (`harness.config.figure_specs`); how records are
    read, not what a run measures."""

    figures: Any = setting(
        ABSENT,
        check=figures_ok,
        allowed="a mapping from file name to {kind, x, panels, ticks, hue} "
        "(harness/config/figure_specs.py)",
        role=READOUT,
    )


@dataclass(frozen=True)
class RunSettings:
    """Every run-level setting (the top-level keys of `conf/config.yaml`, and `trainer`,
    `logger`)."""

    seed: int = setting(0, low=0)
    threads: int = setting(0, low=0, note="0: the free cores' share", role=PLUMBING)
    resume: bool = setting(True, role=PLUMBING)
    compile: bool = setting(False, role=PLUMBING)
    early_stop_acc: float | None = setting(0.99, above=0, high=1, none="never stop on accuracy")
    plateau: Plateau = field(default_factory=Plateau)
    capacity: Capacity = field(default_factory=Capacity)
    data: Data = field(default_factory=Data)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    optim: Optim = field(default_factory=Optim)
    trainer: Trainer = field(default_factory=Trainer)
    logger: Logger = field(default_factory=Logger)
    report: Report = field(default_factory=Report)


@functools.cache
def declared(cls: type = RunSettings, prefix: str = "") -> dict[str, Setting]:
    """Every declared key (`optim.lr`, `trainer.precision`, ...) in declaration order."""
    out: dict[str, Setting] = {}
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        kind = hints[f.name]
        if is_dataclass(kind):
            out.update(declared(kind, f"{prefix}{f.name}."))
        else:
            key = f"{prefix}{f.name}"
            out[key] = Setting(key, kind, f.default, dict(f.metadata))
    return out


def role_of(key: str) -> str:
    """A dotted key's role (`IDENTITY`, `PLUMBING`, `READOUT`): declared here or in
    `GROUP_ROLES`; Hydra's own keys are plumbing; any other key (a task's or model's parameter,
    `backbone.*`) is identity."""
    if key == "hydra" or key.startswith("hydra."):
        return PLUMBING
    spec = declared().get(key) or next(  # or a key inside a declared one: report.figures.*
        (s for k, s in declared().items() if key.startswith(f"{k}.")), None
    )
    return spec.role if spec else GROUP_ROLES.get(key, IDENTITY)


def defaults() -> dict[str, Any]:
    """The declared default of every key the default config has (interpolations unresolved)."""
    return {k: s.default for k, s in declared().items() if s.default is not ABSENT}


def check_settings(cfg: DictConfig, needs_import: bool | None = None) -> None:
    """Hold a composed config to the declaration: every declared key it has must be of the
    declared type, in range; raises one `ValueError` naming the full key, the value and what
    is allowed. Keys the config does not have (`logger.project` with `logger=none`) pass.
    `needs_import` narrows the check to the keys whose choices need a framework imported
    (True: `trainer.strategy`) or to the others (False), which import neither torch nor
    Lightning; None checks every key."""
    for key, spec in declared().items():
        value = OmegaConf.select(cfg, key, default=ABSENT)
        narrowed = needs_import is not None and needs_import != bool(spec.meta.get("needs_import"))
        if value is ABSENT or narrowed:
            continue
        spec.check(value)
