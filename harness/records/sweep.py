"""A sweep folder: its records as a table (`load_sweep`), its description (`sweep.json`,
written when the sweep starts, with the sweep's id) and its progress counter.

    from harness.records.sweep import load_sweep
    df = load_sweep("multirun/2025-01-01/12-00-00")     # one row per job
    df.groupby(["model", "task.seq_len"])["test/acc"].mean()
"""

import fcntl
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.records.files import read_summary, write_atomic
from harness.records.record import model_label
from harness.records.record_model import checked, migrated
from harness.records.schema import RECORD
from models.stack import HYBRID, layers_text

if TYPE_CHECKING:
    import pandas as pd  # imported where a sweep is loaded: a run does without it

DESCRIPTION = "sweep.json"
PROGRESS = ".progress"  # one counter per launch: .progress-<pid of the launching process>
DESCRIBING = ".sweep.lock"
GROUPS = ("task", "model")
"""Config groups whose columns come from the record's resolved `task_params` / `model_params`
rather than its `config`."""


def records_of(folder: str | Path, check: bool = False) -> list[dict]:
    """The latest record of every config under `folder`: the lines of `summary.jsonl` and the
    `results.json` files (single runs under `outputs/<date>`, one folder per attempt, or jobs
    of a sweep killed before they appended), one per config hash (a record without one stands
    alone). The latest is the one finished last (`finished_at`); records written without it
    rank below those with it, `summary.jsonl`'s in the order they were appended, above the
    files', which rank by when they were written (a run resumed to `ok` replaces its
    interrupted or failed attempts). `check`: each held to the record's types (the report's
    reading; `harness.records.record_model`)."""
    folder = Path(folder)
    candidates: list[tuple[tuple, str, dict]] = []
    for line, record in enumerate(read_summary(folder, check)):
        rank = (record.get("finished_at") or "", 1, line)
        candidates.append((rank, record.get("config_hash") or f"line {line}", record))
    for path in sorted(folder.rglob(RECORD)):
        if {"report", "wandb"} & set(path.relative_to(folder).parts[:-1]):
            continue
        try:
            record = migrated(json.loads(path.read_text()))
            record = checked(record, str(path)) if check else record
            written = path.stat().st_mtime
        except (OSError, json.JSONDecodeError):
            continue
        rank = (record.get("finished_at") or "", 0, written)
        candidates.append((rank, record.get("config_hash") or str(path), record))
    latest: dict[str, tuple[tuple, dict]] = {}
    for rank, key, record in candidates:
        if key not in latest or rank >= latest[key][0]:
            latest[key] = (rank, record)
    return [record for _, record in latest.values()]


def finished_now() -> str:
    """The record's `finished_at`: now, in UTC, to the microsecond (ISO 8601, so that the
    text sorts in time)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def mixture_text(mixture: list[dict]) -> str:
    """`(seq_len, num_kv_pairs) = (64, 4) x5, (128, 8) x1`: a training mixture
    (`task.mixture`) as one text, each component's settings and share."""
    keys = sorted({k for entry in mixture for k in entry if k != "share"})
    cells = [
        "(" + ", ".join(str(entry.get(k, "-")) for k in keys) + f") x{entry.get('share'):g}"
        for entry in mixture
    ]
    return f"({', '.join(keys)}) = {', '.join(cells)}"


def flat_row(record: dict) -> dict[str, Any]:
    """One job as one flat row: identity, parameters (`task.seq_len`, `model.feature_dim`,
    `backbone.d_model`, `optim.lr`, ...), `state.*`, `train.*`, and every metric under its own
    name (`test/acc`, `test/acc_by/<slice>/<value>`, `test/baseline/<name>`)."""
    row: dict[str, Any] = {
        key: record.get(key)
        for key in ("status", "task", "model", "seed", "seq_len", "num_params", "error")
    }
    row["config_hash"], row["run_dir"] = record.get("config_hash"), record.get("run_dir")
    row.update({f"task.{k}": v for k, v in (record.get("task_params") or {}).items()})
    mixture = ((record.get("config") or {}).get("task") or {}).get("mixture")
    if mixture:
        row["task.mixture"] = mixture_text(mixture)
    row["model"] = model_label(record)
    row.update(layer_columns(record))
    params = {k: v for k, v in (record.get("model_params") or {}).items() if k != "layers"}
    row.update({f"model.{k}": v for k, v in params.items()})
    config = {k: v for k, v in (record.get("config") or {}).items() if k not in GROUPS}
    row.update(flatten(config))
    row.pop("data.cache_dir", None)
    parts = ("state", "train", "capacity")
    row.update(flatten({part: record.get(part) or {} for part in parts}))
    row.pop("state.layers", None)  # a hybrid's are its `layer.<i>` columns
    row.update(record.get("metrics") or {})
    return row


