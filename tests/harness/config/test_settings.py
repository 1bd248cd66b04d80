"""The run-level settings are Hydra structured configs (`harness.config.settings`): the dataclass
is the default, the type and the schema at once, so Hydra refuses a wrong type while it
composes, and the declared ranges and choices refuse a bad value with one line naming the full
key, the value and what is allowed, before anything runs."""

import typing
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from harness.config.compose import compose_config
from harness.config.hashing import config_hash
from harness.config.refusal import BadInput
from harness.config.settings import PRECISIONS, RunSettings, check_settings, declared, defaults
from harness.training.build import build
from tests.conftest import QUIET, run_cli

TINY = ["task.seq_len=16", "task.num_kv_pairs=2", "data.num_train=64", "data.num_val=8",
        "data.num_test=8", *QUIET]  # fmt: skip

REFUSED = [
    ("threads=-1", "threads=-1 is invalid: must be a number >= 0"),
    ("trainer.precision=17", "trainer.precision=17 is invalid: must be one of 64, 32, 16,"),
    ("trainer.deterministic=maybe", "trainer.deterministic='maybe' is invalid: must be true, "
     "false, warn"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps=0 is invalid"),
    ("trainer.max_epochs=-2", "trainer.max_epochs=-2 is invalid: must be a number >= -1"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch=0 is invalid"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval=0 is invalid"),
    ("trainer.val_check_interval=1.5", "trainer.val_check_interval=1.5 is invalid"),
    ("trainer.accelerator=tpu", "trainer.accelerator='tpu' is invalid: must be one of auto, "),
    ("trainer.strategy=dpp", "trainer.strategy='dpp' is invalid: must be one of auto, ddp"),
    ("logger.mode=onlin", "logger.mode='onlin' is invalid: must be one of offline, online, "
     "disabled"),
    ("logger.init_timeout=0", "logger.init_timeout=0.0 is invalid: must be a number > 0"),
    ("data.seed=-1", "data.seed=-1 is invalid: must be a number >= 0"),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio=2.0 is invalid: must be a number in [0, 1]"),
    ("optim.schedule=linear", "optim.schedule='linear' is invalid: must be one of cosine, "),
    ("capacity.threshold=2", "capacity.threshold=2.0 is invalid: must be a number in (0, 1]"),
    ("early_stop_acc=0", "early_stop_acc=0.0 is invalid: must be a number in (0, 1]"),
    ("+report.figures={a:{kind:nosuch}}", "report.figures.a.kind='nosuch' is invalid"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), REFUSED)
def test_a_value_out_of_range_is_refused_in_one_line_naming_key_value_and_allowed(
    make_cfg, override: str, message: str
) -> None:
    with pytest.raises(BadInput) as caught:
        build(make_cfg([*TINY, *override.split()]))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "override",
    ["optim.lr=abc", "seed=1.5", "threads=two", "trainer.max_steps=abc", "optim.grad_clip=[1]",
     "logger.project=[a]", "optim.lr=null", "capacity.max_load=x"],
)  # fmt: skip
def test_hydra_refuses_a_value_of_the_wrong_type(override: str) -> None:
    with pytest.raises(ConfigCompositionException, match="Error merging override"):
        compose_config([override])


@pytest.mark.parametrize(
    "args",
    [["threads=-1"], ["trainer.precision=17"], ["logger.mode=onlin"], ["threads=two"]],
)
def test_cli_refusal_before_training_is_one_line_and_exit_2(tmp_path: Path, args) -> None:
    """As a new user types them: before any step, without a traceback, no folder left."""
    result = run_cli(tmp_path, *args, "hydra.run.dir=outputs/day/time")
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and args[-1].split("=")[0] in line
    assert " is invalid: must be " in line or " is refused: " in line
    assert not (tmp_path / "outputs").exists()


def test_the_defaults_pass_and_are_the_declared_ones(make_cfg) -> None:
    cfg = make_cfg([])
    check_settings(cfg)
    assert RunSettings().optim.lr == 0.002 and RunSettings().trainer.max_steps == 1200
    assert defaults()["early_stop_acc"] == 0.99 and defaults()["data.seed"] == "${seed}"
    assert cfg.optim.lr == 0.002 and cfg.trainer.strategy == "auto"
    assert isinstance(cfg.capacity.bound_multiple, int)  # an int stays an int in the hash


@pytest.mark.parametrize(
    ("key", "value"),
    [("early_stop_acc", None), ("optim.grad_clip", None), ("trainer.val_check_interval", 0.5),
     ("trainer.deterministic", "warn"), ("trainer.precision", "bf16-mixed"),
     ("trainer.precision", 32), ("trainer.max_epochs", None), ("logger.entity", "me")],
)  # fmt: skip
def test_the_allowed_special_values_pass(make_cfg, key: str, value) -> None:
    check_settings(make_cfg([f"{key}={'null' if value is None else value}"]))


def test_the_precisions_are_lightnings() -> None:
    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT

    values = [v for group in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(group)]
    assert set(PRECISIONS) == set(values)


def test_every_check_says_what_it_allows_and_refuses_a_list() -> None:
    for key, spec in declared().items():
        if spec.check is not None:
            try:
                passed = spec.check[0]([1, 2])
            except ValueError:  # report.figures raises its own refusal
                passed = False
            assert spec.check[1] and not passed, key


def test_checking_leaves_the_config_and_its_hash_as_they_are(make_cfg) -> None:
    cfg = make_cfg(["model=favor"])
    before = config_hash(cfg)
    check_settings(cfg)
    build(make_cfg([*TINY, "model=favor"]))
    assert config_hash(cfg) == before
