"""One training run, top-down: skip a finished job, build the parts (or refuse bad input),
fit (resuming from a checkpoint a killed or interrupted run left), test, and write
`results.json` whatever happens (status ok, diverged, failed or interrupted)."""

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from harness.config.capacity_protocol import apply_protocol
from harness.config.hashing import config_hash
from harness.config.hydra_job import (
    experiment_name,
    job_number,
    output_dir,
    parallel_jobs,
    sweep_dir,
)
from harness.config.refusal import check_run
from harness.readouts.capacity import baseline_metrics_by_load, readout_of
from harness.readouts.convergence import standard_error
from harness.records.failures import interruptible, is_interruption, outcome
from harness.records.files import append_summary, read_summary
from harness.records.record import config_of, new_record, state_record, write_record
from harness.records.schema import DIVERGED, DIVERGED_AT_STEP, FAILED, OK
from harness.records.sweep import finished_now, job_position, sweep_description, swept_values
from harness.records.wandb_run import finish_wandb, run_name, sweep_group, wandb_logger
from harness.training.build import BuiltRun, build, resolved_model_params
from harness.training.checkpoint import (
    Resumption,
    Segments,
    checkpoint_path,
    discard,
    keep_weights,
    resumable,
    save_last,
    saved_step,
)
from harness.training.console import interrupted, job_line, quiet, show_progress_bar, where
from harness.training.progress import ProgressLines
from harness.training.threads import CoreWatch, ThreadChoice, ThreadShare, choose_threads
from harness.training.validation_curve import ValidationCurve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """Where one run writes: its folder, its sweep's folder (None outside a multirun), its
    config hash and its checkpoint."""

    run_dir: Path
    sweep: Path | None
    digest: str
    checkpoint: Path

    @classmethod
    def of(cls, cfg: DictConfig) -> "Job":
        digest = config_hash(cfg)
        return cls(
            output_dir(cfg), sweep_dir(), digest, checkpoint_path(cfg.checkpoint.dir, digest)
        )


def job_threads(cfg: DictConfig, watch: CoreWatch | None = None) -> ThreadChoice:
    """`threads`, or this job's share of the cores that other work leaves free, divided
    among a joblib sweep's parallel jobs (`harness.training.threads`)."""
    return choose_threads(int(cfg.get("threads") or 0), parallel_jobs(), watch)


def finished_record(cfg: DictConfig, job: Job) -> dict | None:
    """In a sweep with `resume=true`, the `ok` record of an earlier job with the same config."""
    if job.sweep is None or cfg.get("resume", True) is not True:
        return None  # resume=false (anything else is refused by the settings check)
    done = [r for r in read_summary(job.sweep) if r.get("config_hash") == job.digest]
    return next((r for r in done if r.get("status") == OK), None)


def run(cfg: DictConfig) -> dict:
    """Train and test one config; always writes `results.json` (status ok, diverged, failed or
    interrupted: `harness.records.failures`), SIGTERM included (`interruptible`)."""
    quiet()
    job = Job.of(cfg)
    done = finished_record(cfg, job)
    if done is not None:
        write_record(job.run_dir, done)
        announce(job, done, "skipping: already ok in this sweep (resume=true)")
        return done
    record = new_record(cfg, job.digest, job.run_dir)
    logger = None
    with interruptible():
        try:
            check_run(cfg)  # before the threads are set: `threads=two` is one line
            derived = apply_protocol(cfg)  # the capacity protocol's loads and context
            if derived is not None:
                record.update(protocol=derived, config=config_of(cfg))
            watch = CoreWatch()
            threads = job_threads(cfg, watch)
            torch.set_num_threads(threads.count)
            parts = build(cfg)
            log.info("torch threads: %d (%s)", threads.count, threads.why)
            share = None if threads.fixed else ThreadShare(parallel_jobs(), watch)
            changes = share.changes if share is not None else []  # [step, threads] as it trains
            record["threads"] = {"count": threads.count, "why": threads.why, "changes": changes}
            record_built_parts(record, cfg, parts)
            resumed = resumable(job.checkpoint)
            logger = start_logger(cfg, job, record, resumed.run_id)
            trainer = make_trainer(cfg, job, logger, validation_floor(parts), resumed.run_id, share)
            fit(cfg, resumed, trainer, parts, record)
            test(trainer, parts, record, cfg)
            if cfg.checkpoint.get("keep") and is_recording_rank():
                record["weights"] = str(keep_weights(parts.model, job.run_dir))
            record["status"] = OK
            discard(job.checkpoint)
        except BaseException as error:
            if record_failure(cfg, job, record, error):
                raise
        finally:
            finish_job(job, record, logger)
    return record


