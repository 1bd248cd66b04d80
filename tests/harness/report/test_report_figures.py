"""What the report's figures let a reader see: the reference where others lie on it, one
legend entry for equal baselines, one figure per question and panels only by swept
parameters, seeds as points, labels written once, the heatmap's size and floor, the budget."""

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from harness.report.figures import MARKED
from harness.report.look import HOLLOW, KNOWN_MODELS, caption_of, marker
from harness.report.slices import CELL_FONT
from tests.harness.report.drawn import figures_of
from tests.harness.synthetic import GAP_SWEPT, needle_grid, record, retrieval_gap, write_sweep

COPY_LENGTHS = range(4, 49)
"""`experiment=copy_length`: every string length from 4 to 48, 45 values in one run."""


def copy_length(folder: Path, seeds: int = 1) -> Path:
    """`experiment=copy_length`'s shape: softmax and Based flat and converged, DeltaNet and
    linear (in waves) falling with the string's length and not converged (the budget ran
    out), each run's accuracy at each of the 45 lengths (`test/acc_by/copy_len/<L>`)."""
    fall = {"softmax": (0.0, True), "based": (0.02, True), "deltanet": (0.07, False)}
    fall["linear"] = (0.45, False)
    records = []
    for model, (drop, converged) in fall.items():
        for seed in range(seeds):
            by_length = {
                f"test/acc_by/copy_len/{n}": 0.995
                - drop * (n - 4) / 44
                - (0.05 * math.sin(n / 3) if model == "linear" else 0.0)
                - 0.01 * seed
                for n in COPY_LENGTHS
            }
            acc = sum(by_length.values()) / len(by_length)
            r = record(
                model,
                task="copy",
                seq_len=128,
                seed=seed,
                acc=acc,
                metrics=by_length,
                converged=converged,
                task_params={"copy_len": 48, "min_copy_len": 4},
                baselines={"chance": 0.034, "in_context": 0.059},
            )
            r["config"]["trainer"]["max_steps"] = 2000
            records.append(r)
    return write_sweep(folder, records)


def by_gid(ax, kind: str) -> dict:
    return {
        line.get_gid().split(":", 1)[1]: line
        for line in ax.get_lines()
        if (line.get_gid() or "").startswith(f"{kind}:")
    }


def legend_texts(figure) -> list[str]:
    return [t.get_text() for t in figure.legends[0].get_texts()]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_softmax_is_a_black_line_under_the_others_which_keep_a_halo(tmp_path: Path) -> None:
    ax = figures_of(retrieval_gap(tmp_path / "sweep"))["acc_vs_num_kv_pairs"].axes[0]
    models = by_gid(ax, "model")
    softmax = models.pop("softmax")
    assert sorted(models) == ["based", "deltanet", "linear"]
    for line in models.values():
        assert softmax.get_linewidth() > line.get_linewidth()
        assert softmax.get_zorder() < line.get_zorder()  # under: both stay visible
        assert line.get_path_effects()  # a white halo sets it off from softmax's line
    assert softmax.get_color() == "black" and softmax.get_alpha() in (None, 1)


def test_equal_baselines_share_one_line_and_one_legend_entry(tmp_path: Path) -> None:
    figure = figures_of(retrieval_gap(tmp_path / "sweep"))["acc_vs_num_kv_pairs"]
    texts = legend_texts(figure)
    assert "baseline: in_context = elimination" in texts
    assert not any(t == "baseline: elimination" for t in texts)
    assert sorted(by_gid(figure.axes[0], "baseline")) == ["chance", "in_context"]


