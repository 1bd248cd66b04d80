"""The run-level checks before anything is built: the declared ranges and choices
(`harness.config.settings`), the task's test lengths (the harness's key of every task group)
and the device request (`harness.config.devices`), each refused as one `BadInput` line naming
the full key, the value and what is allowed; the constructors check their own parameters."""

from omegaconf import DictConfig

from common.checks import require_int
from harness.config.devices import check_devices, cpu_build
from harness.config.refusal import as_bad_input
from harness.config.settings import check_settings


def check_run(cfg: DictConfig, frameworks: bool = True) -> None:
    """Raise `BadInput` for the first run-level setting the run would refuse.

    `frameworks=False` imports neither torch nor Lightning (`run.py`'s early check): it checks
    the device request only where torch is a CPU build (`cpu_build`), whose devices are known
    without it."""
    with as_bad_input():
        check_settings(cfg)
        for length in cfg.task.get("eval_seq_lens") or []:
            require_int("task.eval_seq_lens", length, 1)
        if frameworks or cpu_build():
            check_devices(cfg, cpu_only=not frameworks)
