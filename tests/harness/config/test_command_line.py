"""Every mistake Hydra would refuse on the command line (an unknown key, a wrong type, an option
a group does not have, in any job of a sweep) is one line, Hydra's or OmegaConf's error with the
nearest valid name, and exit 2, before the first job (`harness.config.command_line`); Hydra's
own syntax passes; `--help` is the
tool's page and lists every group option and preset from conf/."""

from pathlib import Path

import pytest

from harness.config.command_line import check_command_line, check_overrides
from harness.config.compose import CONF_DIR
from harness.config.group_nodes import group_options
from harness.config.help import preset_lines
from harness.config.refusal import BadInput
from tests.conftest import run_cli

MISTAKES = [
    (
        ["model.feture_dim=8"],
        "model.feture_dim=8 is refused: Key 'feture_dim' is not in struct (did you mean "
        "model.feature_dim? a key of model=based, favor, linear, rff)",
    ),
    (
        ["model=favor", "+model.feture_dim=8"],
        "+model.feture_dim=8 is refused: model.feture_dim is not a setting (did you mean "
        "model.feature_dim?)",
    ),
    (["model.feature_dim=8"], "(a key of model=based, favor, linear, rff)"),
    (["model=softmax,favor", "model.feature_dim=8"], "(a key of model=based, favor, linear,"),
    (["+optim.lr=0.1"], "+optim.lr=0.1 is refused: Could not append to config. An item is"),
    (["lr=0.1"], "lr=0.1 is refused: Key 'lr' not in 'RunSettings' (did you mean optim.lr?)"),
    (["optm.lr=0.1"], "(did you mean optim.lr?)"),
    (["trainer.max_step=3"], "Key 'max_step' not in 'Trainer' (did you mean trainer.max_steps?)"),
    (["model.num_heads=4"], "(did you mean model.n_heads?)"),
    (["~task.tst"], "~task.tst is refused: Could not delete from config. 'task.tst' does not"),
    (["task=copy", "task.num_kv_pairs=3"], "(a key of task=assoc_recall, noisy_recall"),
    (["optim.lr=abc"], "optim.lr=abc is refused: Value 'abc' of type 'str' could not be "
     "converted to Float"),
    (["-m", "optim.lr=0.1,abc"], "optim.lr=abc is refused: Value 'abc'"),  # any job of a sweep
    (["seed=1.5"], "seed=1.5 is refused: Value '1.5' of type 'float' could not be converted"),
    (["model=softmx"], "model=softmx is refused: softmx is not an option of model (did you mean "),
    (["model=softmax,softmx"], "model=softmax,softmx is refused: softmx is not an option"),
    (["task=assoc_recal"], "(did you mean task=assoc_recall?)"),
    (["experiment=retrival_gap"], "(did you mean experiment=retrieval_gap?)"),
    (["backbone=zoolog"], "(did you mean backbone=zoology?)"),
    (["trainer=gpus"], "(did you mean trainer=gpu?)"),
    (["+state_size=deltanet_k9"], "(did you mean +state_size=deltanet_k8?)"),  # an added group
    (["model=xyz"], "xyz is not an option of model (options: based, deltanet, favor,"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "line"), MISTAKES)
def test_a_mistake_is_one_line_with_the_nearest_valid_name(overrides: list[str], line: str) -> None:
    with pytest.raises(BadInput) as caught:
        check_overrides([o for o in overrides if o != "-m"])
    assert line in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=favor", "model.feature_dim=8"],
        ["experiment=state_frontier", "model.feature_dim=8"],  # the preset's model
        ["+trainer.limit_val_batches=2", "++optim.lr=0.1", "~task.eval_seq_lens"],
        ["+state_size=deltanet_k4", "optim.lr=0.1,0.2", "trainer.precision=bf16-mixed"],
        ["hydra.run.dir=x", "hydra/launcher=local", "hydra.launcher.n_jobs=3"],
        ["task.seq_len=range(16,64,16)", "seed=0,1", "model=glob(*)", "experiment=null"],
        ["model@mixer=softmax", "debug=smoke", "task.test={num_kv_pairs:[2,64]}"],
        ["task=", "key with spaces"],  # not Hydra's syntax: Hydra's own message
        ["model=hybrid", "model.layers=[gated_deltanet,{name: softmax, n_heads: 2}]"],
    ],
)
def test_hydra_syntax_passes(overrides: list[str]) -> None:
    check_overrides(overrides)


def test_full_error_leaves_the_mistake_to_hydra(monkeypatch) -> None:
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    check_command_line(["model=softmx"])  # no exit: Hydra raises its own error


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["model.feture_dim=8"], "(did you mean model.feature_dim?"),
        (["+model.feture_dim=8"], "(did you mean model.feature_dim?"),
        (["model=softmx"], "(did you mean model=softmax?)"),
        (["-m", "model=softmax,softmx"], "(did you mean model=softmax?)"),
        (["experiment=retrival_gap"], "(did you mean experiment=retrieval_gap?)"),
        (["optim.lr=abc"], "could not be converted to Float"),
    ],
)
def test_cli_name_mistake_is_one_line_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    result = run_cli(tmp_path, *args, "hydra.run.dir=out", "hydra.sweep.dir=sweep")
    assert result.returncode == 2, result.stderr[-2000:]
    (printed,) = result.stderr.strip().splitlines()
    assert printed.startswith("error: ") and line in printed
    assert not (tmp_path / "out").exists() and not (tmp_path / "sweep").exists()


def test_presets_are_listed_with_their_description() -> None:
    lines = preset_lines().splitlines()
    assert [line.split()[0] for line in lines] == group_options()["experiment"]
    assert all(len(line) <= 96 and len(line.split()) > 2 for line in lines)


@pytest.mark.slow
def test_help_is_the_tools_own_and_lists_every_option(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    assert "powered by Hydra" not in text
    for part in ("python run.py task=", "python run.py -m ", "python -m harness.report", "README"):
        assert part in text, part
    folders = [p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"]
    assert sorted(group_options()) == sorted({*folders, "model", "task"})
    for group, options in group_options().items():
        assert f"{group}: {', '.join(options)}" in text, group
    from models import MIXERS
    from tasks import TASKS

    assert group_options()["model"] == sorted([*MIXERS.names(), "hybrid"])
    assert group_options()["task"] == TASKS.names()
    for preset in group_options()["experiment"]:
        assert f"\n  {preset} " in text, preset
