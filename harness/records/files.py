"""How the harness writes its files: atomically (a temp file renamed over the target), with the
mode the umask gives, and as JSON without NaN."""

import contextlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def jsonable(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither); containers recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def umask() -> int:
    """The process's file-creation mask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`; the file gets
    the mode a plain `open` would give it (0o666 less the umask), not mkstemp's 0o600, so
    that collaborators read it where the umask lets them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
