"""The Python API: `run_config` runs a config without the command line, overrides given as
strings, keywords or dicts alike; `checkpoint.keep=true` keeps the final weights."""

import json
from pathlib import Path

import pytest
import torch

from harness.api import run_config
from harness.config.compose import hydra_value, overrides_of
from harness.config.refusal import BadInput
from harness.training.checkpoint import WEIGHTS, kept_weights
from models.backbone import LanguageModel
from tests.conftest import SMOKE


@pytest.fixture
def where(tmp_path: Path) -> dict:
    """Settings that keep a run's files inside `tmp_path`."""
    return {
        "output_dir": tmp_path / "run",
        "checkpoint": {"dir": str(tmp_path / "checkpoints")},
    }


def test_overrides_from_keywords() -> None:
    assert overrides_of({"trainer.max_steps": 50, "trainer": {"val_check_interval": 5}}) == [
        "trainer.max_steps=50",
        "trainer.val_check_interval=5",
    ]
    assert overrides_of({"task": {"eval_seq_lens": [32, 64]}, "seed": 1, "debug": "smoke"}) == [
        "task.eval_seq_lens=[32,64]",
        "seed=1",
        "debug=smoke",
    ]
    assert [hydra_value(v) for v in (True, None, 0.5, "a b", "it's")] == [
        "true",
        "null",
        "0.5",
        "'a b'",
        "'it\\'s'",
    ]


def test_run_config_runs_and_writes_the_record(where: dict, tmp_path: Path) -> None:
    record = run_config(
        "copy",
        "linear",
        *SMOKE,
        "task.seq_len=20",
        task_params={"copy_len": 5},
        model_params={"n_heads": 4},
        seed=3,
        trainer={"max_steps": 6},
        **{"task.vocab_size": 16},
        **where,
    )
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved == json.loads(json.dumps(record))
    assert (record["status"], record["task"], record["model"]) == ("ok", "copy", "linear")
    assert (record["seq_len"], record["seed"], record["train"]["steps"]) == (20, 3, 6)
    assert record["task_params"]["vocab_size"] == 16 and record["task_params"]["copy_len"] == 5
    assert record["model_params"]["n_heads"] == 4
    assert record["weights"] is None and not (tmp_path / "run" / WEIGHTS).exists()


def test_run_config_composes_presets(where: dict) -> None:
    record = run_config(None, "linear", *SMOKE, experiment="retrieval_gap", **where)
    assert record["status"] == "ok"
    assert (record["task"], record["task_params"]["num_kv_pairs"], record["seq_len"]) == (
        "assoc_recall",
        8,
        64,  # ${mul:8,${task.num_kv_pairs}}
    )


def test_run_config_refuses_bad_input_before_training(where: dict, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="feature_dim=0 is invalid"):
        run_config("assoc_recall", "favor", *SMOKE, **{"model.feature_dim": 0}, **where)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "failed" and saved["train"] is None


@pytest.mark.parametrize(
    ("args", "keywords", "nearest"),
    [
        (["trainer.max_step=50"], {}, "trainer.max_steps"),
        ([], {"task_params": {"num_kv_pair": 4}}, "task.num_kv_pairs"),
    ],
)
def test_a_mistyped_key_is_refused_naming_the_nearest(
    where: dict, tmp_path: Path, args: list, keywords: dict, nearest: str
) -> None:
    with pytest.raises(BadInput, match=f"did you mean {nearest}"):
        run_config("assoc_recall", "linear", *SMOKE, *args, **keywords, **where)
    assert not (tmp_path / "run").exists()  # refused before the run folder


def test_keep_saves_the_final_weights_beside_the_record(where: dict, tmp_path: Path) -> None:
    where["checkpoint"]["keep"] = True
    record = run_config("assoc_recall", "favor", *SMOKE, **where)
    assert record["status"] == "ok"
    assert record["weights"] == str(tmp_path / "run" / WEIGHTS)
    assert not list((tmp_path / "checkpoints").glob("*/last.ckpt"))  # resume state still goes
    weights = kept_weights(tmp_path / "run")
    config = record["config"]
    model = LanguageModel(
        vocab_size=config["task"]["vocab_size"],
        max_seq_len=config["task"]["seq_len"],
        mixer="favor",
        mixer_params={k: v for k, v in config["model"].items() if k != "name"},
        **config["backbone"],
    )
    model.load_state_dict(weights)  # every tensor of the model, FAVOR+'s random features too
    assert sum(p.numel() for p in model.parameters()) == record["num_params"]
    omegas = [k for k in weights if k.endswith("feature_map.omega")]
    assert omegas and all(torch.isfinite(weights[k]).all() for k in omegas)
