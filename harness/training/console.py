"""What a run prints, in one place: the known warnings and banners silenced once, progress bars
only on a terminal (one line per validation off it, `progress_line`, printed by
`harness.training.progress`), one closing line per job, what to do after Ctrl-C. The human
formatters they share (sizes, times, counts) are `common.human`'s, which the report uses too.

A sweep's header and closing summary are printed by `harness.records.sweep_console` (a Hydra
callback)."""

import logging
import sys
import warnings
from pathlib import Path

from common.human import human_count, human_time
from harness.readouts.capacity import (
    FLOOR_AT_JUDGING_LOAD,
    NOT_LIMITED,
    RISING_PAST_JUDGING_LOAD,
    TRAINING_LIMITED,
    WHY,
    level_name,
    shown,
)
from harness.readouts.convergence import MIN_DELTA, left_floor, under_floor
from harness.records.record import KV_CACHES, model_label
from harness.records.schema import OK, status_of

KNOWN_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)",  # torch's pytree deprecation, raised by Lightning
    r".*weights_only",  # torch.load's default changed; our checkpoints are our own
    r".*dataloader is not resumable",  # StepBatchSampler resumes mid-epoch exactly
    r".*does not have many workers",  # data are in memory: workers would only add overhead
    r".*smaller than the logging interval",
    r".*GPU available but not used",
    r".*Checkpoint directory .* exists and is not empty",  # a resumed run's own last.ckpt
)
KNOWN_BANNERS = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip:",
    "`Trainer.fit` stopped:",
    "Detected KeyboardInterrupt",  # `interrupted` says what happened and what to do
    "`weights_only` was not set",  # every kill-safe checkpoint save
)
BANNER_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.trainer.connectors.checkpoint_connector",
)


class DropBanners(logging.Filter):
    """Drops Lightning's per-run banners (accelerator, tips), which repeat for every job."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).lstrip().startswith(KNOWN_BANNERS)


def quiet() -> None:
    """Silence the known warnings and banners (idempotent; call before training)."""
    for pattern in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name in BANNER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropBanners) for f in logger.filters):
            logger.addFilter(DropBanners())


def on_terminal() -> bool:
    """Both output streams are a terminal (not `nohup`, SLURM, `| tee` or a captured pipe)."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def show_progress_bar(requested: bool) -> bool:
    """A progress bar only when asked for and the console is a terminal: in a log file (or a
    W&B console log) every refresh would be a new line."""
    return bool(requested) and on_terminal()


def show_progress_lines(requested: bool) -> bool:
    """Off a terminal, progress asked for is one line per validation
    (`harness.training.progress`)."""
    return bool(requested) and not on_terminal()


# Binding-free strategies from the least to the most informed: of baselines that score alike
# (MQAR's elimination equals in_context in the Zoology layout, up to rounding on the test set),
# the line names the least informed, so every seed of a cell names the same one.
LEAST_INFORMED_FIRST = ("chance", "in_context")


def strongest_baseline(metrics: dict) -> tuple[str, float] | None:
    """The best binding-free strategy of the record (`test/baseline/<name>`), if it has any;
    of those within the printed precision (0.0005) of the best, the least informed."""
    baselines = {
        k.rsplit("/", 1)[1]: v
        for k, v in metrics.items()
        if k.startswith("test/baseline/") and v is not None
    }
    if not baselines:
        return None
    best = max(baselines.values())
    tied = [name for name, value in baselines.items() if value > best - 5e-4]
    rank = {name: i for i, name in enumerate(LEAST_INFORMED_FIRST)}
    name = min(tied, key=lambda n: rank.get(n, len(rank)))
    return name, baselines[name]


def why_not_converged(record: dict) -> str:
    """Why a run is not converged, judged on its best validation accuracy (`train.val_curve`)
    against chance (`test/baseline/chance`, one over the answer alphabet) and the binding-free
    floor (`train.floor`: `harness.readouts.convergence.left_floor`, docs/background.md):

    - at chance: it has not learned which tokens answer (within the floor's margin of chance);
    - between chance and the floor: it is learning which tokens answer;
    - at the floor: it answers as a binding-free strategy does (it may not have jumped yet, or
      cannot learn);
    - above the floor: still improving when the budget ran out."""
    train = record.get("train") or {}
    curve, floor = train.get("val_curve") or [], train.get("floor")
    chance = (record.get("metrics") or {}).get("test/baseline/chance")
    min_delta = ((record.get("config") or {}).get("plateau") or {}).get("min_delta", MIN_DELTA)
    if floor is None or not curve or left_floor(curve, floor, min_delta):
        return "budget ran out while improving"
    best = max(acc for _, acc in curve)
    where = under_floor(best, chance, floor, min_delta)
    if where == "chance":
        return f"at chance {chance:.3f}: not learned which tokens answer, let alone which one"
    if where == "between":
        return (
            f"{best:.3f}, between chance {chance:.3f} and the binding-free floor "
            f"{floor:.3f}: learning which tokens answer"
        )
    return f"still at the binding-free floor {floor:.3f} when the budget ran out"


