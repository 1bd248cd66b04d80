"""`python -m harness.evaluate`: kept weights re-tested at the training settings reproduce the
run's test metrics exactly, at other lengths they reproduce the run's own length slices, and
bad overrides are refused with one line and exit code 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.api import run_config
from harness.config.refusal import BadInput
from harness.evaluate import evaluate, load_model, main
from harness.training.checkpoint import kept_weights
from tests.conftest import REPO, SMALL_TASKS, SMOKE


def metrics_of(record: dict) -> dict:
    """The test metrics of a record."""
    return {k: v for k, v in record["metrics"].items() if k.startswith("test/")}


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory) -> tuple[Path, dict]:
    """A FAVOR+ run (random features: every buffer must come back) without positions, tested at
    its own length 24 and at 48, that kept its weights."""
    tmp = tmp_path_factory.mktemp("kept")
    record = run_config(
        "assoc_recall",
        "favor",
        *SMALL_TASKS["assoc_recall"],
        *SMOKE,
        "trainer.max_steps=30",
        "data.num_test=256",
        "backbone.pos_emb=none",
        "backbone.short_conv=3",
        "task.eval_seq_lens=[48]",
        "checkpoint.keep=true",
        f"checkpoint.dir={tmp / 'checkpoints'}",
        output_dir=tmp / "run",
    )
    assert record["status"] == "ok"
    return tmp / "run", record


def test_evaluating_at_the_training_settings_reproduces_the_run(kept_run) -> None:
    run_dir, trained = kept_run
    record = evaluate(run_dir)
    assert metrics_of(record) == metrics_of(trained)
    assert len(metrics_of(record)) > 4  # acc, seq_acc, both lengths, the slices
    assert record["config_hash"] == trained["config_hash"]
    assert record["run_dir"] == str(run_dir / "eval" / trained["config_hash"])
    saved = json.loads((run_dir / "eval" / trained["config_hash"] / "results.json").read_text())
    assert saved["status"] == "ok" and saved["train"] is None
    assert saved["evaluated"] == {"run_dir": str(run_dir), "overrides": [], "trained_seq_len": 24}


def test_evaluating_at_another_length_matches_the_runs_length_slice(kept_run) -> None:
    run_dir, trained = kept_run
    record = evaluate(run_dir, ["task.seq_len=48", "task.eval_seq_lens=[]"])
    assert record["seq_len"] == 48 and record["task_params"]["seq_len"] == 48
    assert record["metrics"]["test/acc"] == trained["metrics"]["test/acc_by/seq_len/48"]
    assert record["state"]["floats_per_layer"] == trained["state"]["floats_per_layer"]  # favor
    assert record["config_hash"] != trained["config_hash"]


def test_a_load_curve_on_kept_weights(kept_run) -> None:
    """A run trained at 4 pairs in 24 tokens, re-tested at 1, 2, 4 and 8 pairs in 48,
    with the baselines at each load and the curve's readout."""
    run_dir, trained = kept_run
    record = evaluate(run_dir, ["task.test={num_kv_pairs:[1,8],load_dist:log2,seq_len:48}"])
    for n in (1, 2, 4, 8):
        assert 0 <= record["metrics"][f"test/acc_by/num_kv_pairs/{n}"] <= 1
        baseline = record["metrics"][f"test/baseline_by/num_kv_pairs/{n}/in_context"]
        assert baseline == pytest.approx(1 / n, rel=0.1)
    assert record["capacity"]["load"] == "num_kv_pairs" and record["capacity"]["judged_at"] == 2
    assert trained["capacity"] is None  # trained and tested at one load
    refused = ["task.test={num_kv_pairs:[1,8]}"]  # 8 pairs do not fit the 24 trained tokens
    with pytest.raises(BadInput, match=r"task\.test\."):
        evaluate(run_dir, refused)


def test_a_run_trained_on_other_devices_is_re_tested_here(kept_run, tmp_path: Path) -> None:
    """Weights trained with DDP on GPUs are re-tested as one process on this machine."""
    run_dir, trained = kept_run
    moved = tmp_path / "gpu_run"
    moved.mkdir()
    (moved / "model.pt").write_bytes((run_dir / "model.pt").read_bytes())
    saved = json.loads((run_dir / "results.json").read_text())
    saved["config"]["trainer"].update(accelerator="gpu", devices=8, strategy="ddp")
    saved["weights"] = str(moved / "model.pt")
    (moved / "results.json").write_text(json.dumps(saved))
    record = evaluate(moved)
    assert metrics_of(record) == metrics_of(trained)


