"""A run's record, named in one place: the statuses it can end with, the keys the harness
writes beside its metrics, and the files a run and a sweep keep (docs/record.md).

    ok        the run trained and tested
    diverged  the training loss became NaN or infinite (or a denominator collapsed); the
              record's `train.diverged_at_step` says when
    failed    anything else: bad input (refused before training), an error
    interrupted  stopped by Ctrl-C or a signal (SIGINT, SIGTERM); the training state is in its
              checkpoint, and running the same command again resumes it
"""

from collections import Counter

OK = "ok"
DIVERGED = "diverged"
FAILED = "failed"
INTERRUPTED = "interrupted"
"""A run stopped by Ctrl-C or a signal; its error says which (`interrupted (SIGTERM)`)."""
STATUSES = (OK, DIVERGED, FAILED, INTERRUPTED)
"""The statuses a record ends with, in the order a sweep's summary counts them."""
ALWAYS_COUNTED = (OK, DIVERGED, FAILED)
"""The statuses a summary counts even at 0; `interrupted` is counted only when some run was."""

DIVERGED_AT_STEP = "diverged_at_step"
"""Key of the record's `train` block: the optimiser step at which the run diverged (None when
it did not)."""

SCHEMA_VERSION = 2
"""The record's layout (`schema_version`; a record without one is version 1): version 2 hashes
a config by its settings' roles (`harness.config.hashing.identity_hash`), so that threads,
devices or a mixer's mode no longer make a run another one. `harness.records.record_model.migrated`
brings an older record up to it."""

RECORD = "results.json"
"""A run's record, in its folder (and a re-test's, in its own)."""
SUMMARY = "summary.jsonl"
"""A sweep's records, one line per finished job, in the sweep's folder."""
TRACEBACK = "traceback.txt"
"""The traceback of a sweep job that failed on an error, in the job's folder."""


def status_of(record: dict) -> str:
    """A record's status; a record without one (cut short by a kill) counts as failed."""
    return record.get("status", FAILED)


def tally(statuses: Counter) -> str:
    """`3 ok, 0 diverged, 1 failed` (and `, 1 interrupted` when one was): how a sweep's jobs
    ended."""
    shown = [s for s in STATUSES if s in ALWAYS_COUNTED or statuses[s]]
    return ", ".join(f"{statuses[s]} {s}" for s in shown)
