"""Synthetic load-curve records for the report's tests: accuracy against MQAR pairs built to
read a given n90, with the in-context guess (1/n) as the floor, and a training state."""

import math

from tests.harness.synthetic import record

LOADS = (1, 2, 4, 8, 16, 32, 64)
PER_LOAD = 400
TRAIN = {
    "converged": {"converged": True},
    "still_rising": {"converged": False, "val_curve": [[100, 0.2], [400, 0.8]], "floor": 0.16},
    "at_floor": {"converged": False, "val_curve": [[100, 0.15], [400, 0.16]], "floor": 0.16},
}


def accuracies(n90: float, slope: float = 0.1) -> dict[int, float]:
    """acc(n) = 0.9 - slope log2(n / n90), within [1/n + 0.02, 1]: linear in log load, so
    that the readout interpolates back to n90 exactly where both neighbours are inside."""
    return {n: min(1.0, max(1 / n + 0.02, 0.9 - slope * math.log2(n / n90))) for n in LOADS}


def load_metrics(accs: dict[int, float]) -> dict[str, float]:
    out = {f"test/acc_by/num_kv_pairs/{n}": a for n, a in accs.items()}
    for n in accs:
        out[f"test/baseline_by/num_kv_pairs/{n}/in_context"] = 1 / n
        out[f"test/baseline_by/num_kv_pairs/{n}/chance"] = 1 / 128
    return out


def curve_record(
    model: str,
    d_model: int,
    seed: int,
    accs: dict[int, float],
    training: str = "converged",
    threshold: float = 0.9,
) -> dict:
    """One load-curve run's record; its stored `capacity` is deliberately stale (the report
    reads the curve anew)."""
    rec = record(model, d_model=d_model, seed=seed, metrics=load_metrics(accs))
    rec["task_params"]["num_kv_pairs"] = [1, max(accs)]
    rec["train"].update(TRAIN[training])
    rec["state"]["rank_bound_per_layer"] = 64 if model == "softmax" else d_model  # T; H x D
    rec["state"]["rank_bound_stack"] = 2 * rec["state"]["rank_bound_per_layer"]  # two layers
    rec["config"]["data"]["num_test"] = PER_LOAD * len(accs)
    rec["config"]["capacity"] = {"threshold": threshold}
    stale = {"n90": 999.0, "n50": 999.0, "verdict": "not_limited", "threshold": threshold}
    rec["capacity"] = {"load": "num_kv_pairs", **stale}
    return rec