def test_load_model_gives_the_trained_model(kept_run) -> None:
    run_dir, trained = kept_run
    model = load_model(run_dir)
    assert not model.training
    weights = kept_weights(run_dir)
    assert all(torch.equal(t, weights[k]) for k, t in model.state_dict().items())
    assert sum(p.numel() for p in model.parameters()) == trained["num_params"]
    tokens = torch.randint(1, 32, (2, 48))  # a length past the trained 24: no positions
    assert model(tokens).shape == (2, 48, 32)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.feature_dim=8", "model.feature_dim cannot change when re-testing kept weights"),
        ("optim.lr=1", "optim.lr cannot change"),
        ("task.name=copy", "task.name cannot change"),
        ("task.vocab_size=64", "task.vocab_size=64 is invalid: must be 32"),
        ("task.seq_len=10", "seq_len=10 is invalid"),
        ("task.seq_len", "'task.seq_len' is not a key=value override"),
        ("task.seq_len=32,64", "one value per key"),
        ("task.nope=1", "has no parameter 'nope'"),
        ("data.num_test=0", "data.num_test=0 is invalid"),
    ],
)
def test_bad_overrides_are_refused_in_one_line_with_exit_2(
    kept_run, capsys, override: str, message: str
) -> None:
    run_dir, _ = kept_run
    assert main([str(run_dir), override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_a_run_without_kept_weights_is_refused(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(BadInput, match="train it with checkpoint.keep=true"):
        evaluate(tmp_path)
    with pytest.raises(BadInput, match="has no results.json"):
        evaluate(tmp_path / "nothing")


def test_learned_positions_refuse_lengths_past_the_trained_one(tmp_path: Path) -> None:
    run_config(
        "assoc_recall",
        "softmax",
        *SMALL_TASKS["assoc_recall"],
        *SMOKE,
        "checkpoint.keep=true",
        f"checkpoint.dir={tmp_path / 'checkpoints'}",
        output_dir=tmp_path / "run",
    )
    with pytest.raises(BadInput, match="task.seq_len=32 is invalid: must be <= 24, the trained"):
        evaluate(tmp_path / "run", ["task.seq_len=32"])
    shorter = evaluate(tmp_path / "run", ["task.seq_len=16"])  # the trained table, cut to 16
    assert shorter["seq_len"] == 16 and shorter["status"] == "ok"


def test_cli_writes_its_record_and_says_where(kept_run, tmp_path: Path) -> None:
    run_dir, _ = kept_run
    out = tmp_path / "evaluation"
    result = subprocess.run(
        [sys.executable, "-m", "harness.evaluate", str(run_dir), "task.seq_len=48", "--out", out],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{out}/results.json" in result.stdout
    assert json.loads((out / "results.json").read_text())["seq_len"] == 48


@pytest.mark.slow
def test_a_trained_model_is_reproduced_exactly_and_at_a_shorter_length(tmp_path: Path) -> None:
    """Softmax solves small recall; its kept weights give the same accuracy again (well above
    chance), and at length 16 the same accuracy as the run's own length-16 test set."""
    trained = run_config(
        "assoc_recall",
        "softmax",
        "data.num_train=20000",
        "data.num_val=500",
        "data.num_test=500",
        "trainer.max_steps=1500",
        "trainer.enable_progress_bar=false",
        "logger=none",
        *SMALL_TASKS["assoc_recall"],
        "task.eval_seq_lens=[16]",
        "checkpoint.keep=true",
        f"checkpoint.dir={tmp_path / 'checkpoints'}",
        output_dir=tmp_path / "run",
    )
    assert trained["metrics"]["test/acc"] >= 0.9
    again = evaluate(tmp_path / "run")
    assert metrics_of(again) == metrics_of(trained)
    assert again["capacity"] == trained["capacity"]  # judged by the run's own plateau rule
    shorter = evaluate(tmp_path / "run", ["task.seq_len=16", "task.eval_seq_lens=[]"])
    assert shorter["metrics"]["test/acc"] == trained["metrics"]["test/acc_by/seq_len/16"]