def test_a_preset_draws_the_figures_it_declares(tmp_path: Path) -> None:
    """conf/experiment/retrieval_gap.yaml: accuracy against the pairs, the length and batch
    under its ticks; accuracy against the state, a panel per number of pairs; a parameter the
    command swept beyond the declaration (the width) makes panels too."""
    figures = figures_of(retrieval_gap(tmp_path / "gap"))
    assert list(figures) == ["acc_vs_num_kv_pairs", "acc_vs_state"]
    ax = figures["acc_vs_num_kv_pairs"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "4\nseq_len=32\nbatch_size=128"
    titles = [ax.get_title() for ax in figures["acc_vs_state"].axes]
    assert titles == [f"assoc_recall · kv pairs={n}" for n in (4, 8, 16)]
    wider = retrieval_gap(tmp_path / "wider", swept=[*GAP_SWEPT, "backbone.d_model"], widths=2)
    figures = figures_of(wider)
    assert list(figures) == ["acc_vs_num_kv_pairs", "acc_vs_state"]
    titles = [ax.get_title() for ax in figures["acc_vs_num_kv_pairs"].axes]
    assert titles == ["assoc_recall · d_model=64", "assoc_recall · d_model=128"]


def test_the_default_rule_draws_each_swept_task_parameter_the_others_under_its_ticks(
    tmp_path: Path,
) -> None:
    """No preset: the pairs and the length, functions of each other, are each an x, the other
    written under its ticks."""
    figures = figures_of(retrieval_gap(tmp_path / "gap", experiment=None))
    assert list(figures) == ["acc_vs_seq_len", "acc_vs_num_kv_pairs", "acc_vs_state"]
    ax = figures["acc_vs_num_kv_pairs"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "4\nseq_len=32\nbatch_size=128"
    ax = figures["acc_vs_seq_len"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "32\nkv pairs=4\nbatch_size=128"


def test_one_panel_keeps_the_width_its_legend_goes_below(tmp_path: Path) -> None:
    figure = figures_of(retrieval_gap(tmp_path / "sweep"))["acc_vs_num_kv_pairs"]
    renderer = figure.canvas.get_renderer()
    panel = figure.axes[0].get_window_extent(renderer)
    legend = figure.legends[0].get_window_extent(renderer)
    assert legend.y1 <= panel.y0  # under the panel (and its tick notes), not beside it
    assert panel.width > 0.7 * figure.bbox.width


def extended(folder: Path) -> Path:
    """retrieval_gap's `extended/`: 32 and 64 pairs at 3,000 steps, then softmax at 64 pairs
    again with `trainer.max_steps=8000` in a command of its own."""
    records = []
    for model, accs in (("softmax", (0.99, 0.01)), ("linear", (0.87, 0.01))):
        for kv, acc in zip((32, 64), accs, strict=True):
            records.append(record(model, seq_len=8 * kv, acc=acc, task_params={"num_kv_pairs": kv}))
    records.append(record("softmax", seq_len=512, acc=0.4, task_params={"num_kv_pairs": 64}))
    records[-1]["config_hash"] += "-8000"
    for r in records:
        r["config"]["trainer"]["max_steps"] = 3000
    records[-1]["config"]["trainer"]["max_steps"] = 8000
    write_sweep(folder, records)
    (folder / "sweep.json").write_text(json.dumps({"swept": ["model", "task.num_kv_pairs"]}))
    return folder


def test_a_budget_raised_in_another_command_makes_no_panel(tmp_path: Path) -> None:
    figure = figures_of(extended(tmp_path / "sweep"))["acc_vs_num_kv_pairs"]
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == 1 and "max_steps" not in panels[0].get_title()
    models = by_gid(panels[0], "model")
    assert sorted(models) == ["linear", "softmax", "softmax max_steps=8000"]
    assert list(models["softmax"].get_xdata()) == [32, 64]
    assert list(models["softmax max_steps=8000"].get_xdata()) == [64]
    assert models["softmax max_steps=8000"].get_linestyle() == "--"
    assert "max_steps=8000" in [t.get_text() for t in panels[0].texts]
    assert "3000/8000 steps" in caption_of(figure)


def test_up_to_three_seeds_are_points_beyond_bars_said_in_the_legend(tmp_path: Path) -> None:
    figure = figures_of(retrieval_gap(tmp_path / "two", seeds=2))["acc_vs_num_kv_pairs"]
    ax = figure.axes[0]
    seeds = by_gid(ax, "seeds")["linear"]
    assert len(seeds.get_ydata()) == 3 * 2  # every pair count, each seed
    assert sorted(seeds.get_ydata())[:2] == pytest.approx([0.929, 0.949])
    assert not ax.collections  # no error bars
    assert "small points: seeds; line: their mean" in legend_texts(figure)
    figure = figures_of(retrieval_gap(tmp_path / "four", seeds=4))["acc_vs_num_kv_pairs"]
    assert "bars: ±1 std over 4 seeds" in legend_texts(figure)
    assert figure.axes[0].collections  # the bars
    assert not by_gid(figure.axes[0], "seeds")


def test_a_label_at_one_place_is_written_once(tmp_path: Path) -> None:
    """Two variants at the same state and accuracy with the same feature_dim: one label."""
    records = []
    for feature_map in ("elu", "taylor"):
        for D in (21, 73):
            r = record("linear", acc=0.5 + D / 200, seq_len=64)
            r["model_params"] = {"n_heads": 2, "feature_map": feature_map, "feature_dim": D}
            r["state"]["mixer_floats_per_layer"] = 2 * (D * 32 + D)
            r["config_hash"] += f"-{feature_map}-{D}"
            records.append(r)
    ax = figures_of(write_sweep(tmp_path / "sweep", records))["acc_vs_state"].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("feature_dim=73") == 1 and texts.count("feature_dim=21") == 1
    # the two variants coincide: the second is moved right a little, so both are seen
    drawn = by_gid(ax, "model")
    elu, taylor = drawn["linear elu"].get_xdata(), drawn["linear taylor"].get_xdata()
    assert all(1 < t / e < 1.1 for e, t in zip(elu, taylor, strict=True))


def test_points_on_the_reference_move_aside_so_that_its_line_shows(tmp_path: Path) -> None:
    ax = figures_of(retrieval_gap(tmp_path / "sweep"))["acc_vs_num_kv_pairs"].axes[0]
    drawn = by_gid(ax, "model")
    assert list(drawn["softmax"].get_xdata()) == [4, 8, 16]
    on_softmax = drawn["based"].get_xdata()  # at softmax's accuracy: a step right of it
    assert all(1 < b / s < 1.1 for s, b in zip([4, 8, 16], on_softmax, strict=True))


def test_needle_heatmap_numbers_are_readable_and_the_floor_is_on_its_scale(tmp_path) -> None:
    figure = figures_of(needle_grid(tmp_path / "sweep"))["needle_heatmap"]
    cells = [t for ax in figure.axes if ax.get_title() for t in ax.texts]
    assert cells and min(t.get_fontsize() for t in cells) >= CELL_FONT >= 8
    (bar,) = [ax for ax in figure.axes if ax.get_ylabel() == "accuracy"]
    floors = by_gid(bar, "floor")
    assert list(floors) == ["0.5"]  # the needle's in_context baseline; rff drew no cells
    assert "floor 0.50" in [t.get_text() for t in bar.texts]


def test_every_figure_states_its_budget(tmp_path: Path) -> None:
    figures = figures_of(retrieval_gap(tmp_path / "gap")) | figures_of(
        needle_grid(tmp_path / "needle")
    )
    for name, figure in figures.items():
        caption = caption_of(figure)  # under the figure; the title is the question alone
        assert "steps" in caption and "d_model 64" in caption and "lr " in caption, name
        assert (
            "\n" not in figure._suptitle.get_text() and "steps" not in figure._suptitle.get_text()
        )
    gap = figures_of(retrieval_gap(tmp_path / "gap2"))["acc_vs_state"]
    assert "1500 steps, lr best of [0.003, 0.01], d_model 64" in caption_of(gap)


def test_the_budget_names_the_layers_a_reader_cannot_see() -> None:
    from harness.report.budget import budget

    row = {"trainer.max_steps": 4000, "optim.lr": 0.003, "backbone.d_model": 64}
    assert budget([{**row, "backbone.n_layers": 2}]).endswith("d_model 64, 2 layers")
    assert budget([{**row, "backbone.n_layers": 1}]).endswith("d_model 64, 1 layer")
    mixed = [{**row, "backbone.n_layers": n} for n in (1, 2)]
    assert budget(mixed).endswith("d_model 64, 1/2 layers")
    assert budget([row]) == "4000 steps, lr 0.003, d_model 64"


def drawn_markers(line) -> list:
    """The x of each marker a line draws (all its points unless `markevery` picks some)."""
    every = line.get_markevery()
    xs = list(line.get_xdata())
    return xs if every is None else [xs[i] for i in every]


def test_a_line_of_45_points_shows_its_shape_and_what_hollow_means(tmp_path: Path) -> None:
    figure = figures_of(copy_length(tmp_path / "sweep"))["copy_vs_length"]
    ax = figure.axes[0]
    models = by_gid(ax, "model")
    hollow = {k: v for k, v in by_gid(ax, "not converged").items() if len(v.get_xdata())}
    for name, line in models.items():
        assert list(line.get_xdata()) == list(COPY_LENGTHS), name  # the line through every L
        assert line.get_linestyle() == "-" and line.get_linewidth() > 1, name
        marks = drawn_markers(line)
        assert len(marks) <= MARKED and (marks[0], marks[-1]) == (4, 48), name
        gaps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
        assert max(gaps) <= 2 * 44 / (MARKED - 1), name  # spread along the axis
    # the two runs that had not converged: hollow at their markers, and only there
    assert sorted(hollow) == ["deltanet", "linear"]
    for name, line in hollow.items():
        assert list(line.get_xdata()) == drawn_markers(models[name])
        assert line.get_markerfacecolor() == "white"
    (entry,) = [
        h
        for h in figure.legends[0].legend_handles
        if h.get_label().startswith("hollow: not converged")
    ]
    assert entry.get_markerfacecolor() == "white"


def test_a_sliced_line_of_two_seeds_draws_no_seed_points_it_does_not_have(tmp_path) -> None:
    """The record holds each seed's overall accuracy, not its accuracy at each length."""
    figure = figures_of(copy_length(tmp_path / "sweep", seeds=2))["copy_vs_length"]
    assert not by_gid(figure.axes[0], "seeds")
    assert not figure.axes[0].collections  # no bars either
    assert "small points: seeds; line: their mean" not in legend_texts(figure)
    linear = by_gid(figure.axes[0], "model")["linear"]
    assert linear.get_ydata()[-1] == pytest.approx(0.995 - 0.45 - 0.05 * math.sin(16) - 0.005)


def test_test_length_curve_of_a_run_that_had_not_converged_is_hollow(tmp_path: Path) -> None:
    lengths = [16 * k for k in range(2, 47)]
    records = []
    for model, converged in (("softmax", True), ("linear", False)):
        by_length = {f"test/acc_by/seq_len/{n}": 0.95 - n / 1000 for n in lengths}
        by_length["test/acc_by/seq_len/64"] = 0.9
        params = {"eval_seq_lens": lengths}
        records.append(
            record(model, acc=0.9, metrics=by_length, converged=converged, task_params=params)
        )
    figure = figures_of(write_sweep(tmp_path / "sweep", records))["acc_vs_test_length"]
    ax = figure.axes[0]
    models = by_gid(ax, "model")
    assert list(models["linear"].get_xdata()) == lengths
    assert models["softmax"].get_linewidth() > models["linear"].get_linewidth()  # the reference
    assert len(drawn_markers(models["linear"])) <= MARKED
    assert list(by_gid(ax, "not converged")["linear"].get_xdata()) == drawn_markers(
        models["linear"]
    )
    assert HOLLOW in legend_texts(figure)


def test_the_learning_rate_in_a_subtitle_says_whether_it_was_chosen() -> None:
    from harness.report.budget import learning_rates

    def row(model: str, lr: float, width: int = 4, seed: int = 0) -> dict:
        return {"model": model, "optim.lr": lr, "model.head_k_dim": width, "seed": seed}

    assert learning_rates([row("softmax", 0.002), row("linear", 0.002)]) == "lr 0.002"
    grid = [row("softmax", 0.003), row("softmax", 0.01), row("linear", 0.003)]
    assert learning_rates(grid) == "lr best of [0.003, 0.01]"
    own = [row("linear", 0.01), row("deltanet", 0.003), row("softmax", 0.003)]
    assert learning_rates(own) == "lr 0.003 (deltanet, softmax), 0.01 (linear)"
    # each width at its own rate, over seeds: no point had a choice
    per_cell = [row("deltanet", lr, w, s) for w, lr in ((2, 0.01), (4, 0.003)) for s in (0, 1)]
    assert learning_rates(per_cell) == "lr 0.003/0.01, one per cell"


def test_a_parameter_a_model_does_not_have_is_not_named() -> None:
    from harness.report.look import describe

    assert describe({"model.feature_dim": None, "task.num_kv_pairs": 8}) == "kv pairs=8"


def test_no_model_is_drawn_in_the_baselines_grey() -> None:
    from matplotlib.colors import to_rgb

    from harness.report.look import KNOWN_MODELS, colour

    for model in KNOWN_MODELS:
        red, green, blue = to_rgb(colour(model))
        assert model == "softmax" or max(red, green, blue) - min(red, green, blue) > 0.1, model


@pytest.mark.parametrize("model", [*KNOWN_MODELS, "gdn+swa", "deltanet+swa", "mamba2+swa"])
def test_every_model_has_a_marker_with_a_face_that_can_be_drawn_hollow(model: str) -> None:
    from matplotlib.lines import Line2D

    assert marker(model) in Line2D.filled_markers
