"""From a resolved config to the parts of a run (task, model, data, Lightning module), or a
`BadInput` that names the full key, the value and what is allowed, before any training."""

from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from common.checks import is_real, require, require_choice, require_int
from harness.data import TaskDataModule
from harness.devices import check_devices
from harness.module import RecallModule
from harness.optim import DECAY_CHOICES, SCHEDULES
from harness.results import params_of
from models import MIXERS
from models.backbone import LanguageModel
from tasks import Task, build_task


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


def check_run_settings(cfg: DictConfig) -> None:
    """The harness's own settings (the constructors check their parameters)."""
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
    require(
        cfg.early_stop_acc is None or (is_real(cfg.early_stop_acc) and 0 < cfg.early_stop_acc <= 1),
        "early_stop_acc",
        cfg.early_stop_acc,
        "null (never stop on accuracy) or in (0, 1]",
    )
    require_int("plateau.patience", cfg.plateau.patience, 1)
    require(
        is_real(cfg.plateau.min_delta) and cfg.plateau.min_delta >= 0,
        "plateau.min_delta",
        cfg.plateau.min_delta,
        ">= 0",
    )
    require(isinstance(cfg.plateau.stop, bool), "plateau.stop", cfg.plateau.stop, "true or false")
    require_int("trainer.max_steps", cfg.trainer.max_steps, 1)
    for key in ("num_train", "num_val", "num_test", "batch_size"):
        require_int(f"data.{key}", cfg.data[key], 1)


def build(cfg: DictConfig) -> Parts:
    """Construct task, model and data, or raise `BadInput` before any training."""
    try:
        check_run_settings(cfg)
        check_devices(cfg)
        task = build_task(cfg.task.name, **params_of(cfg.task))
        eval_seq_lens = list(cfg.task.get("eval_seq_lens") or [])
        torch.manual_seed(cfg.seed)
        longest = max([task.seq_len, *eval_seq_lens])
        model = LanguageModel(
            vocab_size=task.vocab_size,
            max_seq_len=longest if cfg.backbone.pos_emb == "none" else task.seq_len,
            mixer=cfg.model.name,
            mixer_params=params_of(cfg.model),
            **cfg.backbone,
        )
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
        raise BadInput(str(error)) from error
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
