"""Read an offline W&B run back (its `run-<id>.wandb` file) to test what a sync would upload.

The file is a LevelDB-style log (wandb's own format): a 7-byte header (`:W&B`, magic 0xBEE1,
version 0), then 32 KiB blocks of chunks, each `<crc32 u32, length u16, type u8>` + payload
(type 1 = a whole record, 2/3/4 = first/middle/last piece); every record is a protobuf
`wandb_internal_pb2.Record`. A file cut short (its process killed) is read up to its last
whole record."""

import json
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
HEADER = 7


def raw_records(path: Path):
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    position, pieces = HEADER, b""
    while position + HEADER <= len(data):
        left = BLOCK - position % BLOCK
        if left < HEADER:  # the block's tail is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + HEADER])
        position += HEADER
        if position + length > len(data):
            return  # a torn last chunk
        pieces += data[position : position + length]
        position += length
        if kind in (1, 4):
            yield pieces
            pieces = b""
        elif kind == 0 and length == 0:
            pieces = b""


def value_of(item) -> object:
    """A config/summary item's value (its key may be nested: `state.floats_per_layer`)."""
    return json.loads(item.value_json)


def key_of(item) -> str:
    return item.key or ".".join(item.nested_key)


@dataclass
class OfflineRun:
    name: str = ""
    group: str = ""
    project: str = ""
    job_type: str = ""
    run_id: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    metrics: list = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)


WRITTEN_WITHIN_S = 60.0
"""How long W&B's service may take to write a finished run's file: `wandb.finish()` can return
while the file still holds only its header (measured with wandb 0.31: 7 bytes at return, the
whole run a few seconds later)."""


def read_run(run_dir: Path) -> OfflineRun:
    """Everything an offline run recorded, once W&B has written it (its `exit` record, or
    `WRITTEN_WITHIN_S`): run header, config, summary, history, define_metric."""
    deadline = time.monotonic() + WRITTEN_WITHIN_S
    run = parse_run(run_dir)
    while not run.kinds["exit"] and time.monotonic() < deadline:
        time.sleep(0.2)
        run = parse_run(run_dir)
    return run


def parse_run(run_dir: Path) -> OfflineRun:
    """What an offline run's file holds now."""
    (path,) = Path(run_dir).glob("run-*.wandb")
    run = OfflineRun()
    for raw in raw_records(path):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(raw)
        except DecodeError:
            break  # a torn last record
        kind = record.WhichOneof("record_type")
        run.kinds[kind] += 1
        if kind == "run":
            header = record.run
            run.name, run.group, run.project = header.display_name, header.run_group, header.project
            run.job_type, run.run_id, run.tags = header.job_type, header.run_id, list(header.tags)
            run.config.update({key_of(i): value_of(i) for i in header.config.update})
        elif kind == "config":
            run.config.update({key_of(i): value_of(i) for i in record.config.update})
        elif kind == "summary":
            run.summary.update({key_of(i): value_of(i) for i in record.summary.update})
        elif kind == "history":
            run.history.append({key_of(i): value_of(i) for i in record.history.item})
        elif kind == "metric":
            run.metrics.append(record.metric)
    return run
