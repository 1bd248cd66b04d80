"""A hybrid in the sweep's table and the report: named by its layers (`gdn+softmax`), its
layers as columns, its own colour, and on the load and capacity figures like any mixer."""

from pathlib import Path

import torch

from harness.records.record import model_label, state_record
from harness.records.sweep import flat_row, load_sweep, swept_values
from harness.report.look import colour
from harness.report.sweep_report import report
from models.backbone import LanguageModel
from models.stack import resolved_layers
from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.synthetic import write_sweep

GDN = {"name": "gated_deltanet", "head_k_dim": 4}
STACKS = {"gdn+softmax": [GDN, "softmax"], "gdn+gdn": [GDN, GDN], "softmax+gdn": ["softmax", GDN]}


def hybrid_record(layers: list, seed: int, n90: float) -> dict:
    """A load-curve record of a hybrid, its state and parameters as a real run writes them."""
    rec = curve_record("deltanet", 64, seed, accuracies(n90)) | {"model": "hybrid"}
    torch.manual_seed(0)
    model = LanguageModel(128, 64, "hybrid", {"layers": layers}, d_model=64, n_layers=2)
    rec["model_params"] = {"layers": resolved_layers(layers)}
    rec["state"] = state_record(model, 64)
    rec["config_hash"] = f"{model_label(rec)}-{seed}"
    return rec


def records() -> list[dict]:
    n90 = {"gdn+softmax": 1000.0, "gdn+gdn": 5.0, "softmax+gdn": 1000.0}
    return [
        hybrid_record(layers, seed, n90[label] * (1 + 0.1 * seed))
        for label, layers in STACKS.items()
        for seed in (0, 1)
    ] + [curve_record("softmax", 64, seed, accuracies(1000.0)) for seed in (0, 1)]


def test_a_hybrid_is_named_by_its_layers_and_gives_them_as_columns(tmp_path: Path) -> None:
    rec = hybrid_record([GDN, "softmax"], 0, 8.0)
    assert model_label(rec) == "gdn+softmax"
    assert model_label({"model": "hybrid", "model_params": {"layers": ["softmax", GDN]}}) == (
        "softmax+gdn"
    )  # a record written before the model was built
    row = flat_row(rec)
    assert row["model"] == "gdn+softmax" and "model.layers" not in row
    assert (row["layer.0"], row["layer.1"]) == ("gated_deltanet", "softmax")
    assert row["layer.0.rank_bound"] == 8 and row["layer.1.rank_bound"] == 64
    assert row["model.layers.0.head_k_dim"] == 4 and row["model.layers.1.n_heads"] == 2
    assert row["state.rank_bound_stack"] == 72 and row["state.rank_bound_per_layer"] == 36
    frame = load_sweep(write_sweep(tmp_path / "sweep", records()))
    assert set(frame["model"]) == {*STACKS, "softmax"}
    assert frame.loc[frame["model"] == "softmax", "layer.0"].isna().all()


def test_the_report_draws_each_hybrid_as_a_mixer_of_its_own_colour(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sweep", records())
    table = report(sweep, wandb_mode="disabled")
    assert {row["model"] for row in table} == {*STACKS, "softmax"}
    colours = {label: colour(label) for label in STACKS}
    assert len(set(map(str, colours.values()))) == 3 and colour("softmax") == "black"
    for figure in ("acc_vs_load.png", "capacity_vs_state.png"):
        assert (sweep / "report" / figure).exists(), figure
    page = (sweep / "report" / "report.html").read_text()
    assert all(label in page for label in STACKS)
    # each mixer at one state size: no law fitted, and the caption draws no line
    shown = page[page.index("<h2>capacity_vs_state</h2>") :]
    shown = shown[shown.index("<p class='caption'>") : shown.index("</p>")]
    assert "No line is drawn: the legend gives each mixer" in shown
    assert "A line is the power law" not in shown and "{fit}" not in shown


def test_a_swept_layer_list_is_shown_as_written_in_one_short_text() -> None:
    rec = hybrid_record([GDN, "softmax"], 0, 8.0)
    rec["config"]["model"] = {"name": "hybrid", "layers": [GDN, "softmax"]}
    assert swept_values(rec, ["model.layers", "seed"]) == {
        "model.layers": "gdn(head_k_dim=4)+softmax",
        "seed": 0,
    }
