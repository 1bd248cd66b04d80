"""The run-level settings are declared once (`harness.config.settings`): the declaration refuses a
bad value of every key, the harness's own and those it passes on to Lightning and W&B, with
one line naming the full key, the value and what is allowed, before anything runs."""

from pathlib import Path

import pytest
from omegaconf import open_dict

from harness.config.hashing import config_hash
from harness.config.refusal import BadInput
from harness.config.settings import ABSENT, RunSettings, check_settings, declared, defaults
from harness.training.build import build
from tests.conftest import QUIET, run_cli

TINY = ["task.seq_len=16", "task.num_kv_pairs=2", "data.num_train=64", "data.num_val=8",
        "data.num_test=8", *QUIET]  # fmt: skip

REFUSED = [
    ("trainer.max_steps=abc", "trainer.max_steps='abc' is invalid: must be an integer >= 1"),
    ("threads=-1", "threads=-1 is invalid: must be an integer >= 0"),
    ("threads=two", "threads='two' is invalid: must be an integer >= 0"),
    ("trainer.precision=17", "trainer.precision=17 is invalid: must be one of 64, 32, 16,"),
    ("trainer.enable_progress_bar=yes", "trainer.enable_progress_bar='yes' is invalid: must be"
     " true or false"),
    ("trainer.deterministic=maybe", "trainer.deterministic='maybe' is invalid: must be true, "
     "false or warn"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps=0 is invalid"),
    ("trainer.max_epochs=-2", "trainer.max_epochs=-2 is invalid: must be null (no epoch limit)"),
    ("trainer.num_sanity_val_steps=x", "trainer.num_sanity_val_steps='x' is invalid"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch=0 is invalid"),
    ("trainer.accelerator=tpu", "trainer.accelerator='tpu' is invalid: must be one of auto, "),
    ("+trainer.num_nodes=two", "trainer.num_nodes='two' is invalid: must be an integer >= 1"),
    ("+trainer.strategy=dpp", "trainer.strategy='dpp' is invalid: must be one of auto, ddp"),
    ("logger=wandb logger.mode=onlin", "logger.mode='onlin' is invalid: must be one of "
     "offline, online, disabled"),
    ("logger=wandb logger.init_timeout=0", "logger.init_timeout=0 is invalid: must be > 0"),
    ("logger=wandb logger.project=2024", "logger.project=2024 is invalid: must be a string"),
    ("checkpoint.keep=yes", "checkpoint.keep='yes' is invalid: must be true or false"),
    ("resume=1", "resume=1 is invalid: must be true or false"),
    ("data.seed=-1", "data.seed=-1 is invalid: must be an integer >= 0"),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio=2 is invalid: must be in [0, 1]"),
    ("optim.warmup_fraction=x", "optim.warmup_fraction='x' is invalid: must be a number in [0, 1]"),
    ("capacity.threshold=2", "capacity.threshold=2 is invalid: must be in (0, 1]"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), REFUSED)
def test_a_bad_value_is_refused_in_one_line_naming_key_value_and_allowed(
    make_cfg, override: str, message: str
) -> None:
    with pytest.raises(BadInput) as caught:
        build(make_cfg([*TINY, *override.split()]))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "args",
    [
        ["threads=two"],
        ["threads=-1"],
        ["trainer.precision=17"],
        ["trainer.enable_progress_bar=yes"],
        ["logger=wandb", "logger.mode=onlin"],
    ],
)
def test_cli_refusal_before_training_is_one_line_and_exit_2(tmp_path: Path, args) -> None:
    """As a new user types them: before any step, without a traceback, no folder left."""
    result = run_cli(tmp_path, *args, "hydra.run.dir=outputs/day/time")
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {args[-1].split('=')[0]}=") and " is invalid: must be " in line
    assert not (tmp_path / "outputs").exists()


def test_the_defaults_pass_and_are_the_declared_ones(make_cfg) -> None:
    cfg = make_cfg([])
    check_settings(cfg)
    assert RunSettings().optim.lr == 0.002 and RunSettings().trainer.max_steps == 1200
    assert defaults()["early_stop_acc"] == 0.99 and defaults()["data.seed"] == "${seed}"
    assert "trainer.strategy" not in defaults()  # only trainer=ddp (or +trainer.strategy) sets it


def test_every_declared_key_refuses_a_value_of_the_wrong_type() -> None:
    """No key takes just anything: a list fits none of them (trainer.devices is checked
    against the machine by harness.config.devices)."""
    for key, setting in declared().items():
        if key == "trainer.devices":
            continue
        with pytest.raises(ValueError, match=rf"^{key}=\[1, 2\] is invalid: must be "):
            setting.check([1, 2])


@pytest.mark.parametrize(
    ("key", "value"),
    [("early_stop_acc", None), ("optim.grad_clip", None), ("trainer.val_check_interval", 0.5),
     ("trainer.deterministic", "warn"), ("trainer.precision", "bf16-mixed"),
     ("trainer.precision", 32), ("trainer.max_epochs", None), ("logger.entity", "me")],
)  # fmt: skip
def test_the_allowed_special_values_pass(key: str, value) -> None:
    declared()[key].check(value)


def test_checking_leaves_the_config_and_its_hash_as_they_are(make_cfg) -> None:
    cfg = make_cfg(["model=favor"])
    before = config_hash(cfg)
    check_settings(cfg)
    build(make_cfg([*TINY, "model=favor"]))
    assert config_hash(cfg) == before


def test_a_key_the_config_does_not_have_is_not_checked(make_cfg) -> None:
    cfg = make_cfg(["logger=none"])
    assert "project" not in cfg.logger and declared()["logger.project"].default is not ABSENT
    with open_dict(cfg):
        cfg.trainer.pop("log_every_n_steps")
    check_settings(cfg)
