"""The report on preset-shaped sweeps built from synthetic records: what each figure draws
(lines per axes, tick labels, markers), what the table says, and that it never crashes."""

import csv
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.lines import Line2D

from harness.records.sweep import load_sweep
from harness.report.look import KNOWN_MODELS, MARKERS, colour, marker
from harness.report.sweep_report import report
from models import MIXERS
from tests.harness.report.drawn import figures_of
from tests.harness.synthetic import (
    FRONTIER_MODELS,
    NEEDLE_MODELS,
    eval_lengths,
    needle_grid,
    record,
    state_frontier,
    write_sweep,
)


def lines(ax, kind: str) -> dict[str, object]:
    """The axes' lines whose gid is `kind:<model or name>`, by that name."""
    return {
        line.get_gid().split(":", 1)[1]: line
        for line in ax.get_lines()
        if (line.get_gid() or "").startswith(f"{kind}:")
    }


def tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels() if t.get_text()]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_state_frontier_collision_one_line_per_model(tmp_path: Path) -> None:
    # softmax at d=64 and deltanet, retnet at d=128 all hold 8,192 floats
    figures = figures_of(state_frontier(tmp_path / "sweep"))
    assert set(figures) == {"acc_vs_state"}  # seq_len was not swept: no length plot
    (ax,) = figures["acc_vs_state"].get_axes()[:1]
    drawn = lines(ax, "model")
    assert sorted(drawn) == sorted(FRONTIER_MODELS)
    assert all(len(line.get_xdata()) == 3 for line in drawn.values())
    assert ax.get_xscale() == "log" and ax.get_xlabel() == (
        "state per layer (floats; softmax: its KV cache; conv windows apart)"
    )
    labels = tick_labels(ax)
    assert len(labels) >= 3 and all(float(label.replace(",", "")).is_integer() for label in labels)
    assert all(math.log2(float(label.replace(",", ""))).is_integer() for label in labels), labels
    legend = figures["acc_vs_state"].legends[0]
    shown = [t.get_text() for t in legend.get_texts()][: len(FRONTIER_MODELS)]
    assert shown == [m for m in KNOWN_MODELS if m in FRONTIER_MODELS]  # whatever the sweep's
    assert shown[0] == "softmax"


def test_the_report_knows_every_registered_mixer_softmax_first() -> None:
    assert sorted(KNOWN_MODELS) == MIXERS.names() and KNOWN_MODELS[0] == "softmax"
    assert len({str(colour(m)) for m in KNOWN_MODELS}) == len(KNOWN_MODELS)
    # every marker has a face (it can be drawn hollow), consecutive mixers differ in it, and
    # none is a triangle: the capacity figure's censored readouts are arrows with triangle heads
    assert set(MARKERS) <= set(Line2D.filled_markers) and len(set(MARKERS)) == len(MARKERS)
    assert len({marker(m) for m in KNOWN_MODELS[: len(MARKERS)]}) == len(MARKERS)
    assert not [m for m in KNOWN_MODELS if marker(m) in "^>v<"]
    hybrids = ["gdn+gdn", "gla+gla", "gla+softmax", "linear elu", "mamba2+swa"]
    assert not [name for name in hybrids if marker(name) in "^>v<"]
    variants = ["linear elu", "linear taylor", "linear favor", "deltanet+swa"]
    assert len({marker(name) for name in variants}) == len(variants)  # distinct in one figure


def test_a_mixer_registered_later_gets_a_colour_of_its_own(monkeypatch) -> None:
    """Colours come from the registry's order: an 18th mixer needs no table edited."""
    from harness.report import look

    later = (*look.KNOWN_MODELS, "zz_new_mixer")
    monkeypatch.setattr(look, "KNOWN_MODELS", later)
    assert len({str(look.colour(m)) for m in later}) == len(later)
    assert look.model_order("zz_new_mixer") == (len(later) - 1, "zz_new_mixer")


