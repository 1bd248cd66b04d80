"""The report's capacity-against-state figure (`capacity_vs_state.png`) and the capacity law in
its table and notes, on synthetic load-curve records: drawn where a mixer has readouts at two
or more state sizes, its fit over the runs that measure the state only."""

import math
from pathlib import Path

import pytest
from matplotlib.markers import CARETUPBASE

from harness.readouts.power_law import fit_power_law
from harness.report import report
from harness.report.capacity_law import capacity_figure, capacity_laws, capacity_runs
from harness.report.points import aggregate
from tests.harness.synthetic import record, write_sweep

HEADS = 2
LARGEST_LOAD = 64


def floats_of(model: str, d_model: int, seq_len: int = 256) -> int:
    head = d_model // HEADS
    return {
        "linear": HEADS * (head * head + head),
        "deltanet": HEADS * head * head,
        "retnet": HEADS * head * head,
        "softmax": 2 * seq_len * d_model,
    }[model]


def bound_of(model: str, d_model: int, seq_len: int = 256) -> int:
    return seq_len if model == "softmax" else d_model


def curve_record(
    model: str, d_model: int, seed: int, n90: float | None, verdict: str = "capacity_limited"
) -> dict:
    """A load-curve run's record: its readout (`capacity`) and its state with the rank bound."""
    rec = record(model if model != "retnet" else "deltanet", d_model=d_model, seed=seed)
    rec["model"] = model
    rec["config_hash"] += f"-{model}"
    rec["run_dir"] += f"-{model}"
    rec["task_params"]["num_kv_pairs"] = [4, LARGEST_LOAD]
    floats = floats_of(model, d_model)
    rec["state"] = {
        "floats_per_layer": floats,
        "bytes_per_layer": 4 * floats,
        "bytes_total": 8 * floats,
        "grows_with_seq_len": model == "softmax",
        "rank_bound_per_layer": bound_of(model, d_model),
    }
    censored = ["n90"] if n90 == LARGEST_LOAD else []
    rec["capacity"] = {
        "load": "num_kv_pairs",
        "n90": n90,
        "n50": None if n90 is None else 1.5 * n90,
        "verdict": verdict,
        "threshold": 0.9,
        "judged_at": 2,
        "censored": censored,
    }
    return rec


def law_value(model: str, d_model: int, seed: int) -> float:
    """A capacity law per mixer with a seed's scatter: n90 = a floats^b * exp(noise)."""
    a, b = {"linear": (0.4, 0.5), "deltanet": (0.9, 0.42), "retnet": (0.6, 0.45)}[model]
    return a * floats_of(model, d_model) ** b * math.exp(0.08 * (-1) ** seed * (1 + d_model % 3))


def law_records() -> list[dict]:
    """linear and deltanet at four widths, two seeds each; one linear run training_limited
    (far below its law), one at the largest tested load (a lower bound); retnet at two widths
    with two runs; softmax, not_limited at two seeds (lower bounds at one state size)."""
    records = [
        curve_record(m, d, s, law_value(m, d, s))
        for m in ("linear", "deltanet")
        for d in (16, 32, 64, 128)
        for s in (0, 1)
        if not (m == "linear" and d == 128 and s == 1)
    ]
    records.append(curve_record("linear", 128, 1, float(LARGEST_LOAD), "not_limited"))
    records.append(curve_record("linear", 128, 2, 2.5, "training_limited"))
    records += [curve_record("retnet", d, 0, law_value("retnet", d, 0)) for d in (32, 64)]
    records += [curve_record("softmax", 64, s, float(LARGEST_LOAD), "not_limited") for s in (0, 1)]
    return records


def runs_of(records: list[dict]):
    import pandas as pd

    from harness.records.sweep import flat_row
    from harness.report.points import clean_rows

    rows = clean_rows(pd.DataFrame([flat_row(r) for r in records]))
    points = aggregate(rows, ["backbone.d_model", "seed"])
    return capacity_runs(points, ["backbone.d_model", "seed"], rows), rows


def included(records: list[dict], model: str) -> list[tuple[float, float]]:
    return [
        (r["state"]["floats_per_layer"], r["capacity"]["n90"])
        for r in records
        if r["model"] == model
        and r["capacity"]["verdict"] != "training_limited"
        and not r["capacity"]["censored"]
    ]


def test_the_fit_leaves_out_training_limited_runs_and_lower_bounds() -> None:
    records = law_records()
    runs, rows = runs_of(records)
    laws = capacity_laws(runs)
    expected = fit_power_law(included(records, "linear"))
    assert laws["linear"].b == pytest.approx(expected.b, rel=1e-12)
    assert (laws["linear"].b_low, laws["linear"].b_high) == pytest.approx(
        (expected.b_low, expected.b_high), rel=1e-12
    )
    assert laws["linear"].n == 7  # 9 runs at 4 sizes less the lower bound and the hollow one
    everything = [(r.floats, r.n90) for r in runs if r.mixer == "linear"]
    assert abs(fit_power_law(everything).b - expected.b) > 0.05  # the exclusion matters
    assert "softmax" not in laws and "retnet" not in laws  # lower bounds; two runs only

    fig = capacity_figure(runs, rows)
    ax = fig.axes[0]
    lines = {line.get_gid(): line for line in ax.lines if line.get_gid()}
    fit = lines["fit:linear"]
    low, high = expected.floats_range
    assert fit.get_xdata()[0] == pytest.approx(low) and fit.get_xdata()[-1] == pytest.approx(high)
    assert fit.get_ydata()[-1] == pytest.approx(expected(high))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"linear: b = {expected.shown()} (n=7)" in labels
    assert "softmax: no fit (n90 lower bounds only)" in labels
    assert "retnet: no fit (fewer than 3 fitted runs)" in labels
    assert labels.count("rank bound D x H (dashed)") == 1
    assert "hollow: training_limited (not fitted)" in labels
    # the training_limited run is drawn, hollow
    hollow = [
        line
        for line in ax.lines
        if line.get_gid() == "run:linear" and line.get_markerfacecolor() == "white"
    ]
    assert len(hollow) == 1 and hollow[0].get_ydata()[0] == 2.5


