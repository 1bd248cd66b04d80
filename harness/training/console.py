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
from harness.readouts.capacity import TRAINING_LIMITED, level_name, shown
from harness.readouts.convergence import MIN_DELTA
from harness.records.files import read_summary
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


GUESSING = "guessing"
"""The console's word in place of `ok` for a run that trained and tested but scored below its
strongest binding-free baseline + `MIN_DELTA` (a guess that needs no binding scores as
much): it has not learned to retrieve. Its record's status stays `ok`."""


def status_word(record: dict) -> str:
    """The record's status, or `GUESSING` for an `ok` run no better than its best guess."""
    status, metrics = status_of(record), record.get("metrics") or {}
    baseline, acc = strongest_baseline(metrics), metrics.get("test/acc")
    if status == OK and baseline and acc is not None and acc < baseline[1] + MIN_DELTA:
        return GUESSING
    return status


def capacity_text(capacity: dict | None) -> str:
    """`n90 12.3: capacity_limited`, the load curve's readout at its threshold
    (`harness.readouts.capacity`; `n80` at 0.8) in units of its load (`capacity.load`: MQAR's
    key-value pairs) and its verdict: `>=` a lower bound, `<` below the judging load. The
    load's name, n50, the errors and the verdict's reason (`why`) are the record's."""
    if not capacity:
        return ""
    name = level_name(capacity.get("threshold") or 0.9)
    return f"{name} {shown(capacity, 'n90')}: {capacity.get('verdict')}"


REFERENCES = Path(__file__).resolve().parents[2] / "docs" / "results" / "headline_pilot" / "records"
"""The committed records that set a training-limited run against softmax at its protocol
(docs/results/headline_pilot/: the headline's, `python run.py model=softmax`)."""


def protocol(record: dict) -> tuple:
    """What a reference shares with a run: the task, its parameters and test sets, the
    backbone, the batch and the step budget."""
    config = record.get("config") or {}
    task, data, trainer = (config.get(key) or {} for key in ("task", "data", "trainer"))
    given = task.get("test"), config.get("backbone"), data.get("batch_size")
    return record.get("task"), record.get("task_params"), *given, trainer.get("max_steps")


def reference_text(record: dict) -> str:
    """`(softmax >=16 in 1 of 2)`: beside a training-limited run of another mixer, the best n90
    of softmax's committed records (`REFERENCES`) at the run's protocol, the report's capacity
    (the best restart), and how many of them read it; empty when none."""
    capacity = record.get("capacity") or {}
    if record.get("model") == "softmax" or capacity.get("verdict") != TRAINING_LIMITED:
        return ""
    found = [r for r in read_summary(REFERENCES) if r.get("model") == "softmax"]
    found = [r["capacity"] for r in found if r.get("capacity") and protocol(r) == protocol(record)]
    if not found:
        return ""
    readouts = [shown(c, "n90") for c in found]
    best = shown(max(found, key=lambda c: c["n90"]), "n90")
    return f"(softmax {best} in {readouts.count(best)} of {len(found)})"


def state_text(state: dict) -> str:
    """`state 4,160`: the mixer's floats of state per layer, `KV cache 8,192` for softmax's
    (`KV_CACHES`), `(grows with T)` after another state that grows with T at this T; empty
    without a state. The short convolutions' windows are the record's."""
    floats = state.get("mixer_floats_per_layer", state.get("floats_per_layer"))
    if floats is None:
        return ""
    layers = state.get("layers") or []
    kv_cache = bool(layers) and all(layer.get("mixer") in KV_CACHES for layer in layers)
    grows = " (grows with T)" if state.get("grows_with_seq_len") and not kv_cache else ""
    return f"{'KV cache' if kv_cache else 'state'} {floats:,.0f}{grows}"


def job_line(record: dict, values: dict[str, object], position: str | None = None) -> str:
    """One line of about 160 columns that closes a job: its status word (`status_word`), task,
    model, swept values, accuracy to 3 decimals beside the strongest baseline, the load
    curve's readout (`capacity_text`), state in floats (`state_text`), time, `not converged`
    (where no load curve judges it), and why it did not finish when it did not."""
    status = status_of(record)
    named = [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in values.items()]
    job = [status_word(record), record.get("task") or "?", model_label(record), *named]
    parts = [f"[{position}]" if position else "", " ".join(job)]
    metrics, capacity = record.get("metrics") or {}, record.get("capacity")
    if status == OK:
        text = f"acc {metrics.get('test/acc', float('nan')):.3f}"
        baseline = strongest_baseline(metrics)
        if baseline:
            text += f" ({baseline[0]} {baseline[1]:.3f})"
        readout = " ".join(filter(None, (capacity_text(capacity), reference_text(record))))
        parts += [text, readout]
    parts.append(state_text(record.get("state") or {}))
    train = record.get("train") or {}
    if train:
        parts.append(human_time(train.get("wall_s")))
        if status == OK and train.get("converged") is False and not capacity:
            parts.append("not converged")
    if status != OK:
        parts.append(f"-- {record.get('error') or 'no error message'}")
    return "  ".join(p for p in parts if p)


def where(folder: Path) -> str:
    """`-> outputs/2026-12-06/08-41-15`: a run's folder, relative to the working directory
    when it lies under it (Hydra's is absolute), so that the line keeps its width."""
    folder, here = Path(folder).resolve(), Path.cwd().resolve()
    return f"-> {folder.relative_to(here) if folder.is_relative_to(here) else folder}"


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