def test_needle_grid_with_a_diverged_model(tmp_path: Path) -> None:
    figures = figures_of(needle_grid(tmp_path / "sweep", diverged="rff"))
    assert {"acc_vs_seq_len", "acc_vs_state", "needle_heatmap"} <= set(figures)
    (ax,) = [a for a in figures["acc_vs_seq_len"].get_axes() if a.get_visible()]
    assert sorted(lines(ax, "model")) == sorted(NEEDLE_MODELS)  # rff: no line
    assert len(lines(ax, "model")["softmax"].get_xdata()) == 3
    crosses = [line for line in ax.get_lines() if line.get_gid() == "not ok:rff"]
    assert len(crosses) == 3
    notes = [t.get_text() for t in ax.texts]
    assert "diverged at step 640" in notes and "diverged at step 2560" in notes
    assert tick_labels(ax) == ["64", "128", "256"]
    assert ax.get_xlabel() == "sequence length (tokens)"
    assert {"chance", "in_context"} <= set(lines(ax, "baseline"))
    # the state plot: one panel per length (seq_len does not follow from the state for a
    # fixed-state model), each with one point per model
    panels = [a for a in figures["acc_vs_state"].get_axes() if a.get_visible()]
    assert [a.get_title() for a in panels] == [f"needle · seq_len={n}" for n in (64, 128, 256)]
    heatmap = [a for a in figures["needle_heatmap"].get_axes() if a.get_title()]
    drawn = (*NEEDLE_MODELS, "rff")  # the diverged model has a panel too
    assert [a.get_title() for a in heatmap] == [m for m in KNOWN_MODELS if m in drawn]
    rff = next(a for a in heatmap if a.get_title() == "rff")
    assert any("no ok job" in t.get_text() and "step 640" in t.get_text() for t in rff.texts)


def depth_slices(acc: float) -> dict[str, float]:
    """A needle record's accuracy `acc` in every depth bin."""
    return {f"test/acc_by/depth_bin/{b}": acc for b in range(11)}


def heatmap_panel(folder: Path, records: list[dict], model: str):
    """The needle heatmap's panel of `model` in the report of `records`."""
    figures = figures_of(write_sweep(folder, records))
    (ax,) = [a for a in figures["needle_heatmap"].get_axes() if a.get_title() == model]
    return ax


def test_needle_heatmap_says_which_lengths_had_not_converged(tmp_path: Path) -> None:
    """A dark column may be the budget, not the state: its tick says so."""
    records = [
        record("linear", task="needle", seq_len=n, metrics=depth_slices(acc), converged=done)
        for n, acc, done in ((32, 0.9, True), (128, 0.1, False))
    ]
    ax = heatmap_panel(tmp_path / "sweep", records, "linear")
    assert tick_labels(ax) == ["32", "128\nnot converged"]


def test_needle_heatmap_of_one_length_names_it(tmp_path: Path) -> None:
    """A sweep at one length (seq_len not varied) still labels its column with the length."""
    records = [
        record(m, task="needle", seq_len=128, metrics=depth_slices(0.9))
        for m in ("linear", "softmax")
    ]
    assert tick_labels(heatmap_panel(tmp_path / "sweep", records, "linear")) == ["128"]


def test_one_colour_per_model_in_every_figure(tmp_path: Path) -> None:
    figures = figures_of(needle_grid(tmp_path / "sweep"))
    colours: dict[str, set] = {}
    for name in ("acc_vs_seq_len", "acc_vs_state"):
        for ax in figures[name].get_axes():
            for model, line in lines(ax, "model").items():
                colours.setdefault(model, set()).add(str(line.get_color()))
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)


def test_eval_lengths_plot_and_table_columns(tmp_path: Path) -> None:
    sweep = eval_lengths(tmp_path / "sweep")
    figures = figures_of(sweep)
    ax = figures["acc_vs_test_length"].get_axes()[0]
    assert sorted(lines(ax, "model")) == ["linear", "softmax"]
    assert list(lines(ax, "model")["softmax"].get_xdata()) == [32, 64, 128, 256]
    trained = [line for line in ax.get_lines() if line.get_gid() == "train length"]
    assert len(trained) == 1 and list(trained[0].get_xdata()) == [64, 64]
    assert tick_labels(ax) == ["32", "64", "128", "256"]
    table = report(sweep, wandb_mode="disabled")
    assert [c for c in table[0] if c.startswith("acc@")] == [
        "acc@T=32",
        "acc@T=64",
        "acc@T=128",
        "acc@T=256",
    ]
    assert next(r for r in table if r["model"] == "linear")["acc@T=256"] == pytest.approx(0.05)


def test_report_writes_everything_with_failed_and_diverged_jobs(tmp_path: Path, capsys) -> None:
    sweep = needle_grid(tmp_path / "sweep")
    table = report(sweep, wandb_mode="disabled")
    out = sweep / "report"
    for name in ("table.csv", "report.html", "acc_vs_seq_len.png", "needle_heatmap.png"):
        assert (out / name).stat().st_size > 0
    rff = [r for r in table if r["model"] == "rff"]
    assert [r["task.seq_len"] for r in rff] == [64, 128, 256]  # numeric order, not text
    assert [r["status"] for r in rff] == ["diverged"] * 3
    assert rff[0]["note"] == "diverged at step 640"
    favor_64 = next(r for r in table if r["model"] == "favor" and r["task.seq_len"] == 64)
    assert favor_64["not_ok"] == 1 and "model.feature_dim=0" in favor_64["note"]
    with open(out / "table.csv") as handle:
        assert "converged" in next(csv.reader(handle))
    page = (out / "report.html").read_text()
    assert "Settings that define the experiment" in page and "backbone.d_model" in page
    assert "model.feature_dim=0 is invalid" in page  # the failed job's error
    printed = capsys.readouterr().out
    assert "diverged: task=needle model=rff task.seq_len=64" in printed


