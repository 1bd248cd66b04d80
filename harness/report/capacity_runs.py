"""The runs the capacity figure draws (docs/background.md, section 17): each ok restart of a
cell's design (`harness.readouts.restarts`), its best marked, with its readouts
(`harness.readouts.capacity`, read anew by `harness.report.reread`) beside its mixer's state
per layer (`state.mixer_floats_per_layer`: the short convolution's window, which holds no
earlier binding, left out) and its stack's rank bound (`state.rank_bound_stack`, the sum over
layers).

One rule for weak runs, the same for every family (docs/background.md, "The capacity
protocol"): a run at its floor is left out and counted; a still-rising run is right-censored
at its reading (a lower bound), or left out and counted when its reading lies below the
judging load (nothing to read); a converged run that levelled off below the judging load is
left-censored there."""

from dataclasses import dataclass

import pandas as pd

from harness.readouts.capacity import RIGHT
from harness.readouts.censored_law import Observation, readout_observation
from harness.readouts.restarts import readable, restarts
from harness.records.record import KV_CACHES
from harness.records.schema import OK
from harness.report.capacity_law import CELL
from harness.report.frame import missing, state_value

PARTS = ("", "_censoring", "_se_log", "_low", "_high")
"""A readout's fields beside its value (`harness.readouts.capacity.readout`)."""


@dataclass(frozen=True)
class CapacityRun:
    """One ok run's readouts: its mixer (variant name), state floats per layer, seed, n90 and
    n50 with their censoring and sampling error (log scale), verdict and its reason (`why`),
    training state and the stack's rank bound."""

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
    n90_low: float | None = None
    n90_high: float | None = None
    n50_low: float | None = None
    n50_high: float | None = None
    training: str | None = None
    seed: int | None = None
    load: str | None = None
    threshold: float | None = None
    why: str | None = None
    best: bool = False
    """The restart its cell's capacity was read from (`harness.readouts.restarts`)."""

    @property
    def fitted(self) -> bool:
        """A readout of the state, by the one rule for weak runs (the module docstring;
        `harness.readouts.restarts.readable`)."""
        why = {"capacity.verdict": self.verdict, "capacity.why": self.why, "capacity.n90": self.n90}
        return readable(why)

    @property
    def lower_bound(self) -> bool:
        return self.n90_censoring == RIGHT

    def observation(self, name: str = "n90", axis: str = "floats") -> Observation | None:
        """The run as an observation of the censored fit (`harness.readouts.censored_law`) on
        the law's x `axis`: the state's `floats` or the stack's `rank_bound`."""
        value, size = getattr(self, name), getattr(self, axis)
        if not self.fitted or value is None or value <= 0 or not size:
            return None
        return readout_observation(
            size,
            getattr(self, f"{name}_censoring"),
            value,
            getattr(self, f"{name}_low"),
            getattr(self, f"{name}_high"),
            getattr(self, f"{name}_se_log") or 0.0,
            f"{self.floats:g}",
        )


def bound_of(name: str) -> str:
    """The state field that bounds a mixer's stack: the layers' sum (`rank_bound_stack`), or
    for a KV cache, whose layers all cache the same tokens, one layer's (`KV_CACHES`)."""
    return "rank_bound_per_layer" if name.split(" ", 1)[0] in KV_CACHES else "rank_bound_stack"


def run_of(name: str, seed: dict, best: bool = False) -> CapacityRun | None:
    """One seed's row as a run; None without a verdict or a state size."""
    floats = state_value(seed, "mixer_floats_per_layer")
    if seed.get("capacity.verdict") is None or floats is None:
        return None
    fields = [f"{n}{part}" for n in ("n90", "n50") for part in PARTS]
    return CapacityRun(
        mixer=name,
        floats=floats,
        verdict=seed.get("capacity.verdict"),
        rank_bound=state_value(seed, bound_of(name)),
        why=seed.get("capacity.why"),
        training=seed.get("capacity.training"),
        seed=seed.get("seed"),
        load=seed.get("capacity.load"),
        threshold=seed.get("capacity.threshold"),
        best=best,
        **{f: seed.get(f"capacity.{f}") for f in fields},
    )


def design_runs(frame: pd.DataFrame, table: pd.DataFrame) -> list[CapacityRun]:
    """Every ok restart in its cell's design (`harness.readouts.restarts.restarts`) as a run,
    the one each cell's capacity was read from marked `best`."""
    if frame.empty:
        return []
    chosen = {
        (c["mixer"], c[CELL], c["capacity_seed"], c["capacity_lr"]) for _, c in table.iterrows()
    }
    runs = []
    for _, row in restarts(frame, "mixer").iterrows():
        if not row["in_design"] or row["status"] != OK:
            continue
        clean = {k: v for k, v in row.items() if not missing(v)}
        best = (row["mixer"], row[CELL], row["seed"], row["optim.lr"]) in chosen
        run = run_of(row["mixer"], clean, best)
        if run is not None:
            runs.append(run)
    return runs
