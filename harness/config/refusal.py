"""A refusal: bad input found before training, as one line that names the full key, the value
and what is allowed, and exit code 2 (`harness.records.failures` is the rest of the failure
policy)."""

import contextlib
import os
import sys
from collections.abc import Iterator

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
