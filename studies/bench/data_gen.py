"""The `tasks` section: tokens/s of `task.generate` for every registered task, and for every
task with a load, a range of loads against its two ends as single loads (T = 256)."""

import statistics

from studies.bench.settings import Settings
from tasks import TASKS, Task, build_task

RANGE_SEQ_LEN = 256
LOAD_RANGES = {  # the widest range each task's defaults allow at T = 256
    "assoc_recall": (4, 64),
    "noisy_recall": (1, 23),
    "selective_copy": (1, 64),
    "needle": (0, 14),
    "copy": (1, 127),
}


def tokens_per_s(task: Task, s: Settings) -> tuple[int, float]:
    """(examples per call, tokens/s): the median of three seeds after a warm-up, timed by the
    settings' clock (`--clock cpu`: robust to other load)."""
    n = max(1, s.task_tokens // task.seq_len)
    task.generate(min(n, 100), seed=0)  # warm-up
    times = []
    for seed in range(3):
        t0 = s.timer()
        task.generate(n, seed=seed)
        times.append(s.timer() - t0)
    return n, n * task.seq_len / statistics.median(times)


def measured(row: dict, task: Task, s: Settings) -> dict:
    n, tps = tokens_per_s(task, s)
    row.update(examples=n, tokens_per_s=round(tps), target_1M="yes" if tps >= 1e6 else "NO")
    return row


def load_rows(name: str, s: Settings) -> list[dict]:
    """The single loads low and high, then [low, high] uniform and log-uniform; a range's
    `vs_high_load` is its tokens/s over the single high load's (>= 1: a range costs no more
    per token than its heaviest load)."""
    low, high = LOAD_RANGES[name]
    load = TASKS.get(name).load_param
    settings = [(low, "-"), (high, "-"), ([low, high], "uniform"), ([low, high], "log_uniform")]
    rows = []
    for value, dist in settings:
        if dist == "log_uniform" and low < 1:
            dist = "log2"
        params = {load: value} if dist == "-" else {load: value, "load_dist": dist}
        task = build_task(name, seq_len=RANGE_SEQ_LEN, **params)
        rows.append(measured({"task": name, "seq_len": RANGE_SEQ_LEN, "load": str(value),
                              "load_dist": dist}, task, s))  # fmt: skip
    for row in rows[2:]:
        row["vs_high_load"] = round(row["tokens_per_s"] / rows[1]["tokens_per_s"], 2)
    return rows


def task_rows(s: Settings) -> list[dict]:
    """Every task at its default length and at 1024 (where the task allows it), then the load
    ranges of `load_rows`."""
    rows = []
    for name in TASKS.names():
        base = build_task(name)
        for seq_len in dict.fromkeys([base.seq_len, 1024]):
            row: dict = {"task": name, "seq_len": seq_len}
            rows.append(row)
            try:
                task = base if seq_len == base.seq_len else base.with_seq_len(seq_len)
            except ValueError as error:
                row["note"] = f"not at this length: {error}"[:90]
                continue
            measured(row, task, s)
    for name in TASKS.names():
        if name in LOAD_RANGES:
            rows.extend(load_rows(name, s))
    return rows
