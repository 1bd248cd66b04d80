"""The report's readouts, read anew from each record's load curve at the threshold asked for
(`harness.readouts.capacity.readout_of`): a record's stored `capacity` is informative only,
since `capacity` is out of the config hash and a sweep resumed with another
`capacity.threshold` keeps its old readouts. Whether a run converged is judged anew too, by
the one rule every readout uses (`harness.readouts.convergence.training_state`), so that a
record written under an older rule is read as today's are."""

from harness.config.settings import defaults
from harness.readouts.capacity import readout_of
from harness.readouts.convergence import CONVERGED, training_state
from harness.records.schema import OK

CAPACITY = "capacity."
SETTINGS = tuple(key for key in defaults() if key.startswith(CAPACITY))
"""The run's `capacity.*` settings (threshold, protocol, ...), kept beside the readouts."""
TRAIN = "train."


def default_threshold() -> float:
    """The declared default of `capacity.threshold` (`harness.config.settings`)."""
    return float(defaults()["capacity.threshold"])


def threshold_of(rows: list[dict], requested: float | None = None) -> float:
    """`requested` (`--threshold`), else the sweep's `capacity.threshold` where its jobs agree,
    else the declared default."""
    if requested is not None:
        return float(requested)
    asked = {r["capacity.threshold"] for r in rows if r.get("capacity.threshold") is not None}
    return float(asked.pop()) if len(asked) == 1 else default_threshold()


def reread(rows: list[dict], threshold: float) -> list[dict]:
    """`rows` with every ok run's `capacity.*` columns read anew from its metrics at
    `threshold` (the run's `train.*` for its training state, `data.num_test` for the sampling
    error, `plateau.min_delta`), and its `train.converged` judged anew from its validation
    curve (`train.state`: `converged`, `still_rising` or `at_floor`); a run without a load curve
    keeps no readout."""
    out = []
    for row in rows:
        kept = {k: v for k, v in row.items() if not k.startswith(CAPACITY) or k in SETTINGS}
        if row.get("status") == OK:
            train = {k[len(TRAIN) :]: v for k, v in row.items() if k.startswith(TRAIN)}
            min_delta = row.get("plateau.min_delta", defaults()["plateau.min_delta"])
            state = training_state(train, min_delta, row.get("data.num_val")) if train else None
            if state is not None:
                kept[f"{TRAIN}converged"] = state == CONVERGED
                kept[f"{TRAIN}state"] = state
            found = readout_of(
                row, threshold, train or None, row.get("data.num_test"), min_delta,
                row.get("data.num_val"),
            )  # fmt: skip
            kept.update({f"{CAPACITY}{k}": v for k, v in (found or {}).items()})
        out.append(kept)
    return out
