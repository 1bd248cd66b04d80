"""One training run: build everything (validating input), fit, test, write `results.json`."""

import inspect
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.callbacks import EarlyStopping
from omegaconf import DictConfig, OmegaConf

from common.checks import require, require_int
from harness.checkpoint import SaveLast, checkpoint_path, discard, resumable
from harness.data import TaskDataModule
from harness.module import Diverged, RecallModule
from harness.results import append_summary, config_hash, read_summary, write_record
from harness.tracking import finish_wandb, start_wandb
from models import MIXERS
from models.backbone import LanguageModel
from models.mixers.base import DenominatorCollapse
from tasks import Task, build_task

log = logging.getLogger(__name__)


class BadInput(ValueError):
    """A user's mistake found before training: the message names parameter, value, allowed."""


@dataclass
class Parts:
    task: Task
    model: LanguageModel
    data: TaskDataModule
    module: RecallModule


def params_of(cfg_group: DictConfig) -> dict:
    """A registry entry's parameters: its yaml group without `name` (and harness-only keys)."""
    params = OmegaConf.to_container(cfg_group, resolve=True)
    params.pop("name")
    params.pop("eval_seq_lens", None)
    return params


def resolved_model_params(cfg: DictConfig) -> dict:
    """The mixer's parameters with the constructor's defaults filled in."""
    signature = inspect.signature(MIXERS.get(cfg.model.name))
    defaults = {
        name: p.default
        for name, p in signature.parameters.items()
        if name != "d_model" and p.default is not inspect.Parameter.empty
    }
    return {**defaults, **params_of(cfg.model)}