def capacity_text(capacity: dict | None) -> str:
    """`n90 12.3 n50 27.0 pairs: capacity_limited`, the load curve's readout
    (`harness.readouts.capacity`), named at its threshold (`n80`); `>=` marks a lower bound
    (the largest tested load, or a run still rising), `<` a readout below the judging load,
    and a `training_limited` run says what that means."""
    if not capacity:
        return ""
    load = str(capacity.get("load") or "load").replace("num_", "").replace("_", " ")
    name = level_name(capacity.get("threshold") or 0.9)
    n90, n50 = shown(capacity, "n90"), shown(capacity, "n50")
    text = f"{load}: {name} {n90} n50 {n50}, {capacity.get('verdict')}"
    if capacity.get("why") == RISING_PAST_JUDGING_LOAD:
        text += f" ({WHY[RISING_PAST_JUDGING_LOAD]})"
    elif capacity.get("verdict") == TRAINING_LIMITED:  # at the floor, or still rising, there
        where = f"still rising, below {capacity.get('threshold')}"
        if capacity.get("why") == FLOOR_AT_JUDGING_LOAD:
            where = "not above the binding-free floor"
        text += f" ({where} at {capacity.get('judged_at')} {load}: not a limit)"
    elif capacity.get("verdict") == NOT_LIMITED and capacity.get("n90") is not None:
        text += f" (holds every tested load, up to {capacity['n90']:g})"
    return text


def state_text(state: dict) -> str:
    """`state 4,160 floats/layer (+192 conv)`: the mixer's state per layer (softmax's is a
    KV cache, `KV_CACHES`; a state that grows with T at this T says so), the short
    convolutions' windows named apart; empty without a state."""
    floats = state.get("mixer_floats_per_layer", state.get("floats_per_layer"))
    if floats is None:
        return ""
    layers = state.get("layers") or []
    kv_cache = bool(layers) and all(layer.get("mixer") in KV_CACHES for layer in layers)
    grows = state.get("grows_with_seq_len") and not kv_cache
    text = f"{'KV cache' if kv_cache else 'state'} {floats:,.0f} floats/layer"
    text += " (grows with T)" if grows else ""
    conv = state.get("conv_floats_per_layer")
    return text + (f" (+{conv:,.0f} conv)" if conv else "")


def job_line(record: dict, values: dict[str, object], position: str | None = None) -> str:
    """One line that closes a job: task, model, swept values, accuracy to 3 decimals beside
    the strongest baseline, state in floats (`state_text`), time, and why it did not finish
    when it did not."""
    status = status_of(record)
    parts = [f"[{position}]" if position else "", f"{status:<8}", record.get("task") or "?"]
    parts.append(model_label(record))
    parts += [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in values.items()]
    metrics = record.get("metrics") or {}
    if status == OK:
        text = f"acc {metrics.get('test/acc', float('nan')):.3f}"
        baseline = strongest_baseline(metrics)
        if baseline:
            text += f" (baseline {baseline[1]:.3f} {baseline[0]})"
        parts.append(text)
        parts.append(capacity_text(record.get("capacity")))
    parts.append(state_text(record.get("state") or {}))
    train = record.get("train") or {}
    if train:
        parts.append(human_time(train.get("wall_s")))
        if status == OK and train.get("converged") is False:
            parts.append(f"not converged ({why_not_converged(record)})")
    if status != OK:
        parts.append(f"-- {record.get('error') or 'no error message'}")
    return "  ".join(p for p in parts if p)


def interrupted(checkpoint: Path, step: int | None, max_steps: int, sweep: Path | None) -> str:
    """What Ctrl-C left behind and how to go on: the checkpoint holds the training state at
    `step` (its last validation; None: no checkpoint), which a rerun resumes from."""
    rerun = "run the same command again"
    if sweep is not None:
        rerun += f" with hydra.sweep.dir={sweep} (finished jobs are skipped)"
    if step is not None:
        kept = f"training state kept at step {step} of {max_steps} in {checkpoint}"
        return f"interrupted: {kept}; {rerun} to resume from step {step}"
    return f"interrupted before the first checkpoint; {rerun} to start this job again"


def progress_line(
    step: int,
    max_steps: int,
    val_acc: float | None,
    tokens_per_s: float | None,
    seconds_left: float | None,
    job: int | None = None,
) -> str:
    """`[job 2] step 300/1500  val acc 0.125  4.9k tokens/s  ~2m10s left` (no `[job]` outside
    a sweep; `?` for what is not known yet)."""
    acc = "?" if val_acc is None else f"{val_acc:.3f}"
    rate = "?" if tokens_per_s is None else human_count(tokens_per_s)
    prefix = f"[job {job}] " if job is not None else ""
    parts = [f"{prefix}step {step}/{max_steps}", f"val acc {acc}", f"{rate} tokens/s"]
    return "  ".join([*parts, f"~{human_time(seconds_left)} left"])
