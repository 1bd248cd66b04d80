"""Older records are read in the current layout (`harness.records.record_model.migrated`): the
hash their command has now, and the state keys every reader expects; every committed record
migrates."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.hashing import config_hash
from harness.records.files import read_summary
from harness.records.record import config_of, new_record
from harness.records.record_model import NotARecord, Record, checked, completed_state, migrated
from harness.records.schema import SCHEMA_VERSION
from harness.records.sweep import records_of
from tests.conftest import REPO
from tests.harness.synthetic import record

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


def test_an_older_record_migrates_to_the_hash_its_command_has_now(make_cfg) -> None:
    cfg = make_cfg(["model=deltanet", "threads=1", "model.mode=recurrent"])
    older = {**record("deltanet"), "config_hash": "0123456789abcdef", "config": config_of(cfg)}
    del older["schema_version"]
    upgraded = migrated(older)
    assert upgraded["schema_version"] == SCHEMA_VERSION
    assert upgraded["config_hash"] == config_hash(make_cfg(["model=deltanet"]))
    assert older["config_hash"] == "0123456789abcdef"  # the record read is left as it was
    current = {**upgraded, "config_hash": "kept"}
    assert migrated(current) is current
    no_config = {**older, "config": None}
    assert migrated(no_config)["config_hash"] == "0123456789abcdef"  # no config: kept


def test_a_record_of_another_shape_is_refused_with_its_place_and_key() -> None:
    """The report's reading holds records to `harness.records.record_model.Record`: a missing or
    mistyped key, or one the record does not declare, is one line naming where and which."""
    good = record("deltanet")
    assert checked(good, "sweep, line 3") is good
    for broken, key in [
        ({**good, "train": {**good["train"], "steps": "many"}}, "train.steps"),
        ({**good, "status": "finished"}, "status"),
        ({**good, "stat": "ok"}, "stat"),
        ({k: v for k, v in good.items() if k != "run_dir"}, "run_dir"),
    ]:
        with pytest.raises(ValueError, match=rf"^sweep, line 3: {key}: "):
            checked(broken, "sweep, line 3")


def test_an_older_state_gets_the_mixers_floats_without_the_conv_window() -> None:
    zoology = {"short_conv": 4, "d_model": 64, "n_layers": 2}
    state = completed_state({"floats_per_layer": 720, "rank_bound_per_layer": 16}, zoology)
    assert state["mixer_floats_per_layer"] == 720 - 3 * 64
    assert state["conv_floats_per_layer"] == 3 * 64
    assert state["rank_bound_stack"] == 32
    no_conv = completed_state({"floats_per_layer": 720}, {"short_conv": 0, "d_model": 64})
    assert no_conv["mixer_floats_per_layer"] == 720 and no_conv["conv_floats_per_layer"] == 0
    recorded = {"floats_per_layer": 720, "mixer_floats_per_layer": 528, "rank_bound_stack": 8}
    assert completed_state(recorded, zoology) == {**recorded, "conv_floats_per_layer": 192}


@pytest.mark.parametrize(
    "folder", sorted({p.parent for p in RESULTS.rglob("summary.jsonl")}), ids=str
)
def test_every_committed_record_migrates_checks_and_no_two_jobs_merge(folder: Path) -> None:
    written = [json.loads(line) for line in (folder / "summary.jsonl").read_text().splitlines()]
    records = records_of(folder, check=True)  # each held to the record's one declaration
    assert len(records) == len({r["config_hash"] for r in written})  # one record a job, as before
    assert all(r["schema_version"] == SCHEMA_VERSION for r in records)
    with_state = [r for r in records if r.get("state")]
    assert all(r["state"]["mixer_floats_per_layer"] is not None for r in with_state)


def test_the_report_refuses_a_sweep_holding_a_broken_record_with_one_line(tmp_path) -> None:
    broken = record("linear")
    broken["train"]["steps"] = "many"
    (tmp_path / "summary.jsonl").write_text(json.dumps(broken) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "harness.report", str(tmp_path), "--wandb", "disabled"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {tmp_path / 'summary.jsonl'}, line 1: train.steps: "
        "Input should be a valid integer, unable to parse string as an integer"
    )


def test_training_reads_past_a_broken_line_and_a_refused_value_makes_a_valid_record(
    tmp_path, make_cfg
) -> None:
    """A sweep's own reading (`read_summary` without `check`) never stops at a broken line,
    and the record of a run refused for a non-integer length or seed is a record (the value
    stays in its config)."""
    broken = {**record("linear"), "status": "finished"}
    good = record("deltanet")
    (tmp_path / "summary.jsonl").write_text(f"{json.dumps(broken)}\n{json.dumps(good)}\n")
    assert [r["model"] for r in read_summary(tmp_path)] == ["linear", "deltanet"]
    with pytest.raises(NotARecord, match="line 1: status"):
        read_summary(tmp_path, check=True)
    refused = new_record(make_cfg(["task.seq_len=64.5"]), "hash", tmp_path)
    assert checked(refused)["seq_len"] is None and refused["config"]["task"]["seq_len"] == 64.5


def test_a_new_record_carries_its_commit_and_an_older_one_reads_null(make_cfg, tmp_path) -> None:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    fresh = new_record(make_cfg([]), "hash", tmp_path)
    assert len(head) == 40 and checked(fresh)["commit"] == head
    older = record("linear")  # written before records kept their commit
    assert "commit" not in older
    assert Record.model_validate(older).commit is None
    outside = {**fresh, "commit": None}
    assert checked(outside)["commit"] is None