def record_failure(cfg: DictConfig, job: Job, record: dict, error: BaseException) -> bool:
    """Write the failure policy's outcome (`harness.records.failures`) into `record`: a
    diverged run's step, an interrupted run's resume line; whether the error ends the run."""
    ended = outcome(error)
    record.update(status=ended.status, error=ended.error)
    if ended.status == DIVERGED:
        train = record["train"] or {}
        step = ended.diverged_at_step
        train[DIVERGED_AT_STEP] = step if step is not None else train.get("steps")
        discard(job.checkpoint)
    elif is_interruption(error):
        step, steps = saved_step(job.checkpoint), cfg.trainer.max_steps
        print(interrupted(job.checkpoint, step, steps, job.sweep), file=sys.stderr)
    return ended.ends_the_run


def record_built_parts(record: dict, cfg: DictConfig, parts: BuiltRun) -> None:
    """What the built parts add to the record: resolved parameters, size, state."""
    record.update(
        task_params=parts.task.params(),
        model_params=resolved_model_params(cfg),
        seq_len=parts.task.seq_len,
        num_params=sum(p.numel() for p in parts.model.parameters()),
        state=state_record(parts.model, parts.task.seq_len),
    )


def is_recording_rank() -> bool:
    """False in the extra processes of a data-parallel run (rank >= 1, known from the
    launcher's environment): they train and evaluate beside rank 0, which alone logs to W&B
    and writes the record."""
    return rank_zero_only.rank == 0


def start_logger(cfg: DictConfig, job: Job, record: dict, run_id: str) -> Logger | None:
    """The W&B logger of this run (None with `logger=none`, and on ranks >= 1): the W&B run
    `run_id` (a resumed run continues its own), named by its swept values
    (`deltanet-d128-kv8-T256-s1`), grouped by sweep (or preset), tagged with preset, task and
    model; its config holds the resolved config, the parameter count and the state."""
    if not is_recording_rank():
        return None
    preset = experiment_name()
    swept = sweep_description(job.sweep).get("swept")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.update(preset=preset, num_params=record["num_params"], state=record["state"])
    tags = [f"preset:{preset}"] if preset else []
    return wandb_logger(
        cfg.logger,
        job.run_dir,
        run_id,
        name=run_name(record, swept, job_number()),
        group=sweep_group(job.sweep, preset),
        tags=[*tags, f"task:{cfg.task.name}", f"model:{cfg.model.name}"],
        job_type="train",
        config=resolved,
        reinit="finish_previous",
    )


def make_trainer(
    cfg: DictConfig,
    job: Job,
    logger: Logger | None,
    floor: float,
    run_id: str,
    share: ThreadShare | None = None,
) -> L.Trainer:
    """Lightning's Trainer with gradient clipping at `optim.grad_clip` (global L2 norm), the
    validation curve (`ValidationCurve`; a `plateau` judges convergence only), Lightning's
    `EarlyStopping` at `early_stop_acc` (`early_stop`), kill-safe checkpoints
    (`save_last`) that carry the run's segments and W&B id (`run_id`), and the thread
    count re-judged while it trains (`share`, None: fixed by `threads=N`). Each validation
    the callbacks act in this order: the curve, the early stop, the segments, the progress
    line, then the checkpoint (Lightning runs checkpoint callbacks last)."""
    curve = ValidationCurve(
        cfg.early_stop_acc, cfg.plateau.min_delta, floor, num_examples=cfg.data.num_val
    )
    return L.Trainer(
        **{
            **cfg.trainer,
            "enable_progress_bar": show_progress_bar(cfg.trainer.enable_progress_bar),
        },
        gradient_clip_val=cfg.optim.grad_clip,
        gradient_clip_algorithm="norm",
        logger=logger if logger is not None else False,
        default_root_dir=job.run_dir,
        callbacks=[
            curve,
            *early_stop(cfg.early_stop_acc),
            Segments(run_id),
            ProgressLines(cfg.trainer.enable_progress_bar),  # off a terminal
            save_last(job.checkpoint),
            *([share] if share is not None else []),
        ],
    )


def early_stop(threshold: float | None) -> list[EarlyStopping]:
    """Lightning's `EarlyStopping` once `val/acc` is above `threshold` (Lightning compares
    strictly; none for None): only the threshold stops (patience never runs out, a NaN
    accuracy does not stop)."""
    if threshold is None:
        return []
    return [
        EarlyStopping(
            monitor="val/acc",
            mode="max",
            stopping_threshold=threshold,
            patience=sys.maxsize,
            check_finite=False,
        )
    ]


