"""From a resolved config to the parts of a run (task, model, data, Lightning module), or a
`BadInput` that names the full key, the value and what is allowed, before any training."""

import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from common.checks import is_int, is_real, require, require_choice, require_int
from harness.data import TaskDataModule
from harness.devices import check_devices
from harness.module import RecallModule
from harness.optim import DECAY_CHOICES, SCHEDULES
from harness.results import params_of
from models import MIXERS
from models.backbone import LanguageModel
from tasks import Task, build_task

CONF = Path(__file__).resolve().parents[1] / "conf"


class BadInput(ValueError):
    """A user's mistake found before training: the message names parameter, value, allowed."""


@dataclass
class Parts:
    task: Task
    model: LanguageModel
    data: TaskDataModule
    module: RecallModule


def resolved_model_params(cfg: DictConfig) -> dict:
    """The mixer's parameters with the constructor's defaults filled in."""
    defaults = MIXERS.defaults(cfg.model.name)
    defaults.pop("d_model", None)
    return {**defaults, **params_of(cfg.model)}


NOT_ONLY_NUMBERS = ("trainer.devices",)
"""Keys with a numeric default that also take other values (`devices: auto`)."""


@cache
def numeric_defaults() -> dict[str, float]:
    """Keys whose default (conf/config.yaml, conf/trainer/default.yaml) is a number."""
    files = {"": CONF / "config.yaml", "trainer.": CONF / "trainer" / "default.yaml"}
    numeric = {}
    for prefix, path in files.items():
        tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        tree.pop("defaults", None)
        tree.pop("hydra", None)
        for key, value in leaves(tree, prefix):
            if is_real(value) and key not in NOT_ONLY_NUMBERS:
                numeric[key] = value
    return numeric


def leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) of every non-dict value of a nested dict."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def check_run_settings(cfg: DictConfig) -> None:
    """The harness's own settings (the constructors check their parameters): every key whose
    default is a number must be one, then the ranges."""
    require_int("seed", cfg.seed, 0)
    require_int("threads", cfg.get("threads", 0), 0)
    compile_ = cfg.get("compile", False)
    require(isinstance(compile_, bool), "compile", compile_, "true or false")
    require_int("trainer.max_steps", cfg.trainer.max_steps, 1)
    for key in ("num_train", "num_val", "num_test", "batch_size"):
        require_int(f"data.{key}", cfg.data[key], 1)
    require_int("data.seed", cfg.data.seed, 0)
    for key in numeric_defaults():
        value = OmegaConf.select(cfg, key, default=None)
        require(value is None or is_real(value), key, value, "a number")
    optim = cfg.optim
    require(is_real(optim.lr) and optim.lr > 0, "optim.lr", optim.lr, "> 0")
    require(
        is_real(optim.weight_decay) and optim.weight_decay >= 0,
        "optim.weight_decay",
        optim.weight_decay,
        ">= 0",
    )
    require_choice("optim.decay", optim.decay, DECAY_CHOICES)
    require_choice("optim.schedule", optim.schedule, SCHEDULES)
    require(
        is_real(optim.warmup_fraction) and 0 <= optim.warmup_fraction <= 1,
        "optim.warmup_fraction",
        optim.warmup_fraction,
        "a fraction of trainer.max_steps in [0, 1]",
    )
    require(
        is_real(optim.min_lr_ratio) and 0 <= optim.min_lr_ratio <= 1,
        "optim.min_lr_ratio",
        optim.min_lr_ratio,
        "in [0, 1]",
    )
    require(
        optim.grad_clip is None or (is_real(optim.grad_clip) and optim.grad_clip > 0),
        "optim.grad_clip",
        optim.grad_clip,
        "null (no clipping) or > 0",
    )
    require(
        cfg.trainer.get("gradient_clip_val") is None,
        "trainer.gradient_clip_val",
        cfg.trainer.get("gradient_clip_val"),
        "unset: the clip value lives in optim.grad_clip",
    )
    require_int("plateau.patience", cfg.plateau.patience, 1)
    require(
        is_real(cfg.plateau.min_delta) and cfg.plateau.min_delta >= 0,
        "plateau.min_delta",
        cfg.plateau.min_delta,
        ">= 0",
    )
    require(isinstance(cfg.plateau.stop, bool), "plateau.stop", cfg.plateau.stop, "true or false")
    early = cfg.get("early_stop_acc")
    never = "null (never stop on accuracy) or a number in (0, 1]"
    require(early is None or (is_real(early) and 0 < early <= 1), "early_stop_acc", early, never)
    interval = cfg.trainer.get("val_check_interval")
    every = is_int(interval) and interval >= 1
    fraction = isinstance(interval, float) and 0 < interval <= 1
    allowed = "an integer >= 1 (steps) or a fraction in (0, 1] (of trainer.max_steps)"
    require(every or fraction, "trainer.val_check_interval", interval, allowed)
    for length in cfg.task.get("eval_seq_lens") or []:
        require_int("task.eval_seq_lens", length, 1)


