"""The report's load-curve figure on hand-made points: a line per run, its readout in the
legend, baselines that coincide drawn once."""

from harness.capacity import accuracy_by_load, baselines_by_load
from harness.capacity import load_of as load_param
from harness.report.load_curve import load_figure
from harness.report.points import Point

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


def point(model: str, accs: dict[int, float]) -> Point:
    return Point("assoc_recall", model, {}, status="ok", seeds=1, metrics=metrics(accs))


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
    fig = load_figure([point("softmax", SOFTMAX), point("linear", LINEAR)], [], rows)
    assert fig is not None and len([ax for ax in fig.axes if ax.get_visible()]) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "softmax: n90 >=64 (not_limited)" in labels
    assert "linear: n90 8 (capacity_limited)" in labels
    # in_context and elimination coincide at every load: one line, one legend entry
    assert "baseline: in_context = elimination" in labels
    gids = [line.get_gid() for line in fig.axes[0].lines]
    assert gids.count("baseline:in_context") == 1 and "baseline:elimination" not in gids


def test_no_figure_without_load_curves() -> None:
    plain = Point("assoc_recall", "softmax", {}, status="ok", metrics={"test/acc": 0.9})
    assert load_figure([plain], [], []) is None
