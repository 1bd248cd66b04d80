"""Files the harness writes follow the user's umask, as a plain `open`/`mkdir` would: a run's
record, the sweep's summary and description, so that collaborators on a shared filesystem can
read them where the umask lets them."""

import os
import stat
from pathlib import Path

import pytest

from harness.records.files import append_summary, write_atomic
from harness.records.sweep import describe_sweep


@pytest.fixture(params=[0o022, 0o002], ids=["umask022", "umask002"])
def mask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_records_summary_and_description_follow_the_umask(tmp_path: Path, mask: int) -> None:
    write_atomic(tmp_path / "results.json", "{}\n")
    append_summary(tmp_path, {"status": "ok"})
    describe_sweep(tmp_path, {"command": "python run.py -m", "swept": ["model"]})
    for name in ("results.json", "summary.jsonl", "sweep.json"):
        assert mode(tmp_path / name) == 0o666 & ~mask, name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("results.json.")]
