"""A sweep's `summary.jsonl`: one record a line, appended by each job as it ends, under a lock."""

import contextlib
import fcntl
import json
import os
from pathlib import Path

from harness.records.files import jsonable
from harness.records.migration import migrated
from harness.records.record_model import checked
from harness.records.schema import SUMMARY


def append_summary(sweep_dir: Path, record: dict) -> Path:
    """Append one line to `summary.jsonl` under an exclusive lock, so that concurrent jobs
    never interleave; each line is written with a single `write` call and fsynced."""
    path = Path(sweep_dir) / SUMMARY
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(jsonable(record), sort_keys=True) + "\n"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return path


def read_summary(sweep_dir: Path, check: bool = False) -> list[dict]:
    """Every complete line of `summary.jsonl` (a torn last line from a kill is skipped), in
    the current layout (`migrated`); `check`: each held to the record's types (`checked`; a
    sweep's own reading does not check, so that a broken line never stops it)."""
    path = Path(sweep_dir) / SUMMARY
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        with contextlib.suppress(json.JSONDecodeError):
            record = migrated(json.loads(line))
            records.append(checked(record, f"{path}, line {number}") if check else record)
    return records
