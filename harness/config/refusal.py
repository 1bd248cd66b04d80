"""A refusal: bad input found before training, as one line that names the full key, the value
and what is allowed, and exit code 2 (`harness.records.failures` is the rest of the failure
policy); and the run-level checks before anything is built (`check_run`): the declared ranges
and choices (`harness.config.settings`), the task's test lengths (the harness's key of every
task group) and the device request (`harness.config.devices`). The constructors check their
own parameters."""

import contextlib
import os
import sys
from collections.abc import Iterator

from omegaconf import DictConfig

from common.checks import require_int
from harness.config.devices import check_devices, cpu_build
from harness.config.settings import check_settings

EXIT_BAD_INPUT = 2
"""Bad input, refused before anything ran (as argparse and Hydra's own usage errors)."""


class BadInput(ValueError):
    """A user's mistake found before training: the message names the full key, the value and
    what is allowed, in one line."""


@contextlib.contextmanager
def as_bad_input() -> Iterator[None]:
    """A `ValueError` raised inside (a constructor's or a check's) is the user's input:
    re-raised as `BadInput` with the same message."""
    try:
        yield
    except BadInput:
        raise
    except ValueError as error:
        raise BadInput(str(error)) from error


def full_error() -> bool:
    """`HYDRA_FULL_ERROR=1`: every exception with its traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def refused(error: BadInput) -> int:
    """Print a refusal as its one line (`error: <message>`) and return its exit code; with
    `HYDRA_FULL_ERROR=1` raise it instead."""
    if full_error():
        raise error
    print(f"error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT


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
