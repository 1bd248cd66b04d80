"""The report's load-curve figure on hand-made points: a line per run, its readout in the
legend, baselines that coincide drawn once."""

import pandas as pd

from harness.readouts.capacity import accuracy_by_load, baselines_by_load
from harness.readouts.capacity import load_of as load_param
from harness.report.load_curve import load_figure, readout_label

LOADS = (2, 4, 8, 16, 32, 64)


def metrics(accs: dict[int, float]) -> dict[str, float]:
    out = {f"test/acc_by/num_kv_pairs/{n}": a for n, a in accs.items()}
    for n in accs:
        out[f"test/baseline_by/num_kv_pairs/{n}/in_context"] = 1 / n
        out[f"test/baseline_by/num_kv_pairs/{n}/elimination"] = 1 / n
        out[f"test/baseline_by/num_kv_pairs/{n}/chance"] = 1 / 128
    return out


def run(model: str, accs: dict[int, float], verdict: str, n90: float, seed: int = 0) -> dict:
    return {
        "status": "ok",
        "task": "assoc_recall",
        "model": model,
        "seed": seed,
        "capacity.n90": n90,
        "capacity.verdict": verdict,
        "capacity.censored": ["n90"] if n90 == 64 else [],
        **metrics(accs),
    }


def point(model: str, metrics: dict, params: dict | None = None, seeds: int = 1) -> pd.Series:
    """A row of the points' DataFrame (`harness.report.frame.points`)."""
    head = {"task": "assoc_recall", "model": model, "params": params or {}, "status": "ok"}
    return pd.Series({**head, "seeds": seeds, "lr": None, "capacity": [], **metrics})


