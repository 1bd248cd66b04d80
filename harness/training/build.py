"""From a resolved config to the parts of a run (task, model, data, Lightning module), or a
`BadInput` that names the full key, the value and what is allowed, before any training."""

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.command_line import check_added_keys  # the check of `+keys`, re-exported
from harness.config.hashing import params_of
from harness.config.hydra_job import touched_keys
from harness.config.refusal import BadInput, as_bad_input, check_run
from harness.training.data_module import TaskDataModule, mixture_from_config
from harness.training.lightning_module import RecallModule
from models import MIXERS
from models.backbone import LanguageModel
from models.stack import HYBRID, resolved_layers
from tasks import Task, build_task

__all__ = ["BadInput", "BuiltRun", "build", "check_added_keys", "resolved_model_params"]


@dataclass
class BuiltRun:
    """What `build` makes of a run's config: its task, model, data and Lightning module."""

    task: Task
    model: LanguageModel
    data: TaskDataModule
    module: RecallModule


def resolved_model_params(cfg: DictConfig) -> dict:
    """The mixer's parameters with the constructor's defaults filled in (a hybrid: each of
    its layers')."""
    if cfg.model.name == HYBRID:
        return {"layers": resolved_layers(params_of(cfg.model)["layers"])}
    defaults = MIXERS.defaults(cfg.model.name)
    defaults.pop("d_model", None)
    return {**defaults, **params_of(cfg.model)}


def owned_by(error: ValueError, cfg: DictConfig, groups: tuple[str, ...]) -> BadInput:
    """A constructor's `common.checks.InvalidValue` (`name=value is invalid`) with the name's
    full key (`model.feature_dim`), found in the first of `groups` that has it. When the user
    did not set that key but set others of its group, the message says which
    (`task.vocab_size=8` makes the default `num_kv_pairs` invalid)."""
    message, name = str(error), getattr(error, "name", None)
    root = None if name is None else name.split("[", 1)[0]  # layers[1].n_heads: model.layers
    group = next((g for g in groups if root is not None and root in cfg[g]), None)
    if group is None:
        return BadInput(message)
    key = f"{group}.{name}"
    touched = touched_keys()
    given = sorted(k for k in touched if k.startswith(f"{group}.") and k != key)
    set_by_user = any(key == k or key.startswith((f"{k}.", f"{k}[")) for k in touched)
    if touched and not set_by_user and given:
        values = ", ".join(f"{k}={OmegaConf.select(cfg, k)}" for k in given)
        return BadInput(f"{group}.{message} (the default {key}, invalid with {values})")
    return BadInput(f"{group}.{message}")


def as_container(node: Any) -> Any:
    """A config node as plain Python containers (None stays None)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def build_data(cfg: DictConfig, task: Task, eval_seq_lens: list[int]) -> TaskDataModule:
    """The task's data module from `cfg.data` and the task's mixture and test overrides; a
    bad mixture or test override is refused naming its full key (task.test.<name>)."""
    with as_bad_input():
        return TaskDataModule(
            task,
            num_train=cfg.data.num_train,
            num_val=cfg.data.num_val,
            num_test=cfg.data.num_test,
            batch_size=cfg.data.batch_size,
            seed=cfg.data.seed,
            eval_seq_lens=eval_seq_lens,
            mixture=mixture_from_config(as_container(cfg.task.get("mixture"))),
            test_overrides=as_container(cfg.task.get("test")),
        )


def build(cfg: DictConfig) -> BuiltRun:
    """Construct task, model and data, or raise `BadInput` before any training."""
    check_run(cfg)
    try:
        task = build_task(cfg.task.name, **params_of(cfg.task))
    except ValueError as error:
        raise owned_by(error, cfg, ("task",)) from error
    eval_seq_lens = list(cfg.task.get("eval_seq_lens") or [])
    data = build_data(cfg, task, eval_seq_lens)
    positions = data.max_seq_len if cfg.backbone.pos_emb == "none" else data.max_train_seq_len
    torch.manual_seed(cfg.seed)
    try:
        model = LanguageModel(
            vocab_size=task.vocab_size,
            max_seq_len=positions,
            mixer=cfg.model.name,
            mixer_params=params_of(cfg.model),
            **cfg.backbone,
        )
    except ValueError as error:
        raise owned_by(error, cfg, ("model", "backbone")) from error
    try:
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
    return BuiltRun(task, model, data, module)
