"""Where a report's numbers come from (docs/results/README.md: "a number without them is not a
result"): the command, the commit, the date, the versions, the machine and the wall time."""

import os
import platform
import sys
from datetime import datetime
from pathlib import Path

from harness.records.record import git
from harness.records.schema import SUMMARY


def commit() -> str:
    """`git rev-parse HEAD` of the code (with `+ local changes` when the tree is dirty)."""
    head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "-uno")
    if head is None:
        return "unknown (not a git checkout)"
    return f"{head} + local changes" if dirty else head


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return found[0] if found else platform.processor() or platform.machine()


def gpus() -> str:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ", ".join(torch.cuda.get_device_name(i) for i in range(count)) or "none"


def versions() -> str:
    import lightning
    import torch

    python = platform.python_version()
    return f"Python {python}, torch {torch.__version__}, Lightning {lightning.__version__}"


def duration(seconds: float) -> str:
    """`1,456 s (24.3 min)`."""
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)"


def sweep_span(sweep: Path, description: dict) -> float | None:
    """Seconds from the sweep's start (`sweep.json`: `started`) to its last record."""
    started = description.get("started")
    last = [
        p.stat().st_mtime for p in [sweep / SUMMARY, *sweep.rglob("results.json")] if p.exists()
    ]
    if not started or not last:
        return None
    try:
        return max(last) - datetime.fromisoformat(started).timestamp()
    except ValueError:
        return None


def provenance(sweep: Path, description: dict, rows: list[dict]) -> dict[str, str]:
    """{what: value} for the report page: the sweep's commands and start; the code, versions
    and machine that wrote the report; the jobs' summed training time and the sweep's span."""
    commands = description.get("commands") or [description.get("command")]
    trained = sum(r.get("train.wall_s") or 0.0 for r in rows)
    span = sweep_span(sweep, description)
    wall = f"{duration(trained)} of training summed over {len(rows)} jobs"
    if span is not None and span > 0:
        wall += f"; sweep span {duration(span)}"
    return {
        "command": "\n".join(filter(None, commands)) or "unknown (no sweep.json)",
        "started": description.get("started") or "unknown",
        "report written": datetime.now().isoformat(timespec="seconds"),
        "commit": commit(),
        "versions": versions(),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, GPU: {gpus()}; {sys.platform}",
        "wall time": wall,
    }