def points(*rows: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(list(rows), dtype=object)


SOFTMAX = dict.fromkeys(LOADS, 0.99)
LINEAR = {2: 0.99, 4: 0.97, 8: 0.9, 16: 0.7, 32: 0.4, 64: 0.2}


def test_the_load_and_its_curves_are_read_from_the_metrics() -> None:
    m = metrics(LINEAR)
    assert load_param(m) == "num_kv_pairs"
    assert accuracy_by_load(m, "num_kv_pairs") == LINEAR
    assert baselines_by_load(m, "num_kv_pairs")["in_context"][8] == 1 / 8


def test_one_panel_a_line_per_model_with_its_readout() -> None:
    rows = [
        run("softmax", SOFTMAX, "not_limited", 64),
        run("linear", LINEAR, "capacity_limited", 8.0),
    ]
    fig = load_figure(
        points(point("softmax", metrics(SOFTMAX)), point("linear", metrics(LINEAR))), [], rows, 0.9
    )
    assert fig is not None and len([ax for ax in fig.axes if ax.get_visible()]) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "softmax: n90 >=64 (not_limited)" in labels
    assert "linear: n90 8 (capacity_limited)" in labels
    # in_context and elimination coincide at every load: one line, one legend entry
    assert "baseline: in_context = elimination" in labels
    gids = [line.get_gid() for line in fig.axes[0].lines]
    assert gids.count("baseline:in_context") == 1 and "baseline:elimination" not in gids
    # softmax, the reference, is the black line, a little wider than the others
    lines = {line.get_gid(): line for line in fig.axes[0].lines}
    assert lines["model:softmax"].get_color() == "black"
    assert lines["model:softmax"].get_linewidth() > lines["model:linear"].get_linewidth()


def test_seeds_of_different_verdicts_each_carry_their_own_in_seed_order() -> None:
    low = {n: a / 2 for n, a in LINEAR.items()}
    rows = [run("linear", LINEAR, "capacity_limited", 8.0, 1), run("linear", low, "x", 2.0, 0)]
    rows[1]["capacity.verdict"], rows[1]["capacity.n90_censoring"] = "training_limited", "left"
    assert readout_label(rows) == "n90 <2 (seed 0, training_limited), 8 (seed 1, capacity_limited)"
    assert readout_label(rows[:1]) == "n90 8 (capacity_limited)"
    assert readout_label([rows[0], {**rows[0], "seed": 2}]) == (
        "n90 8 (seed 1), 8 (seed 2): capacity_limited"
    )


def test_no_figure_without_load_curves() -> None:
    plain = point("softmax", {"test/acc": 0.9})
    assert load_figure(points(plain), [], [], 0.9) is None


def curve_record(model: str, accs: dict[int, float], seed: int) -> dict:
    from harness.readouts.capacity import readout_of
    from tests.harness.synthetic import record

    rec = record(model, seed=seed, metrics=metrics(accs))
    rec["task_params"]["num_kv_pairs"] = [4, 64]
    rec["capacity"] = readout_of(rec["metrics"], 0.9)
    return rec


def test_a_sweep_of_load_curves_reports_the_figure_and_the_readout(tmp_path) -> None:
    from harness.report.sweep_report import report
    from tests.harness.synthetic import write_sweep

    records = [curve_record("softmax", SOFTMAX, s) for s in (0, 1)]
    records += [curve_record("linear", {**LINEAR, 8: 0.9 + 0.02 * s}, s) for s in (0, 1)]
    table = report(write_sweep(tmp_path / "sweep", records), wandb_mode="disabled")
    assert (tmp_path / "sweep" / "report" / "acc_vs_load.png").exists()
    assert not (tmp_path / "sweep" / "report" / "acc_vs_state.png").exists()  # a mean over loads
    by_model = {row["model"]: row for row in table}
    assert by_model["softmax"]["verdict"] == "; ".join(["not_limited (holds_every_load)"] * 2)
    assert by_model["softmax"]["n90"] == ">=64; >=64"
    assert by_model["linear"]["verdict"].startswith("capacity_limited (falls_within")
    assert by_model["linear"]["n90"].count(";") == 1  # each seed's readout
    assert by_model["softmax"]["seeds"] == 2 and by_model["softmax"]["std"] == 0.0


def test_a_variants_seeds_are_its_own_runs() -> None:
    """`linear elu` and `linear taylor` (variants named by `model.feature_map`) each get the
    runs of their own feature map, not every run of `linear`."""
    from harness.report.load_curve import seeds_of

    rows = [
        {**run("linear", LINEAR, "capacity_limited", 9.0, seed), "model.feature_map": name}
        for name in ("elu", "taylor")
        for seed in (0, 1)
    ]
    for name in ("elu", "taylor"):
        variant = point(f"linear {name}", {}, {"model.feature_map": name})
        seeds = seeds_of(variant, rows, point_keys=[])
        assert [(r["model.feature_map"], r["seed"]) for r in seeds] == [(name, 0), (name, 1)]


def test_a_mixture_is_what_the_subtitle_says_was_trained() -> None:
    """A run trained on `task.mixture` says so, not the test range of its base task."""
    from harness.records.sweep import flat_row
    from harness.report.load_curve import load_curve_subtitle

    mixture = [
        {"seq_len": 64, "num_kv_pairs": 4, "share": 5},
        {"seq_len": 256, "num_kv_pairs": 64, "share": 1},
    ]
    record = {"task_params": {"num_kv_pairs": [4, 256]}, "config": {"task": {"mixture": mixture}}}
    row = flat_row(record)
    assert row["task.mixture"] == "(num_kv_pairs, seq_len) = (4, 64) x5, (64, 256) x1"
    assert load_curve_subtitle([row], "num_kv_pairs", 0.9).startswith(
        "trained on the mixture (num_kv_pairs, seq_len) = (4, 64) x5, (64, 256) x1,"
    )
    assert load_curve_subtitle(
        [flat_row({"task_params": {"num_kv_pairs": [4, 64]}})], "num_kv_pairs", 0.9
    ).startswith("trained on num_kv_pairs=[4, 64],")
    assert "a band of one std" not in load_curve_subtitle([row], "num_kv_pairs", 0.9)
    assert "a band of one std" in load_curve_subtitle([row], "num_kv_pairs", 0.9, band=True)


def test_beyond_three_seeds_a_band_shows_their_spread_and_unconverged_seeds_stay_marked():
    """Four seeds, one far below the others and not converged: the curve carries a band of one
    sample std around the mean (as wide as the seeds' spread), and that seed's hollow markers."""
    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from harness.report.load_curve import draw_curve

    seeds = [run("linear", {**LINEAR, 16: 0.7}, "capacity_limited", 9.0, s) for s in range(3)]
    low = run("linear", {n: a / 2 for n, a in LINEAR.items()}, "capacity_limited", 2.0, 3)
    seeds.append({**low, "capacity.training": "still_rising"})
    curves = [accuracy_by_load(s, "num_kv_pairs") for s in seeds]
    mean = {n: float(np.mean([c[n] for c in curves])) for n in LOADS}
    curve = point("linear", metrics(mean), seeds=4)
    ax = Figure().subplots()
    draw_curve(ax, curve, seeds, "num_kv_pairs", 0, [], {})
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    spread = np.std([c[2] for c in curves], ddof=1)
    assert ys.max() - ys.min() >= 2 * spread - 1e-9
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and len(hollow[0].get_xdata()) == len(LOADS)


def test_a_long_subtitle_is_wrapped_so_the_panel_keeps_the_width() -> None:
    mixture = "(num_kv_pairs, seq_len) = " + ", ".join(f"({k}, {4 * k}) x1" for k in LOADS)
    rows = [{**run("linear", LINEAR, "capacity_limited", 8.0), "task.mixture": mixture}]
    fig = load_figure(points(point("linear", metrics(LINEAR))), [], rows, 0.9)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert fig._suptitle.get_window_extent(renderer).width <= fig.bbox.width
    assert fig.axes[0].get_window_extent(renderer).width > 0.6 * fig.bbox.width
