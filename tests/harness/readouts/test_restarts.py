"""A cell's restarts read as capacity and learnability (`harness.readouts.restarts`): the
capacity is the best restart on validation, never on test; learnability counts the restarts
within 0.8 of it, a lower bound where the capacity is; the design is seeds 0-2 x two rates,
each configuration once, extra restarts shown and never used."""

import pandas as pd

from harness.readouts.cell_law import observations
from harness.readouts.restarts import cells, restarts


def run(seed, lr, n90, val, censoring=None, verdict="capacity_limited", why=None, **extra):
    return {
        "model": "deltanet",
        "R": 8,
        "seed": seed,
        "optim.lr": lr,
        "status": "ok",
        "val/acc": val,
        "test/acc": extra.pop("test", val),
        "config_hash": f"{seed}-{lr}-{extra.pop('tag', '')}",
        "capacity.n90": n90,
        "capacity.n90_censoring": censoring,
        "capacity.verdict": verdict,
        "capacity.why": why,
        "state.mixer_floats_per_layer": 256.0,
        "state.rank_bound_stack": 8.0,
        **extra,
    }


def split_cell() -> list[dict]:
    """One restart learns (8.2), one nearly (7.0), the rest level off or sit at the floor."""
    return [
        run(0, 0.003, 8.2, 0.80),
        run(1, 0.003, 2.5, 0.60),
        run(2, 0.003, 2.0, 0.20, "left", "training_limited", "at_floor"),
        run(0, 0.01, 7.0, 0.75, test=0.99),  # the best on test, not on validation
        run(1, 0.01, 2.0, 0.40, "left", why="below_judging_load"),
        run(2, 0.01, 3.0, 0.65),
    ]


def test_the_capacity_is_the_best_restart_on_validation_and_learnability_counts_within_0_8():
    table = cells(pd.DataFrame(split_cell()), ["R"])
    cell = table.iloc[0]
    assert cell["capacity_n90"] == 8.2 and cell["capacity_seed"] == 0
    assert cell["capacity_lr"] == 0.003  # chosen on validation, not on its test accuracy
    assert (cell["learned"], cell["restarts"], cell["learnability"]) == (2, 6, "2 of 6")
    assert cell["extra"] == 0


def test_a_capacity_below_the_judging_load_is_learned_by_none():
    rows = [run(s, lr, 2.0, 0.3 + s / 10, "left") for s in (0, 1, 2) for lr in (0.003, 0.01)]
    cell = cells(pd.DataFrame(rows), ["R"]).iloc[0]
    assert cell["capacity_censoring"] == "left" and cell["learnability"] == "0 of 6"


def test_a_lower_bound_capacity_makes_learnability_a_lower_bound():
    rows = split_cell()
    rows[0] = run(0, 0.003, 16.0, 0.80, "right", "training_limited", "still_rising_lower_bound")
    cell = cells(pd.DataFrame(rows), ["R"]).iloc[0]
    assert cell["learnability"] == ">=1 of 6" and cell["learned_lower_bound"]


def test_the_design_is_three_seeds_at_two_rates_each_config_once():
    rows = split_cell()
    rows.append(run(3, 0.003, 30.0, 0.99))  # a fourth seed: shown, never the capacity
    rows.append(run(0, 0.03, 31.0, 0.99))  # a third rate, run once
    rows.append(run(1, 0.003, 2.5, 0.60))  # the same config again (same hash)
    frame = restarts(pd.DataFrame(rows))
    assert len(frame) == 8 and frame["in_design"].sum() == 6
    cell = cells(pd.DataFrame(rows), ["R"]).iloc[0]
    assert cell["capacity_n90"] == 8.2 and cell["restarts"] == 6 and cell["extra"] == 2


def test_the_capacity_law_reads_the_restarts_that_reach_it():
    """The capacity's observations are its replicates: the restarts within 0.8 of the best,
    not the levelled-off or floor ones; the typical estimand reads every readable restart."""
    runs = restarts(pd.DataFrame(split_cell()))
    table = cells(runs, ["R"])
    keys = ["model", "R"]
    capacity = observations(runs, table, "capacity", keys, "rank_bound")
    typical = observations(runs, table, "typical", keys, "rank_bound")
    assert sorted(o.value for o in capacity) == [7.0, 8.2]
    assert len(typical) == 5  # the run at the floor is no readout of the state