def check_added_keys(overrides: list[str], known: set[str], groups: set[str]) -> None:
    """Refuse `+key=value` (and `++key=value`) for a key the harness does not read: Hydra would
    add it to the config, change the config hash, and nothing would use it.

    `known`: every key of the config composed without these overrides; `groups`: the config
    groups (`model`, `hydra/launcher`, ...), which `+group=option` may add. Keys under `hydra.`
    are Hydra's; `trainer.<name>` may add any argument of Lightning's `Trainer`."""
    trainer_args = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override.lstrip("+").split("=", 1)[0].split("@", 1)[0]
        group, _, name = key.partition(".")
        if key in known or key in groups or group == "hydra":
            continue
        if group == "trainer" and name in trainer_args:
            continue
        raise BadInput(f"{override} is refused: {key} is not a setting {did_you_mean(key, known)}")


def did_you_mean(key: str, known: set[str]) -> str:
    """`(did you mean optim.lr?)` when a known key ends with the same name, else the rule."""
    name = key.rsplit(".", 1)[-1]
    close = sorted(k for k in known if k.rsplit(".", 1)[-1] == name)
    if close:
        return f"(did you mean {' or '.join(close)}?)"
    return "(`python run.py --cfg job` lists every key; + only adds keys the harness reads)"


def touched_keys() -> set[str]:
    """The keys this run's command line set (empty outside a Hydra app)."""
    if not HydraConfig.initialized():
        return set()
    overrides = HydraConfig.get().overrides.task
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def owned_by(error: ValueError, cfg: DictConfig, groups: tuple[str, ...]) -> BadInput:
    """The constructor's `name=value is invalid` with the name's full key (`model.feature_dim`),
    found in the first of `groups` that has it. When the user did not set that key but set
    others of its group, the message says which (`task.vocab_size=8` makes the default
    `num_kv_pairs` invalid)."""
    message = str(error)
    match = re.match(r"(\w+)=", message)
    group = next((g for g in groups if match and match[1] in cfg[g]), None)
    if group is None:
        return BadInput(message)
    key = f"{group}.{match[1]}"
    touched = touched_keys()
    given = sorted(k for k in touched if k.startswith(f"{group}.") and k != key)
    if touched and key not in touched and given:
        values = ", ".join(f"{k}={OmegaConf.select(cfg, k)}" for k in given)
        return BadInput(f"{group}.{message} (the default {key}, invalid with {values})")
    return BadInput(f"{group}.{message}")


def build(cfg: DictConfig) -> Parts:
    """Construct task, model and data, or raise `BadInput` before any training."""
    try:
        check_run_settings(cfg)
    except ValueError as error:
        raise BadInput(str(error)) from error
    try:
        check_devices(cfg)
    except ValueError as error:
        raise BadInput(str(error)) from error
    try:
        task = build_task(cfg.task.name, **params_of(cfg.task))
    except ValueError as error:
        raise owned_by(error, cfg, ("task",)) from error
    eval_seq_lens = list(cfg.task.get("eval_seq_lens") or [])
    torch.manual_seed(cfg.seed)
    try:
        longest = max([task.seq_len, *eval_seq_lens])
        model = LanguageModel(
            vocab_size=task.vocab_size,
            max_seq_len=longest if cfg.backbone.pos_emb == "none" else task.seq_len,
            mixer=cfg.model.name,
            mixer_params=params_of(cfg.model),
            **cfg.backbone,
        )
    except ValueError as error:
        raise owned_by(error, cfg, ("model", "backbone")) from error
    try:
        data = TaskDataModule(
            task,
            num_train=cfg.data.num_train,
            num_val=cfg.data.num_val,
            num_test=cfg.data.num_test,
            batch_size=cfg.data.batch_size,
            seed=cfg.data.seed,
            eval_seq_lens=eval_seq_lens,
            cache_dir=cfg.data.cache_dir,
        )
        for seq_len in data.test_seq_lens:
            model.check_length(seq_len)
    except ValueError as error:
        raise BadInput(f"task.eval_seq_lens={eval_seq_lens}: {error}") from error
    if cfg.get("compile", False):
        model.compile()  # in place: the same module, state_dict keys and checkpoints
    module = RecallModule(
        model,
        cfg.optim.lr,
        cfg.optim.weight_decay,
        data.test_seq_lens,
        decay=cfg.optim.decay,
        schedule=cfg.optim.schedule,
        warmup_fraction=cfg.optim.warmup_fraction,
        min_lr_ratio=cfg.optim.min_lr_ratio,
    )
    return Parts(task, model, data, module)