def test_report_of_only_failed_jobs_writes_table_and_page(tmp_path: Path) -> None:
    refused = "task.seq_len=8 is invalid: must be an integer >= 16"
    sweep = write_sweep(tmp_path / "sweep", [record("softmax", status="failed", error=refused)])
    table = report(sweep, wandb_mode="disabled")
    assert table[0]["status"] == "failed" and refused in table[0]["note"]
    assert (sweep / "report" / "report.html").exists()
    assert not list((sweep / "report").glob("*.png"))


def test_refused_runs_under_outputs_are_read_beside_ok_ones(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs" / "2025-01-01"
    for index, rec in enumerate(
        [
            record("favor", status="failed", error="model.feature_dim=0 is invalid"),
            record("softmax", seq_len=32),
            record("softmax", seq_len=64),
        ]
    ):
        (outputs / f"12-00-0{index}").mkdir(parents=True)
        (outputs / f"12-00-0{index}" / "results.json").write_text(json.dumps(rec))
    frame = load_sweep(outputs)
    assert sorted(frame["status"]) == ["failed", "ok", "ok"]
    figures = figures_of(outputs)
    ax = figures["acc_vs_seq_len"].get_axes()[0]
    assert sorted(lines(ax, "model")) == ["softmax"]


def test_retrieval_gap_pairs_swept_with_length_do_not_split_lines(tmp_path: Path) -> None:
    records = [
        record(m, seq_len=8 * kv, seed=s, task_params={"num_kv_pairs": kv}, acc=0.9 - 0.1 * s)
        for m in ("softmax", "linear")
        for kv in (4, 8)
        for s in (0, 1, 2)
    ]
    figures = figures_of(write_sweep(tmp_path / "sweep", records))
    ax = figures["acc_vs_num_kv_pairs"].get_axes()[0]
    drawn = lines(ax, "model")
    assert sorted(drawn) == ["linear", "softmax"]
    assert list(drawn["softmax"].get_ydata()) == pytest.approx([0.8, 0.8])  # mean of 3 seeds
    # every model has T=32 at 4 pairs: written once under the tick, not beside each point
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4\nseq_len=32", "8\nseq_len=64"]
    assert not any("seq_len" in t.get_text() for t in ax.texts)


def test_a_swept_task_parameter_gets_its_own_accuracy_figure(tmp_path: Path) -> None:
    records = [
        record(model, seq_len=128, task_params={"num_kv_pairs": n}, acc=acc)
        for model, acc in (("softmax", 0.99), ("linear", 0.5))
        for n in (8, 16, 32)
    ]
    figures = figures_of(write_sweep(tmp_path / "sweep", records))
    assert "acc_vs_num_kv_pairs" in figures and "acc_vs_seq_len" not in figures
    ax = figures["acc_vs_num_kv_pairs"].get_axes()[0]
    assert sorted(lines(ax, "model")) == ["linear", "softmax"]
    assert ax.get_xlabel() == "key-value pairs per example"
    assert tick_labels(ax) == ["8", "16", "32"]


def test_best_learning_rate_is_chosen_on_validation(tmp_path: Path) -> None:
    records = [
        record("linear", lr=0.001, acc=0.9, val_acc=0.5),
        record("linear", lr=0.01, acc=0.4, val_acc=0.6),
    ]
    table = report(write_sweep(tmp_path / "sweep", records), wandb_mode="disabled")
    assert table[0]["best_lr"] == 0.01 and table[0]["test_acc"] == 0.4


def test_not_converged_points_are_hollow_and_said_in_the_table(tmp_path: Path) -> None:
    records = [record("linear", seq_len=n, converged=n == 32) for n in (32, 64)]
    sweep = write_sweep(tmp_path / "sweep", records)
    ax = figures_of(sweep)["acc_vs_seq_len"].get_axes()[0]
    (hollow,) = [line for line in ax.get_lines() if line.get_gid() == "not converged:linear"]
    (filled,) = [line for line in ax.get_lines() if line.get_gid() == "model:linear"]
    assert list(hollow.get_xdata()) == [64]
    assert hollow.get_zorder() > filled.get_zorder()  # drawn over the filled marker
    table = report(sweep, wandb_mode="disabled")
    assert [r["converged"] for r in table] == ["yes", "no"]


def test_chance_is_computed_for_records_without_baselines(tmp_path: Path, monkeypatch) -> None:
    from harness.report.frame import task_chance
    from tasks.assoc_recall import AssocRecall

    task_chance.cache_clear()
    monkeypatch.setattr(AssocRecall, "baselines", lambda self, data: {"chance": 0.25}, False)
    records = [record("softmax", seq_len=n, baselines={}) for n in (32, 64)]
    ax = figures_of(write_sweep(tmp_path / "sweep", records))["acc_vs_seq_len"].get_axes()[0]
    (chance,) = lines(ax, "baseline").values()
    assert list(chance.get_ydata()) == [0.25, 0.25]
    task_chance.cache_clear()


def test_load_sweep_is_one_flat_row_per_job(tmp_path: Path) -> None:
    frame = load_sweep(needle_grid(tmp_path / "sweep"))
    assert len(frame) == 19
    assert {"task.seq_len", "model", "state.bytes_per_layer", "train.converged"} <= set(frame)
    assert {"test/acc", "test/acc_by/depth_bin/0", "test/baseline/chance"} <= set(frame)
    softmax = frame[(frame.model == "softmax") & (frame["task.seq_len"] == 64)]
    assert softmax["state.floats_per_layer"].item() == 2 * 64 * 64


def test_a_refused_value_opens_no_panel_and_is_listed(tmp_path: Path) -> None:
    refused = record("favor", seed=1, status="failed", error="model.feature_dim=0 is invalid")
    refused["model_params"]["feature_dim"] = 0
    records = [record("favor", seq_len=n) for n in (32, 64)] + [refused]
    for rec in records[:2]:
        rec["model_params"]["feature_dim"] = 64
    sweep = write_sweep(tmp_path / "sweep", records)
    figure = figures_of(sweep)["acc_vs_seq_len"]
    panels = [a for a in figure.get_axes() if a.get_visible()]
    assert [a.get_title() for a in panels] == ["assoc_recall · feature_dim=64"]
    assert any(
        "favor seq_len=64, feature_dim=0: failed: model.feature_dim=0" in t.get_text()
        for t in figure.texts
    )
    table = report(sweep, wandb_mode="disabled")
    (failed,) = [r for r in table if r["status"] == "failed"]
    assert failed["model.feature_dim"] == 0 and "is invalid" in failed["note"]


def test_a_refused_length_is_marked_on_the_length_axis(tmp_path: Path) -> None:
    error = "task.seq_len=8 is invalid: must be an integer >= 16"
    records = [
        record("softmax", seq_len=24),
        record("softmax", seq_len=8, status="failed", error=error),
    ]
    ax = figures_of(write_sweep(tmp_path / "sweep", records))["acc_vs_seq_len"].get_axes()[0]
    (cross,) = [line for line in ax.get_lines() if line.get_gid() == "not ok:softmax"]
    assert list(cross.get_xdata()) == [8]
    assert tick_labels(ax) == ["8", "24"]


@pytest.mark.parametrize("preset", [None, "state_frontier"])
def test_a_swept_feature_map_draws_one_line_per_variant_in_one_panel(
    tmp_path: Path, preset: str | None
) -> None:
    """state_frontier: `model.feature_map` x `model.feature_dim` of one model; the maps are
    compared at equal state, so each is a line ("linear elu") in one panel, not a panel: by
    the default rule, and as the preset declares it (`hue: [model.feature_map]`)."""
    records = []
    for feature_map, accs in (("elu", (0.6, 0.9)), ("taylor", (0.7, 0.95))):
        for D, acc in zip((7, 21), accs, strict=True):
            r = record("linear", acc=acc)
            r["model_params"] = {"n_heads": 2, "feature_map": feature_map, "feature_dim": D}
            r["state"]["mixer_floats_per_layer"] = 2 * (D * 32 + D)
            r["config_hash"] += f"-{feature_map}-{D}"
            records.append(r)
    sweep = write_sweep(tmp_path / "sweep", records)
    if preset:
        swept = ["model.feature_map", "model.feature_dim"]
        (sweep / "sweep.json").write_text(json.dumps({"experiment": preset, "swept": swept}))
    ax = figures_of(sweep)["acc_vs_state"].get_axes()
    assert len(ax) == 1
    drawn = lines(ax[0], "model")
    assert sorted(drawn) == ["linear elu", "linear taylor"]
    assert list(drawn["linear taylor"].get_ydata()) == pytest.approx([0.7, 0.95])
    assert drawn["linear elu"].get_color() != drawn["linear taylor"].get_color()
