"""Every preset (`conf/experiment/*.yaml`) composes in-process, each value its sweep names
builds, and one tiny job of it runs end to end through `debug=smoke`."""

import itertools
import re
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from harness.train import run
from harness.training.build import build
from tests.conftest import REPO, SMOKE, run_cli

PRESETS = sorted(path.stem for path in (REPO / "conf" / "experiment").glob("*.yaml"))
SMOKE_SIZES = yaml.safe_load((REPO / "conf" / "debug" / "smoke.yaml").read_text())


def preset(name: str) -> dict:
    return yaml.safe_load((REPO / "conf" / "experiment" / f"{name}.yaml").read_text())


def sweep_values(name: str) -> dict[str, list[str]]:
    """The preset's `hydra.sweeper.params`: key -> the values it sweeps, as Hydra splits them
    (a swept list, `model.layers: [a,b],[c,d]`, is one value each)."""
    params = preset(name).get("hydra", {}).get("sweeper", {}).get("params", {})
    parser = OverridesParser.create()
    overrides = parser.parse_overrides([f"{key}={values}" for key, values in params.items()])
    return {o.get_key_element(): list(o.sweep_string_iterator()) for o in overrides}


CELL = {"capacity_law": ["+state_size=deltanet_k4"]}
"""A preset whose jobs are cells of a state sweep runs one cell."""


def test_there_are_presets() -> None:
    assert {"retrieval_gap", "state_frontier", "needle_grid", "copy_length"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_runs_one_tiny_job_through_debug_smoke(make_cfg, name: str) -> None:
    cfg = make_cfg([f"experiment={name}", *SMOKE, *CELL.get(name, [])])
    task_override = next(d for d in preset(name)["defaults"] if "override /task" in d)
    assert cfg.task.name == task_override["override /task"]
    for key, value in preset(name).get("task", {}).items():
        if not str(value).startswith("${"):
            assert cfg.task[key] == value, key  # the preset's settings survive debug=smoke
    assert cfg.trainer.max_steps == SMOKE_SIZES["trainer"]["max_steps"]
    assert cfg.data.num_train == SMOKE_SIZES["data"]["num_train"]
    assert cfg.logger.name == "none"

    record = run(cfg)
    assert record["status"] == "ok", record.get("error")
    assert record["task"] == cfg.task.name
    assert record["train"]["steps"] == SMOKE_SIZES["trainer"]["max_steps"]
    assert 0.0 <= record["metrics"]["test/acc"] <= 1.0
    assert record["wandb"] is None


@pytest.mark.parametrize("name", PRESETS)
def test_every_combination_a_preset_sweeps_builds(make_cfg, name: str) -> None:
    """Each job of the preset's sweep composes and constructs (task, model, data), so a typo
    in a swept name or an impossible combination fails here, not hours into a sweep."""
    swept = sweep_values(name)
    assert swept, f"{name} sweeps nothing"
    for values in itertools.product(*swept.values()):
        overrides = [f"{key}={value}" for key, value in zip(swept, values, strict=True)]
        cfg = make_cfg([f"experiment={name}", *SMOKE, *overrides])
        parts = build(cfg)
        assert parts.model.state_size(parts.task.seq_len) > 0, overrides


def test_presets_resolve_without_run_py(make_cfg) -> None:
    """`${mul:...}` is registered by `harness.config.compose`, so presets compose in-process."""
    cfg = make_cfg(["experiment=retrieval_gap", "task.num_kv_pairs=8"])
    assert cfg.task.seq_len == 64


def test_div_ties_the_batch_to_the_length(make_cfg) -> None:
    """`${div:a,b}` = a // b, e.g. the same number of tokens per step at every length."""
    cfg = make_cfg(["task.seq_len=256", "data.batch_size='${div:4096,${task.seq_len}}'"])
    assert cfg.data.batch_size == 16


def test_smoke_comes_after_the_preset_and_the_command_line_after_both(make_cfg) -> None:
    cfg = make_cfg(["experiment=needle_grid", "debug=smoke", "trainer.max_steps=7"])
    assert preset("needle_grid")["trainer"]["max_steps"] != SMOKE_SIZES["trainer"]["max_steps"]
    assert cfg.data.num_train == SMOKE_SIZES["data"]["num_train"]  # smoke beats the preset
    assert cfg.trainer.max_steps == 7  # the command line beats smoke


@pytest.mark.slow
def test_cli_preset_with_debug_smoke(tmp_path: Path) -> None:
    result = run_cli(
        tmp_path, "experiment=retrieval_gap", *SMOKE, f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "results.json").exists()
    assert re.search(r"^(ok|guessing) assoc_recall softmax\s.*\bacc \d\.\d{3}", result.stdout, re.M)
