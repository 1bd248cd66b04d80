"""A run over a range of loads: per-load accuracies and baselines, the capacity readout and its
verdict in the record and on the console line, tests beyond the training loads, a mixture of
task settings, and the refusals, all before training."""

import json
from pathlib import Path

import pytest

from harness.config.refusal import BadInput
from harness.readouts.capacity import VERDICTS, readout_of, shown
from harness.train import run
from harness.training.console import job_line
from tests.conftest import run_cli

CURVE = [
    "task=assoc_recall",
    "task.vocab_size=64",
    "task.seq_len=48",
    "task.num_kv_pairs=[2,6]",
    "task.test={num_kv_pairs:[1,8],load_dist:log2}",
    "data.num_train=2000",
    "data.num_val=200",
    "data.num_test=400",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "logger=none",
    "threads=1",
]


def test_a_load_range_run_records_the_whole_curve(make_cfg, tmp_path: Path) -> None:
    record = run(make_cfg(CURVE))
    assert record["status"] == "ok", record.get("error")
    metrics = record["metrics"]
    tested = (1, 2, 4, 8)  # log2 over [1, 8]: beyond the trained 2-6 on both sides
    for n in tested:
        assert 0 <= metrics[f"test/acc_by/num_kv_pairs/{n}"] <= 1
        # in-context guessing picks one of the n values in the context
        in_context = metrics[f"test/baseline_by/num_kv_pairs/{n}/in_context"]
        assert in_context == pytest.approx(1 / n, rel=0.05)
    assert not any(k.startswith("test/acc_by/num_kv_pairs/3") for k in metrics)
    capacity = record["capacity"]
    assert capacity == readout_of(metrics, 0.9, record["train"], 400)
    assert capacity["load"] == "num_kv_pairs" and capacity["judged_at"] == 2
    assert capacity["verdict"] in VERDICTS
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["capacity"] == json.loads(json.dumps(capacity))
    assert f"  n90 {shown(capacity, 'n90')}: {capacity['verdict']}  " in job_line(saved, {})


def test_a_single_load_run_has_no_capacity(make_cfg) -> None:
    overrides = [o for o in CURVE if not o.startswith(("task.num_kv_pairs", "task.test"))]
    record = run(make_cfg([*overrides, "task.num_kv_pairs=4"]))
    assert record["status"] == "ok" and record["capacity"] is None
    assert not any("baseline_by" in k for k in record["metrics"])


def test_a_mixture_of_lengths_trains_and_tests_the_task(make_cfg) -> None:
    mixture = (
        "task.mixture=[{seq_len:24,num_kv_pairs:2,share:3},{seq_len:48,num_kv_pairs:6,share:1}]"
    )
    record = run(make_cfg([*CURVE, mixture]))
    assert record["status"] == "ok", record.get("error")
    # two components of 24 and 48 tokens in shares 3 : 1 -> 30 tokens per example on average
    steps, batch = record["train"]["steps"], record["config"]["data"]["batch_size"]
    tokens = record["train"]["tokens_per_s"] * record["train"]["wall_s"]
    assert tokens == pytest.approx(steps * batch * 30, rel=0.02)
    assert record["capacity"]["load"] == "num_kv_pairs"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("task.num_kv_pairs=[6,2]", "task.num_kv_pairs=[6, 2] is invalid"),
        ("task.test={num_kv_pairs:[1,20]}", "task.test.seq_len=48 is invalid"),
        ("task.load_dist=zipf", "task.load_dist='zipf' is invalid"),
        ("task.load_weights={2:1,9:1}", "task.load_weights"),
        ("task.mixture=[{seq_len:24,num_kv_pairs:2}]", "task.mixture[0].share=None is invalid"),
    ],
)
def test_bad_load_settings_are_refused_before_training(make_cfg, override, message) -> None:
    with pytest.raises(BadInput) as refused:
        run(make_cfg([*CURVE, override]))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_a_load_that_cannot_fit_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_cli(
        tmp_path, *CURVE, "task.num_kv_pairs=[2,20]", f"hydra.run.dir={tmp_path / 'r'}"
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "task.seq_len=48 is invalid" in lines[0], result.stderr
    assert "largest load 20" in lines[0]
