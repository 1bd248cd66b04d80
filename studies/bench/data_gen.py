"""The `tasks` section: tokens/s of `task.generate` for every registered task."""

import statistics
import time

from studies.bench.settings import Settings
from tasks import TASKS, build_task


def task_rows(s: Settings) -> list[dict]:
    """Every task at its default length and at 1024 (where the task allows it)."""
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
            n = max(1, s.task_tokens // seq_len)
            task.generate(min(n, 100), seed=0)  # warm-up
            times = []
            for seed in range(3):
                t0 = time.perf_counter()
                task.generate(n, seed=seed)
                times.append(time.perf_counter() - t0)
            tps = n * seq_len / statistics.median(times)
            row.update(examples=n, tokens_per_s=round(tps), target_1M="yes" if tps >= 1e6 else "NO")
    return rows
