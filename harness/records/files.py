"""How the harness writes its files: atomically (a temp file renamed over the target), with the
mode the umask gives, and as JSON without NaN; a sweep's `summary.jsonl`, one record a line,
appended by each job as it ends, under a lock."""

import contextlib
import fcntl
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from harness.records.record_model import checked, migrated
from harness.records.schema import SUMMARY


def jsonable(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither); containers recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def write_atomic(path: Path, text: str) -> None:
    """Write to a temp file beside `path` (one per process and thread), fsync, then rename over
    `path`. The temp file is opened as any file is, so it gets the mode a plain `open` gives
    (0o666 less the umask) and collaborators read it where the umask lets them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
