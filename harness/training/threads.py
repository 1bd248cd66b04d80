"""How many torch threads a run takes, and why: `threads=N`, or its share of the cores that
other work leaves free, judged again while it trains (docs/performance.md, "Threads beside
other work").

`threads=N` sets the count, and so does `OMP_NUM_THREADS` in the environment (a launcher's
setup line). Otherwise a run may use the cores of its CPU affinity (`cores`). Other work occupies

    others = (busy CPU time on those cores - this process's CPU time) / wall time

over a short window (Linux `/proc/stat`; elsewhere the 1-minute load average). The run takes

    share = max(1, min(cores // n_jobs, round(cores - others)))

threads, n_jobs being the jobs a joblib sweep runs at once (1 otherwise). Two runs started
together each see the other and take half the cores, instead of both taking all of them and
waiting on each other's threads; `ThreadShare` re-judges the share every `RECHECK_S` seconds
of training, so a run gives cores back when other work starts and takes them again when it
ends.
"""

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch

log = logging.getLogger(__name__)

RECHECK_S = 5.0
"""Seconds of training between two judgements of the free cores."""
FIRST_LOOK_S = 0.3
"""Seconds the run watches the cores before it trains."""


def usable_cores() -> list[int]:
    """The CPUs this process may run on (its affinity; every CPU where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def busy_seconds(cpus: list[int]) -> float | None:
    """CPU seconds spent busy (not idle, not waiting on I/O) since boot on `cpus`, summed;
    None where `/proc/stat` is not there."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if name in wanted:
            counts = [int(f) for f in fields]
            ticks += sum(counts) - counts[3] - counts[4]  # idle, iowait
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class CoreWatch:
    """Cores used by other processes over the time since the last look."""

    cpus: list[int] = field(default_factory=usable_cores)
    wall: float = 0.0
    own: float = 0.0
    busy: float | None = None

    def __post_init__(self) -> None:
        self.wall, self.own = time.monotonic(), time.process_time()
        self.busy = busy_seconds(self.cpus)

    def others(self) -> float:
        """Cores busy with other work since the last call (or since this watch began)."""
        wall, own, busy = time.monotonic(), time.process_time(), busy_seconds(self.cpus)
        if busy is None or self.busy is None or wall - self.wall <= 0:
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
            others = max(0.0, load - torch.get_num_threads())
        else:
            others = max(0.0, (busy - self.busy) - (own - self.own)) / (wall - self.wall)
        self.wall, self.own, self.busy = wall, own, busy
        return others


@dataclass(frozen=True)
class ThreadChoice:
    """A run's torch threads and the reason, as its line and its record say them."""

    count: int
    why: str
    fixed: bool = False
    """Set by `threads=N` or the environment: kept while the run trains."""


def share(cores: int, others: float, n_jobs: int) -> ThreadChoice:
    """`max(1, min(cores // n_jobs, round(cores - others)))` threads, with its reason."""
    free = max(0, round(cores - others))
    per_job = max(1, cores // n_jobs)
    count = max(1, min(per_job, free))
    why = f"{free} of {cores} cores free: other work used {others:.1f}"
    if n_jobs > 1 and per_job <= free:
        why = f"{cores} cores shared by {n_jobs} parallel jobs; {why}"
    return ThreadChoice(count, why)


def choose_threads(
    requested: int, n_jobs: int | None, watch: CoreWatch | None = None
) -> ThreadChoice:
    """`threads=N` (N > 0) as asked; else, outside a joblib sweep, `OMP_NUM_THREADS` where the
    environment sets it (a launcher's setup line, e.g. SLURM's); else this run's share of the
    free cores, after watching them for `FIRST_LOOK_S`."""
    if requested > 0:
        return ThreadChoice(requested, f"threads={requested} as set", fixed=True)
    given = os.environ.get("OMP_NUM_THREADS", "")  # joblib sets it in its workers: not asked
    if (n_jobs or 1) == 1 and given.isdigit() and int(given) > 0:
        return ThreadChoice(int(given), f"OMP_NUM_THREADS={given} in the environment", fixed=True)
    watch = watch or CoreWatch()
    time.sleep(FIRST_LOOK_S)
    return share(len(watch.cpus), watch.others(), n_jobs or 1)


class ThreadShare(L.Callback):
    """Re-judge the run's share of the free cores every `RECHECK_S` seconds of training and
    move torch's thread count to it; `changes` lists (step, threads) for the record."""

    def __init__(self, n_jobs: int | None, watch: CoreWatch) -> None:
        self.n_jobs = n_jobs or 1
        self.watch = watch
        self.changes: list[list[int]] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if time.monotonic() - self.watch.wall < RECHECK_S:
            return
        choice = share(len(self.watch.cpus), self.watch.others(), self.n_jobs)
        if choice.count != torch.get_num_threads():
            log.info(
                "torch threads: %d -> %d at step %d (%s)",
                torch.get_num_threads(),
                choice.count,
                trainer.global_step,
                choice.why,
            )
            torch.set_num_threads(choice.count)
            self.changes.append([trainer.global_step, choice.count])
