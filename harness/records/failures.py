"""The failure policy, in one place: what an exception makes of a run's record (its status and
error) and of the process (its exit code).

    exception                       record                       single run     sweep job
    BadInput (a user's mistake)     failed, its one line         that line, 2   recorded, goes on
    Diverged, DenominatorCollapse   diverged, with the step      exit 0         recorded, goes on
    Ctrl-C, SIGTERM, SystemExit     interrupted, "interrupted    raised         raised
                                    (SIGTERM)" (or what it was)
    any other error                 failed, "Type: message"      traceback, 1   traceback.txt

The step of a divergence is the record's `train.diverged_at_step`; a sweep job that failed on
an error leaves its traceback in `traceback.txt` and the sweep goes on. SIGTERM (`kill`, a
scheduler's stop) ends a run as Ctrl-C does, with its record written (`interruptible`); an
interrupted run keeps its checkpoint, and running the same command again resumes it.

A sweep with a failed or interrupted job exits 1 when it ends. `HYDRA_FULL_ERROR=1` raises
every exception with its traceback (for debugging). `run.py` (through `hydra_task`), the
sweep callback (`harness.records.sweep_console`) and `python -m harness.evaluate` all follow it;
`harness.train.run` writes the record with `outcome`.
"""

import contextlib
import functools
import shutil
import signal
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from harness.config.hashing import config_hash
from harness.config.hydra_job import output_dir, sweep_dir
from harness.config.refusal import BadInput, check_run, full_error, refused
from harness.records.schema import DIVERGED, FAILED, INTERRUPTED, TRACEBACK

EXIT_FAILED_JOBS = 1
"""A sweep that ends with a failed or interrupted job (the other jobs ran)."""


class Diverged(RuntimeError):
    """The training loss became NaN or infinite (or a mixer's denominator collapsed) at
    optimiser step `step`; the message is `<reason> at step <step>`."""

    def __init__(self, reason: str, step: int) -> None:
        super().__init__(f"{reason} at step {step}")
        self.reason, self.step = reason, step


@dataclass(frozen=True)
class Outcome:
    """What an exception makes of a run's record: `status`, `error`, and for a divergence the
    step (`train.diverged_at_step`; None when the exception does not say)."""

    status: str
    error: str
    diverged_at_step: int | None = None

    @property
    def ends_the_run(self) -> bool:
        """Whether the exception goes on up after it is recorded (a divergence is a result)."""
        return self.status != DIVERGED


def outcome(error: BaseException) -> Outcome:
    """The record's status and error for an exception raised by a run."""
    from models.mixers.base import DenominatorCollapse  # torch: imported by the run already

    if isinstance(error, Diverged):
        return Outcome(DIVERGED, str(error), error.step)
    if isinstance(error, DenominatorCollapse):
        return Outcome(DIVERGED, str(error))
    if isinstance(error, BadInput):
        return Outcome(FAILED, str(error))
    if is_interruption(error):
        return Outcome(INTERRUPTED, f"interrupted ({what_interrupted(error)})")
    return Outcome(FAILED, f"{type(error).__name__}: {error}")


def is_interruption(error: BaseException) -> bool:
    """Ctrl-C or SIGTERM (`Terminated`), or the `exit(1)` that Lightning turns them into."""
    return isinstance(error, KeyboardInterrupt | SystemExit)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is (`interruptible`); its message is the
    signal's name."""


def what_interrupted(error: BaseException) -> str:
    """`SIGTERM`, `KeyboardInterrupt` (Ctrl-C) or `SystemExit`: what stopped the run. Inside
    `Trainer.fit` Lightning turns a KeyboardInterrupt into `exit(1)`; the SystemExit's context
    is the KeyboardInterrupt, which says what it was."""
    if isinstance(error, SystemExit) and isinstance(error.__context__, KeyboardInterrupt):
        error = error.__context__
    return str(error) if isinstance(error, Terminated) and str(error) else type(error).__name__


def raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signal.Signals(signum).name)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Inside, SIGTERM raises `Terminated` where it would otherwise end the process at once
    without a record (its default action); a handler someone else installed (a launcher's) is
    left as it is. On the way out the SIGINT and SIGTERM handlers are restored (after a
    Ctrl-C Lightning ignores SIGINT while it shuts down). Signals reach the main thread only:
    elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if previous[signal.SIGTERM] is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: installed outside Python, cannot be restored
                signal.signal(signum, handler)


NEW_RUN_DIRS: set[Path] = set()
"""Single-run folders that did not exist before this run (a refused run removes its own)."""
LAST_SWEEP: Counter = Counter()
"""Statuses of the sweep that just ended in this process (`sweep_exit_code`)."""


def sweep_exit_code() -> int:
    """0, or `EXIT_FAILED_JOBS` when the sweep that just ended has a failed or interrupted
    job."""
    return EXIT_FAILED_JOBS if LAST_SWEEP[FAILED] or LAST_SWEEP[INTERRUPTED] else 0


def forget(folder: Path) -> None:
    """A refused run leaves no folder behind, nor the emptied folders above it that it
    created (`outputs/<date>`), up to the working directory; a folder that existed before the
    run (`hydra.run.dir=` an old one) is left as it is."""
    if folder.resolve() not in NEW_RUN_DIRS:
        return
    shutil.rmtree(folder, ignore_errors=True)
    here = Path.cwd().resolve()
    for parent in folder.resolve().parents:
        if parent == here or here not in parent.parents:
            break
        with contextlib.suppress(OSError):
            parent.rmdir()  # only succeeds when empty


def check_early(cfg: DictConfig) -> None:
    """Raise `BadInput` for a bad run-level setting (`threads=two`) before torch and Lightning
    are imported (`run.py`), where the refusal is all that the run would leave: a single run
    in a folder of its own (`forget`), without `HYDRA_FULL_ERROR=1`. The line is the one the
    run's own check gives (`harness.config.refusal.check_run`, `frameworks=False`: what
    needs Lightning or torch to judge is left to the run); elsewhere, and for a config that
    does not resolve, the run checks and records as ever."""
    if full_error() or sweep_dir() is not None:
        return
    if output_dir(cfg).resolve() not in NEW_RUN_DIRS:
        return
    try:
        config_hash(cfg)  # the run's first step: a config that does not resolve is its to report
    except Exception:  # noqa: BLE001
        return
    check_run(cfg, frameworks=False)


def hydra_task(run: Callable[[DictConfig], dict]) -> Callable[[DictConfig], float | None]:
    """`run` (config -> record) as Hydra's task function under the policy above; it returns
    the run's `test/acc` (what a sweeper optimises), None when the job failed in a sweep."""

    @functools.wraps(run)
    def task(cfg: DictConfig) -> float | None:
        try:
            record = run(cfg)
        except BadInput as error:
            if full_error():
                raise
            if sweep_dir() is not None:
                return None  # recorded as failed (and printed); the sweep goes on
            forget(output_dir(cfg))
            sys.exit(refused(error))
        except Exception:
            if full_error() or sweep_dir() is None:
                raise
            path = output_dir(cfg) / TRACEBACK  # the job is recorded as failed; go on
            path.write_text(traceback.format_exc())
            print(f"traceback: {path}", file=sys.stderr)
            return None
        return record["metrics"].get("test/acc")

    return task
