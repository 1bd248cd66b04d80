"""Device requests: one line and exit 2 for what the machine cannot do (a GPU where there is
none, more processes than cores, fp16 on CPU, a batch that does not split over processes);
and a `bf16-mixed` run trains end to end."""

import json
import math
from pathlib import Path

import pytest
import torch

from harness.config import devices
from harness.config.devices import check_devices
from harness.records.files import read_summary
from harness.train import run
from tests.conftest import SMOKE, run_cli

DDP_CPU = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


@pytest.fixture
def two_cores(monkeypatch):
    """The checks as on a 2-core machine without a GPU, whatever this one has."""
    monkeypatch.setattr(devices, "cpu_cores", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer=gpu"], "trainer.accelerator='gpu' is invalid: must be cpu or auto"),
        (["trainer=ddp"], "trainer.accelerator='gpu' is invalid: must be cpu or auto"),
        (["trainer.accelerator=cpu", "trainer.devices=4"], "trainer.devices=4 is invalid: "
         "must be an integer in [1, 2]: this machine has 2 CPU cores"),
        (["trainer=ddp", "trainer.accelerator=cpu"], "trainer.devices=-1 is invalid"),
        (["trainer.devices=0"], "trainer.devices=0 is invalid"),
        (["trainer.precision=16-mixed"], "trainer.precision='16-mixed' is invalid: must be "
         "32-true, bf16-mixed or bf16-true on CPU"),
        ([*DDP_CPU, "data.batch_size=63"], "data.batch_size=63 is invalid: must be a multiple"
         " of the 2 processes"),
        ([*DDP_CPU, "data.num_test=1"], "data.num_test=1 is invalid: must be >= 2"),
    ],
)  # fmt: skip
def test_requests_the_machine_cannot_meet_are_refused(make_cfg, two_cores, overrides, message):
    with pytest.raises(ValueError) as error:
        check_devices(make_cfg(overrides))
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    "overrides",
    [[], ["trainer.accelerator=cpu"], DDP_CPU, ["trainer.precision=bf16-mixed"]],
)
def test_requests_the_machine_can_meet_pass(make_cfg, two_cores, overrides) -> None:
    check_devices(make_cfg(overrides))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cli_gpu_without_one_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "trainer=gpu", "logger=none", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: trainer.accelerator='gpu' is invalid: must be cpu or auto: this machine has no"
        " CUDA GPU (trainer=gpu and trainer=ddp ask for one)"
    ]


def test_ddp_in_a_local_multirun_is_refused_and_recorded(tmp_path: Path) -> None:
    """Lightning's DDP relaunches the command line; in a local sweep that is the sweep."""
    sweep = tmp_path / "sweep"
    result = run_cli(tmp_path, "-m", *DDP_CPU, "logger=none", f"hydra.sweep.dir={sweep}")
    assert result.returncode != 0
    (record,) = read_summary(sweep)
    assert record["status"] == "failed"
    assert "trainer.devices=2 is invalid: must be 1 in a local multirun" in record["error"]


@pytest.mark.slow
def test_bf16_mixed_run_ends_ok(make_cfg, tmp_path: Path) -> None:
    """DeltaNet's chunk form could not run in bf16 at all on CPU (no bf16 triangular solve)."""
    record = run(make_cfg([*SMOKE, "model=deltanet", "trainer.precision=bf16-mixed"]))
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "ok" and record["train"]["steps"] == 4
    assert saved["config"]["trainer"]["precision"] == "bf16-mixed"
    metrics = [saved["metrics"][k] for k in ("test/acc", "test/seq_acc", "val/acc")]
    assert all(v is not None and math.isfinite(v) and 0 <= v <= 1 for v in metrics)


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer=gpu"],
        ["trainer.accelerator=cpu", "trainer.devices=4"],
        ["trainer=gpu", "optim.lr=0"],  # the settings first, as the full check
        ["trainer.precision=16-mixed", "logger.mode=bogus"],
        ["trainer.precision=16-mixed"],  # fp16 on CPU
        ["trainer=ddp", "trainer.strategy=bogus"],  # the declared choices before the devices
    ],
)
def test_the_early_check_refuses_what_the_full_check_refuses_first(
    make_cfg, two_cores, monkeypatch, overrides
) -> None:
    """`run.py`'s check before torch is imported (a CPU build) refuses what the full check
    refuses first."""
    from harness.config import refusal
    from harness.config.refusal import BadInput, check_run

    monkeypatch.setattr(refusal, "cpu_build", lambda: True)
    cfg = make_cfg(overrides)
    with pytest.raises(BadInput) as full:
        check_run(cfg)
    with pytest.raises(BadInput) as early:
        check_run(cfg, frameworks=False)
    assert str(early.value) == str(full.value)