def fit(
    cfg: DictConfig, resumed: Resumption, trainer: L.Trainer, parts: BuiltRun, record: dict
) -> None:
    """Train (resuming from the checkpoint a killed run left, `resumed`), then validate the
    final weights unless the last validation already saw them, so that `val/*` and `test/*`
    come from the same weights. The record's `train` block (with the validation curve, the
    convergence verdict and the segments of every process that trained the run) and
    validation metrics are written even when training raises. Wall time and tokens/s cover
    every segment: wall_s = sum of the segments' wall_s, tokens_per_s = tokens of all their
    steps / wall_s."""
    watch = next(c for c in trainer.callbacks if isinstance(c, ValidationCurve))
    clock = next(c for c in trainer.callbacks if isinstance(c, Segments))
    finished = False
    try:
        trainer.fit(parts.module, datamodule=parts.data, ckpt_path=resumed.path)
        if not watch.curve or watch.curve[-1][0] != trainer.global_step:
            trainer.validate(parts.module, datamodule=parts.data, verbose=False)
        finished = True
    finally:
        steps = trainer.global_step
        segments = clock.close(steps)
        wall = sum(s["wall_s"] for s in segments)
        trained = sum(s["to_step"] - s["from_step"] for s in segments)
        tokens = trained * cfg.data.batch_size * mean_train_length(parts)
        record["train"] = {
            "steps": steps,
            "epochs": round(steps * cfg.data.batch_size / cfg.data.num_train, 3),
            "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
            "resumed_from_step": resumed.step,
            "segments": segments,
            "val_curve": [[int(step), round(acc, 6)] for step, acc in watch.curve],
            "converged": finished and watch.verdict(),
            "floor": round(watch.floor, 6),
            "val_standard_error": val_standard_error(watch.curve, cfg.data.num_val),
            "stopped_by": stopped_by(trainer) if finished else None,
            DIVERGED_AT_STEP: None,
        }
        record["metrics"].update(parts.module.val_results)


def stopped_by(trainer: L.Trainer) -> str | None:
    """What ended training: `early_stop_acc` (Lightning's `EarlyStopping` at its threshold),
    `max_steps` (the budget), or None."""
    stop = trainer.early_stopping_callback
    if stop is not None and stop.stopping_reason == EarlyStoppingReason.STOPPING_THRESHOLD:
        return "early_stop_acc"
    return "max_steps" if trainer.global_step >= trainer.max_steps else None


def test(trainer: L.Trainer, parts: BuiltRun, record: dict, cfg: DictConfig) -> None:
    """Test at every test length with the trainer that fitted the model; beside the model's
    accuracy, the binding-free baselines on the same test set (`test/baseline/<name>`) and,
    tested over a range of loads, the load curve's readout at `capacity.threshold`
    (`capacity`: `harness.readouts.capacity`)."""
    trainer.test(parts.module, datamodule=parts.data, verbose=False)
    record["metrics"].update(parts.module.test_results)
    record["metrics"].update(baseline_metrics(parts))
    num_test = parts.data.sizes["test"]
    record["capacity"] = readout_of(
        record["metrics"],
        cfg.capacity.threshold,
        record["train"],
        num_test,
        cfg.plateau.min_delta,
        cfg.data.num_val,
    )


def baseline_metrics(parts: BuiltRun) -> dict[str, float]:
    """`Task.baselines` on the first test set (`test/baseline/<name>`) and, for a test set
    over a range of loads, at every load (`test/baseline_by/<load>/<value>/<name>`)."""
    baselines = parts.data.test_baselines(0)
    metrics = {f"test/baseline/{name}": value for name, value in baselines.items()}
    test_task = parts.data.test_tasks[0]
    if test_task.has_load_range:
        by_load = parts.data.test_baselines_by_load(0)
        metrics.update(baseline_metrics_by_load(test_task.load_param, by_load))
    return metrics


def validation_floor(parts: BuiltRun) -> float:
    """The strongest binding-free baseline on the validation set (of a mixture: pooled over
    its components): a plateau counts only above it (`harness.readouts.convergence.plateaued`)."""
    return max(parts.data.val_baselines().values())


def val_standard_error(curve: list, num_val: int) -> float | None:
    """The standard error of the last validation accuracy (`harness.readouts.convergence`), against
    which a plateau's gains are judged."""
    return round(standard_error(curve[-1][1], num_val), 6) if curve else None


def mean_train_length(parts: BuiltRun) -> float:
    """Tokens per training example: the length, or a mixture's mean length over its examples."""
    counts = parts.data.counts["train"]
    lengths = [task.seq_len for task in parts.data.train_tasks]
    return sum(n * c for n, c in zip(lengths, counts, strict=True)) / sum(counts)


def finish_job(job: Job, record: dict, logger: Logger | None) -> None:
    """Close W&B, write `results.json`, append to the sweep's `summary.jsonl`, and print the
    job's closing line (a single run's failure is reported by its error instead); rank 0 only."""
    if not is_recording_rank():
        return
    record["finished_at"] = finished_now()  # which of a config's records is the latest
    if logger is not None:
        record["wandb"] = finish_wandb(logger, record)
    write_record(job.run_dir, record)
    if job.sweep is not None:
        append_summary(job.sweep, record)
    if job.sweep is not None or record["status"] != FAILED:
        announce(job, record, where(job.run_dir) if job.sweep is None else "")


def announce(job: Job, record: dict, note: str = "") -> None:
    """Print the job's closing line; in a sweep prefixed by `[finished/jobs]` and naming the
    context length beside the swept values."""
    description = sweep_description(job.sweep)
    position = job_position(job.sweep) if job.sweep is not None else None
    values = {"task.seq_len": record.get("seq_len")} if job.sweep is not None else {}
    values.update(swept_values(record, description.get("swept")))
    line = job_line(record, values, position)
    print(f"{line}  {note}".rstrip(), flush=True)