def test_lower_bounds_have_arrows_and_coinciding_points_are_set_apart() -> None:
    runs, rows = runs_of(law_records())
    ax = capacity_figure(runs, rows).axes[0]
    bars = {}
    for bar in ax.containers:  # errorbar: (the point, its caps, its bar)
        bars.setdefault(bar.lines[0].get_gid(), []).append(bar)
    softmax = bars["lower_bound:softmax"]
    assert len(softmax) == 2 and len(bars["lower_bound:linear"]) == 1
    carets = [[cap.get_marker() for cap in bar.lines[1]] for bar in ax.containers]
    assert all(CARETUPBASE in caps for caps in carets)  # each an upward arrow
    xs = [bar.lines[0].get_xdata()[0] for bar in softmax]
    assert xs[0] != xs[1]  # same state and n90: drawn side by side, not on one another
    assert all(abs(math.log2(x / floats_of("softmax", 64))) < 0.1 for x in xs)


def test_coinciding_rank_bounds_alternate_their_dashes() -> None:
    """deltanet and retnet hold the same H d^2 floats and bound H d; linear's state is only
    H d more: their dashed lines lie on one another and are drawn at shifted phases."""
    runs, rows = runs_of(law_records())
    ax = capacity_figure(runs, rows).axes[0]
    bounds = {line.get_gid(): line for line in ax.lines if "rank_bound" in str(line.get_gid())}
    phases = {gid: line.get_linestyle() for gid, line in bounds.items()}
    assert {"rank_bound:linear", "rank_bound:deltanet", "rank_bound:retnet"} <= set(bounds)
    sharing = ("rank_bound:linear", "rank_bound:deltanet", "rank_bound:retnet")
    patterns = [bounds[g]._unscaled_dash_pattern for g in sharing]
    assert len({offset for offset, _ in patterns}) == 3, phases  # three phases
    assert len({tuple(dashes) for _, dashes in patterns}) == 1  # of one pattern
    assert bounds["rank_bound:softmax"].get_ydata()[0] == 256  # the KV cache keeps T tokens


def test_no_figure_without_two_state_sizes() -> None:
    records = [
        curve_record(m, 64, s, law_value(m, 64, s))
        for m in ("linear", "deltanet")
        for s in (0, 1, 2)
    ]
    runs, rows = runs_of(records)
    assert capacity_figure(runs, rows) is None
    assert capacity_laws(runs) == {}


def test_the_report_writes_the_figure_the_b_column_and_the_law_line(tmp_path: Path, capsys) -> None:
    records = law_records()
    table = report(write_sweep(tmp_path / "sweep", records), wandb_mode="disabled")
    assert (tmp_path / "sweep" / "report" / "capacity_vs_state.png").exists()
    expected = fit_power_law(included(records, "linear"))
    by_model = {}
    for row in table:
        by_model.setdefault(row["model"], set()).add(row["b (90% CI)"])
    assert by_model["linear"] == {expected.shown()}  # one value on every row of the mixer
    assert by_model["softmax"] == {None}
    printed = capsys.readouterr().out
    assert f"capacity law: linear b = {expected.shown()} from 7 runs" in printed
    assert "capacity law: deltanet b = " in printed and "capacity law: softmax" not in printed


def test_the_report_leaves_the_figure_out_with_one_state_size(tmp_path: Path) -> None:
    records = [
        curve_record(m, 64, s, law_value(m, 64, s)) for m in ("linear", "deltanet") for s in (0, 1)
    ]
    table = report(write_sweep(tmp_path / "sweep", records), wandb_mode="disabled")
    assert not (tmp_path / "sweep" / "report" / "capacity_vs_state.png").exists()
    assert all("b (90% CI)" not in row for row in table)


def test_the_mixers_state_leaves_the_conv_window_out() -> None:
    from harness.report.capacity_law import mixer_floats

    recorded = {"state.mixer_floats_per_layer": 528, "state.floats_per_layer": 720}
    assert mixer_floats(recorded) == 528
    older = {"state.floats_per_layer": 720, "backbone.short_conv": 4, "backbone.d_model": 64}
    assert mixer_floats(older) == 720 - 3 * 64
    assert mixer_floats({"state.floats_per_layer": 720, "backbone.short_conv": 0}) == 720
    assert mixer_floats({"state.mixer_floats_per_layer": float("nan"), **older}) == 528
