"""`python -m tasks.export` writes a task's splits as a Hugging Face dataset that reads back
as the very arrays a run trains, validates and tests on, with what generated them."""

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from harness.config.compose import compose_config
from harness.training.data_module import TaskDataModule
from tasks import build_task
from tasks.export import SIZES, main
from tasks.splits import SPLITS

PARAMS = {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": [1, 6]}
SIZE = {"train": 300, "val": 40, "test": 50}


def test_an_exported_task_round_trips_as_the_runs_splits(tmp_path: Path, capsys) -> None:
    args = ["assoc_recall", "vocab_size=64", "seq_len=32", "num_kv_pairs=[1,6]", "--seed", "5"]
    sizes = [f"--num-{split}={n}" for split, n in SIZE.items()]
    assert main([*args, *sizes, "--out", str(tmp_path / "mqar")]) == 0
    assert str(tmp_path / "mqar") in capsys.readouterr().out
    loaded = datasets.load_from_disk(str(tmp_path / "mqar"))
    task = build_task("assoc_recall", **PARAMS)
    run = TaskDataModule(task, SIZE["train"], SIZE["val"], SIZE["test"], batch_size=8, seed=5)
    run.setup()
    served = {"train": run.splits["train"], "val": run.splits["val"], "test": run.test_sets[0]}
    assert list(loaded) == list(SPLITS)
    for split in SPLITS:
        columns = loaded[split].with_format("numpy")[:]
        expected = served[split].arrays()
        assert set(columns) == set(expected) and len(columns["inputs"]) == SIZE[split]
        assert all(np.array_equal(columns[k], expected[k]) for k in expected), split
        about = json.loads(loaded[split].info.description)
        assert about["task"] == "assoc_recall" and about["params"] == task.params()
        assert (about["data_seed"], about["version"]) == (5, task.version)
        assert (about["split"], about["num_examples"]) == (split, SIZE[split])


def test_a_bad_parameter_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["assoc_recall", "seq_len=3", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("error: seq_len=3 is invalid")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("split", SPLITS)
def test_the_default_sizes_are_a_runs(split: str, tmp_path: Path) -> None:
    cfg = compose_config([], output_dir=tmp_path)
    assert SIZES[split] == cfg.data[f"num_{split}"]