def build(cfg: DictConfig) -> Parts:
    """Construct task, model and data, or raise `BadInput` before any training."""
    try:
        require(cfg.optim.lr > 0, "optim.lr", cfg.optim.lr, "> 0")
        require(cfg.optim.weight_decay >= 0, "optim.weight_decay", cfg.optim.weight_decay, ">= 0")
        require_int("trainer.max_steps", cfg.trainer.max_steps, 1)
        for key in ("num_train", "num_val", "num_test", "batch_size"):
            require_int(f"data.{key}", cfg.data[key], 1)
        task = build_task(cfg.task.name, **params_of(cfg.task))
        eval_seq_lens = list(cfg.task.get("eval_seq_lens") or [])
        torch.manual_seed(cfg.seed)
        model = LanguageModel(
            vocab_size=task.vocab_size,
            max_seq_len=max([task.seq_len, *eval_seq_lens])
            if cfg.backbone.pos_emb == "none"
            else task.seq_len,
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
    module = RecallModule(model, cfg.optim.lr, cfg.optim.weight_decay, data.test_seq_lens)
    return Parts(task, model, data, module)


def state_record(model: LanguageModel, seq_len: int) -> dict:
    """Recurrent state needed to produce the next token at `seq_len` (DESIGN.md `state`)."""
    floats = model.state_size(seq_len)
    bytes_per_float = next(model.parameters()).element_size()
    return {
        "floats_per_layer": floats,
        "bytes_per_layer": floats * bytes_per_float,
        "bytes_total": floats * bytes_per_float * len(model.blocks),
        "grows_with_seq_len": model.state_size(2 * seq_len) > floats,
    }


def sweep_dir() -> Path | None:
    """The multirun's folder when this job is part of one."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir)
    return None


def job_threads(cfg: DictConfig) -> int:
    """`threads`, or for parallel sweep jobs (joblib) the cores shared out between them, so
    that jobs do not oversubscribe the machine; 0 = torch's default."""
    if cfg.get("threads"):
        return int(cfg.threads)
    if HydraConfig.initialized():
        n_jobs = HydraConfig.get().launcher.get("n_jobs")
        if isinstance(n_jobs, int) and n_jobs > 1:
            return max(1, (os.cpu_count() or 1) // n_jobs)
    return 0


def finished_record(cfg: DictConfig, digest: str) -> dict | None:
    """In a sweep with `resume=true`, the `ok` record of an earlier job with the same config."""
    folder = sweep_dir()
    if folder is None or not cfg.get("resume", True):
        return None
    done = [r for r in read_summary(folder) if r.get("config_hash") == digest]
    return next((r for r in done if r.get("status") == "ok"), None)


def output_dir(cfg: DictConfig) -> Path:
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or ".")


def run(cfg: DictConfig) -> dict:
    """Train and test one config; always writes `results.json` (status ok/diverged/failed)."""
    run_dir = output_dir(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    digest = config_hash(cfg)
    done = finished_record(cfg, digest)
    if done is not None:
        log.info("skipping: %s already has an ok record in the sweep (resume=true)", digest)
        write_record(run_dir, done)
        return done
    if job_threads(cfg):
        torch.set_num_threads(job_threads(cfg))
    record: dict = {
        "status": "failed",
        "task": cfg.task.name,
        "model": cfg.model.name,
        "task_params": params_of(cfg.task),
        "model_params": params_of(cfg.model),
        "seq_len": cfg.task.get("seq_len"),
        "seed": cfg.seed,
        "config_hash": digest,
        "num_params": None,
        "state": None,
        "metrics": {},
        "train": None,
        "wandb": None,
        "run_dir": str(run_dir),
        "config": {k: v for k, v in resolved.items() if k not in ("logger", "hydra")},
    }
    logger = None
    try:
        parts = build(cfg)
        record.update(
            task_params=parts.task.params(),
            model_params=resolved_model_params(cfg),
            seq_len=parts.task.seq_len,
            num_params=sum(p.numel() for p in parts.model.parameters()),
            state=state_record(parts.model, parts.task.seq_len),
        )
        name = f"{cfg.model.name}-{cfg.task.name}-{parts.task.seq_len}"
        group = sweep_dir().name if sweep_dir() else None
        logger = start_wandb(cfg.logger, run_dir, name, group, cfg.task.name, resolved)
        ckpt = checkpoint_path(cfg.checkpoint.dir, digest)
        trainer = L.Trainer(
            **cfg.trainer,
            logger=logger if logger is not None else False,
            default_root_dir=run_dir,
            enable_checkpointing=False,
            callbacks=[
                EarlyStopping(
                    "val/acc",
                    mode="max",
                    patience=10**9,
                    stopping_threshold=cfg.early_stop_acc,
                    check_on_train_epoch_end=False,
                ),
                SaveLast(ckpt),
            ],
        )
        resume_path, resumed_at = resumable(ckpt)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                # StepBatchSampler resumes mid-epoch exactly; Lightning cannot know that.
                warnings.filterwarnings("ignore", ".*dataloader is not resumable.*")
                trainer.fit(parts.module, datamodule=parts.data, ckpt_path=resume_path)
        finally:
            wall = time.perf_counter() - start
            steps = trainer.global_step
            tokens = (steps - resumed_at) * cfg.data.batch_size * parts.task.seq_len
            record["train"] = {
                "steps": steps,
                "epochs": round(steps * cfg.data.batch_size / cfg.data.num_train, 3),
                "wall_s": round(wall, 3),
                "tokens_per_s": round(tokens / wall, 1),
                "resumed_from_step": resumed_at,
            }
            record["metrics"].update(parts.module.val_results)
        trainer.test(parts.module, datamodule=parts.data, verbose=False)
        record["metrics"].update(parts.module.test_results)
        record["status"] = "ok"
        discard(ckpt)
    except (Diverged, DenominatorCollapse) as error:
        record.update(status="diverged", error=str(error))
        discard(ckpt)
    except BaseException as error:
        record["error"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        if logger is not None:
            summary = {**record["metrics"], "state": record["state"], "status": record["status"]}
            record["wandb"] = finish_wandb(logger, summary)
        write_record(run_dir, record)
        if sweep_dir() is not None:
            append_summary(sweep_dir(), record)
    log.info(
        "test/acc=%s state floats/layer=%s -> %s",
        record["metrics"].get("test/acc"),
        (record["state"] or {}).get("floats_per_layer"),
        run_dir / "results.json",
    )
    return record
