"""The runs behind the capacity law (docs/background.md, section 17): each ok load-curve seed's
readouts (`harness.readouts.capacity`, read anew by `harness.report.reread`) beside its
mixer's state per layer (`state.mixer_floats_per_layer`: the short convolution's window, which
holds no earlier binding, left out) and its rank bound."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from common.checks import is_real
from harness.readouts.capacity import LEFT, RIGHT, TRAINING_LIMITED
from harness.readouts.censored_law import EXACT, Observation
from harness.records.schema import OK
from harness.report.load_curve import seeds_of
from harness.report.points import Point

KIND = {None: EXACT, LEFT: "left", RIGHT: "right"}
"""A readout's censoring as the censored fit's observation kind."""


@dataclass(frozen=True)
class CapacityRun:
    """One ok run's readouts: its mixer (variant name), state floats per layer, cell (the
    mixer's state setting), seed, n90 and n50 with their censoring and sampling error (log
    scale), verdict, training state and rank bound."""

    mixer: str
    floats: float
    n90: float | None
    verdict: str | None
    rank_bound: float | None = None
    n90_censoring: str | None = None
    n90_se_log: float | None = None
    n50: float | None = None
    n50_censoring: str | None = None
    n50_se_log: float | None = None
    training: str | None = None
    seed: int | None = None
    load: str | None = None
    threshold: float | None = None

    @property
    def fitted(self) -> bool:
        """A readout of the state: a run that is not training_limited, with a readout."""
        return self.verdict not in (None, TRAINING_LIMITED) and self.n90 is not None

    @property
    def lower_bound(self) -> bool:
        return self.n90_censoring == RIGHT

    def observation(self, name: str = "n90") -> Observation | None:
        """The run as an observation of the censored fit (`harness.readouts.censored_law`)."""
        value = getattr(self, name)
        if not self.fitted or value is None or value <= 0:
            return None
        se = getattr(self, f"{name}_se_log") or 0.0
        kind = KIND[getattr(self, f"{name}_censoring")]
        return Observation(self.floats, kind, value, se_log=se, cell=f"{self.floats:g}")


def known(value: object) -> bool:
    """A number, not a gap (None, or NaN where other records have the key)."""
    return is_real(value) and not math.isnan(value)


def mixer_floats(row: dict) -> float | None:
    """The mixer's state per layer: `state.mixer_floats_per_layer`, or (records without it)
    `state.floats_per_layer` less the short convolution's window, (kernel - 1) x d_model."""
    if known(row.get("state.mixer_floats_per_layer")):
        return float(row["state.mixer_floats_per_layer"])
    floats = row.get("state.floats_per_layer")
    if not known(floats):
        return None
    kernel, width = row.get("backbone.short_conv") or 0, row.get("backbone.d_model") or 0
    return float(floats - max(kernel - 1, 0) * width)


def run_of(name: str, seed: dict) -> CapacityRun | None:
    """One seed's row as a run; None without a verdict or a state size."""
    floats = mixer_floats(seed)
    if seed.get("capacity.verdict") is None or floats is None:
        return None
    fields = ("n90", "n90_censoring", "n90_se_log", "n50", "n50_censoring", "n50_se_log")
    return CapacityRun(
        mixer=name,
        floats=floats,
        verdict=seed.get("capacity.verdict"),
        rank_bound=seed.get("state.rank_bound_per_layer"),
        training=seed.get("capacity.training"),
        seed=seed.get("seed"),
        load=seed.get("capacity.load"),
        threshold=seed.get("capacity.threshold"),
        **{f: seed.get(f"capacity.{f}") for f in fields},
    )


def capacity_runs(
    points: list[Point], point_keys: list[str], rows: list[dict], names: Sequence[str] | None = None
) -> list[CapacityRun]:
    """Every ok seed with a load-curve readout behind `points` (the learning rate chosen per
    point); `names`, aligned with `points`, name the mixers (a model's variants, "linear
    taylor"), default each point's model."""
    runs = []
    for point, name in zip(points, names or [p.model for p in points], strict=True):
        if point.status != OK or not point.capacity:
            continue
        found = (run_of(name, seed) for seed in seeds_of(point, rows, point_keys))
        runs.extend(run for run in found if run is not None)
    return runs
