"""End to end: a run trains, tests and writes its record; softmax really learns recall."""

import json
import re
from pathlib import Path

import pytest

from harness.config.refusal import BadInput
from harness.records.record_model import checked
from harness.train import run
from tests.conftest import SMALL_RECALL, run_cli

RECORD_KEYS = {
    "status", "task", "model", "task_params", "model_params", "seq_len", "seed",
    "config_hash", "num_params", "state", "metrics", "train", "wandb",
}  # fmt: skip


@pytest.mark.slow
def test_softmax_learns_small_recall_and_records_it(make_cfg, tmp_path: Path) -> None:
    cfg = make_cfg([*SMALL_RECALL, "model=softmax", "logger=wandb"])
    record = run(cfg)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved == json.loads(json.dumps(record))
    assert saved.keys() >= RECORD_KEYS
    assert checked(saved) is saved  # written as the record's one declaration reads it
    assert saved["status"] == "ok"
    assert saved["metrics"]["test/acc"] >= 0.95
    assert saved["metrics"]["val/acc"] >= 0.95
    assert saved["train"]["steps"] < 1000  # early stopping passed the threshold
    floats = 2 * 24 * 64 + 3 * 64  # KV cache + the short conv's window (kernel 4)
    assert saved["state"] == {
        "floats_per_layer": floats,
        "bytes_per_layer": 4 * floats,
        "bytes_total": 2 * 4 * floats,
        "grows_with_seq_len": True,
        "rank_bound_per_layer": 24,  # the KV cache keeps every token
        "mixer_floats_per_layer": 2 * 24 * 64,
        "conv_floats_per_layer": 3 * 64,
        "knob": None,  # softmax has no state knob
        "floats_stack": 2 * floats,
        "mixer_floats_stack": 2 * 2 * 24 * 64,
        "rank_bound_stack": 48,
        "layers": [
            {
                "mixer": "softmax",
                "floats": floats,
                "mixer_floats": 2 * 24 * 64,
                "conv_floats": 3 * 64,
                "rank_bound": 24,
                "grows_with_seq_len": True,
                "knob": None,
            }
        ]
        * 2,
    }
    train = saved["train"]
    assert train["stopped_by"] == "early_stop_acc" and train["converged"] is True
    assert train["val_curve"][-1][0] == train["steps"]
    assert train["val_curve"][-1][1] == pytest.approx(saved["metrics"]["val/acc"], abs=1e-6)
    assert saved["metrics"]["test/baseline/in_context"] == 1 / 4
    assert saved["metrics"]["test/baseline/elimination"] == pytest.approx(1 / 4, abs=0.01)
    assert {f"test/acc_by/query_order/{i}" for i in range(4)} <= saved["metrics"].keys()
    assert saved["wandb"]["mode"] == "offline"
    assert Path(saved["wandb"]["run_dir"]).is_dir()


def test_bad_input_raises_before_training_and_is_recorded(make_cfg, tmp_path: Path) -> None:
    cfg = make_cfg([*SMALL_RECALL, "task.num_kv_pairs=20"])
    with pytest.raises(BadInput, match="num_kv_pairs=20"):
        run(cfg)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "failed" and "num_kv_pairs=20" in saved["error"]
    assert checked(saved)["train"] is None  # a failed run's record reads as one too


@pytest.mark.slow
def test_cli_favor_run_writes_record_and_offline_wandb(tmp_path: Path) -> None:
    small = [a for a in SMALL_RECALL if not a.startswith(("logger", "trainer.max_steps"))]
    result = run_cli(
        tmp_path, *small, "model=favor", "trainer.max_steps=30", f"hydra.run.dir={tmp_path}/run"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "ok" and saved["model"] == "favor"
    assert saved["state"]["floats_per_layer"] == 2 * (64 * 32 + 64) + 3 * 64
    assert saved["state"]["mixer_floats_per_layer"] == 2 * (64 * 32 + 64)  # no conv window
    assert saved["state"]["grows_with_seq_len"] is False
    assert 0.0 <= saved["metrics"]["test/acc"] <= 1.0
    assert saved["train"]["steps"] == 30
    (line,) = [line for line in result.stdout.splitlines() if " acc " in line]
    assert re.match(r"(ok|guessing) assoc_recall favor  acc ", line), line
    assert f"acc {saved['metrics']['test/acc']:.3f}" in line
    assert "state 4,224  " in line and line.endswith("-> run")  # the folder, from its cwd
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))


def test_cli_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "model=favor", "model.feature_dim=0", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1].startswith("error: model.feature_dim=0 is invalid")
    )
    assert "Traceback" not in result.stderr