def layer_columns(record: dict) -> dict[str, Any]:
    """A hybrid's layers as columns: `layer.<i>`, the mixer of layer i (bottom first), with its
    state (`layer.<i>.mixer_floats`, `.rank_bound`, ...), and each entry's parameters of
    `model.layers` (`model.layers.<i>.head_k_dim`); none for a one-mixer model."""
    if record.get("model") != HYBRID:
        return {}
    columns: dict[str, Any] = {}
    for i, entry in enumerate((record.get("model_params") or {}).get("layers") or []):
        entry = {"name": entry} if isinstance(entry, str) else entry
        columns.update({f"model.layers.{i}.{k}": v for k, v in entry.items() if k != "name"})
    for i, layer in enumerate((record.get("state") or {}).get("layers") or []):
        columns[f"layer.{i}"] = layer.get("mixer")
        state = {k: v for k, v in layer.items() if k not in ("mixer", "knob")}
        columns.update({f"layer.{i}.{k}": v for k, v in state.items()})
    return columns


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists and scalars stay values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_sweep(path: str | Path) -> "pd.DataFrame":
    """Every job of a sweep (or every run under an `outputs/` folder) as one flat row: see
    `flat_row` for the columns. A failed job is a row too (`status`, `error`); columns a job
    does not have are NaN. Each record is held to the record's types
    (`harness.records.record_model`)."""
    import pandas as pd

    return pd.DataFrame([flat_row(r) for r in records_of(path, check=True)])


def describe_sweep(sweep: Path, description: dict) -> None:
    """Write `sweep.json` (command, number of jobs, swept keys, preset, W&B project, the
    sweep's id, each launch's number of jobs) and start this launch's progress counter; called
    once by the process that starts the sweep. A folder swept again (to resume, or to add jobs
    under another `hydra.sweep.subdir`, also by sweeps started at the same time) keeps its id,
    every command and all swept keys, and each launch counts its own jobs."""
    sweep.mkdir(parents=True, exist_ok=True)
    with open(sweep / DESCRIBING, "a") as lock:  # sweeps started at once into one folder
        fcntl.flock(lock, fcntl.LOCK_EX)  # each add their command, none overwrites another's
        earlier = sweep_description(sweep)
        description["id"] = earlier.get("id") or new_sweep_id(sweep)
        commands = [*earlier.get("commands", []), description["command"]]
        description["commands"] = list(dict.fromkeys(commands))
        swept = [*earlier.get("swept", []), *description["swept"]]
        description["swept"] = list(dict.fromkeys(swept))
        launch = str(os.getpid())
        description["launches"] = {**earlier.get("launches", {}), launch: description.get("jobs")}
        write_atomic(sweep / DESCRIPTION, json.dumps(description, indent=2) + "\n")
        progress_file(sweep, launch).write_text("")


def end_launch(sweep: Path) -> None:
    """Remove the progress counter of the launch this process started."""
    progress_file(sweep, str(os.getpid())).unlink(missing_ok=True)


def progress_file(sweep: Path, launch: str | None) -> Path:
    """The launch's counter of finished jobs (the folder's own for a job of no known launch)."""
    return Path(sweep) / (f"{PROGRESS}-{launch}" if launch else PROGRESS)


def new_sweep_id(sweep: Path) -> str:
    """`2025-01-31/12-00-00-1a2b3c4d`: the sweep's last two folders, readable, and a short hash
    of its absolute path, so that `a/sweep` and `b/sweep` differ."""
    path = Path(sweep).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    return f"{'/'.join(path.parts[-2:])}-{digest}"


def sweep_id(sweep: Path) -> str:
    """The sweep's id (its W&B group), fixed in `sweep.json` when the sweep starts, so that
    it stays the same when the folder is moved or copied; a sweep started another way gets
    `new_sweep_id`."""
    return sweep_description(sweep).get("id") or new_sweep_id(sweep)


def sweep_description(sweep: Path | None) -> dict:
    """`sweep.json` of `sweep`, or {} (no sweep, or one started another way)."""
    if sweep is None:
        return {}
    try:
        return json.loads((Path(sweep) / DESCRIPTION).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def job_position(sweep: Path) -> str:
    """`finished/jobs` of this job's launch, after counting this job as finished. A job runs in
    the process that launched its sweep (Hydra's local launcher) or in a child of it (joblib's
    workers), so the launch is found by process id; sweeps launched into one folder at the
    same time keep apart counts. A job of no known launch (a cluster launcher) counts in the
    folder's own counter against the description's number of jobs."""
    description = sweep_description(sweep)
    launches = description.get("launches") or {}
    launch = next((p for p in (str(os.getpid()), str(os.getppid())) if p in launches), None)
    jobs = launches[launch] if launch else description.get("jobs")
    return f"{count_finished_job(progress_file(sweep, launch))}/{jobs or '?'}"


def count_finished_job(counter: Path) -> int:
    """Count one more finished job and return how many have finished (jobs in parallel
    processes share the counter: a file grown by one byte under a lock)."""
    with open(counter, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(".")
            handle.flush()
            return handle.tell()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def value_at(record: dict, key: str) -> Any:
    """The value of a config key (`task.seq_len`, `backbone.d_model`, `seed`) in a record, or
    None: task and model keys from the resolved parameters, the rest from the config, and a
    config group that leaves no key of its own (`state_size`) from the record's `choices`."""
    group, _, name = key.partition(".")
    if key == "model.layers":  # as written: gdn(head_k_dim=4)+softmax
        given = ((record.get("config") or {}).get("model") or {}).get("layers")
        return layers_text(given) if given else None
    if group in ("task", "model") and name:
        return (record.get(f"{group}_params") or {}).get(name)
    node: Any = {**(record.get("config") or {}), "seed": record.get("seed")}
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return (record.get("choices") or {}).get(key) if node is None else node


def swept_values(record: dict, swept: list[str] | None) -> dict[str, Any]:
    """`{key: value}` of the record at the sweep's swept keys (the task and model groups,
    shown on their own, and Hydra's keys left out)."""
    keys = [k for k in swept or [] if k not in ("task", "model") and not k.startswith("hydra")]
    return {key: value_at(record, key) for key in keys}
