"""Verdicts between mixers at equal state (`harness.report.pairs`) and the committed laws as
references (`harness.report.references`), on synthetic load-curve records: linear attention
and DeltaNet at d_model 32, 48, 64, 128 (floats within 6% of each other, equal R)."""

from pathlib import Path

import pandas as pd
import pytest

from harness.report import look, references
from harness.report.pairs import COLUMNS, NO_DIFFERENCE, UNDECIDED
from harness.report.sweep_report import report
from tests.harness.report.load_curves import LOADS, accuracies, curve_record
from tests.harness.synthetic import write_sweep

FLOOR = {n: 1 / n + 0.005 for n in LOADS}
N90 = {  # (linear, deltanet) at each d_model; None: every restart at the floor
    32: (2.5, 8.0),  # deltanet holds more
    48: (5.0, 5.1),  # no difference within the readouts' errors
    64: (10.0, 3.0),  # linear holds more
    128: (6.0, None),  # undecided: deltanet not learned
}


def records(models: tuple[str, ...] = ("linear", "deltanet"), protocol: bool = False) -> list:
    out = []
    for d_model, values in N90.items():
        for model, n90 in zip(("linear", "deltanet"), values, strict=True):
            for seed in (0, 1):
                if n90 is None:
                    rec = curve_record(model, d_model, seed, FLOOR, "at_floor")
                else:
                    rec = curve_record(model, d_model, seed, accuracies(n90))
                rec["config"]["capacity"]["protocol"] = protocol
                out += [rec] if model in models else []
    return out


def test_each_pair_at_equal_state_gets_its_verdict(tmp_path: Path, capsys) -> None:
    sweep = write_sweep(tmp_path / "sweep", records())
    report(sweep, wandb_mode="disabled")
    pairs = pd.read_csv(sweep / "report" / "pairs.csv", keep_default_na=False)
    assert list(pairs.columns) == list(COLUMNS)
    by_state = {row.state: (row.verdict, row.why) for row in pairs.itertuples()}
    assert set(pairs["model_a"]) == {"deltanet"} and set(pairs["model_b"]) == {"linear"}
    assert set(pairs["source"]) == {"own"}
    assert by_state["R 64; 512 and 544 floats"][0] == "deltanet holds more"
    assert by_state["R 96; 1152 and 1200 floats"][0] == NO_DIFFERENCE
    assert by_state["R 128; 2048 and 2112 floats"][0] == "linear holds more"
    verdict, why = by_state["R 256; 8192 and 8320 floats"]
    assert verdict == UNDECIDED
    assert "deltanet not learned (0 of 2 restarts" in why and "trainer.max_steps=1600" in why
    printed = capsys.readouterr().out.splitlines()
    closing = printed[-5:-1]  # the last line says what was written
    assert all(line.startswith("At equal state (R ") for line in closing)
    assert "deltanet against linear: deltanet holds more: n90 8 (" in closing[0]
    page = (sweep / "report" / "report.html").read_text()
    assert "deltanet against linear: linear holds more" in page


def test_a_state_that_grows_with_t_is_never_paired(tmp_path: Path) -> None:
    """A KV cache has no fixed size to be equal to: DeltaNet's cells marked as growing with T
    (as softmax's and a softmax hybrid's are) pair with nothing."""
    marked = records()
    for rec in marked:
        if rec["model"] == "deltanet":
            rec["state"]["grows_with_seq_len"] = True
    sweep = write_sweep(tmp_path / "sweep", marked)
    report(sweep, wandb_mode="disabled")
    assert not (sweep / "report" / "pairs.csv").exists()


@pytest.fixture
def committed(tmp_path: Path, monkeypatch) -> Path:
    """A docs/results/ of one reference folder, `law/records`, holding both mixers' runs."""
    results = tmp_path / "results"
    write_sweep(results / "law" / "records", records(protocol=True))
    (results / "references.txt").write_text("# the references\nlaw\n")
    monkeypatch.setattr(references, "RESULTS", results)
    monkeypatch.setattr(references, "LISTED", results / "references.txt")
    return results


def test_a_one_mixer_sweep_is_read_beside_the_references(
    committed: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    drawn, save = {}, look.save

    def kept(figure, path: Path, *args):
        drawn[path.name] = figure
        return save(figure, path, *args)

    monkeypatch.setattr(look, "save", kept)
    own = [r for r in records(("deltanet",), protocol=True) if r["seed"] == 0]  # the reference's
    own[0]["seed"] = own[0]["config"]["seed"] = 2  # one restart of its own
    own[0]["config_hash"] += "-own"
    sweep = write_sweep(tmp_path / "sweep", own)
    report(sweep, wandb_mode="disabled")
    pairs = pd.read_csv(sweep / "report" / "pairs.csv", keep_default_na=False)
    assert len(pairs) == 4 and set(pairs["source"]) == {"reference"}
    assert set(pairs["model_a"]) == {"deltanet"}  # not paired with the reference's deltanet
    assert set(pairs["model_b"]) == {"linear (reference: law, 800 steps)"}
    assert "deltanet holds more" in set(pairs["verdict"])
    laws = pd.read_csv(sweep / "report" / "laws.csv")
    sources = dict(zip(laws["model"], laws["source"], strict=False))
    assert sources["linear (reference: law, 800 steps)"] == "reference"
    assert sources["deltanet"] == "own"
    assert sources["deltanet (reference: law, 800 steps)"] == "reference"  # other seeds
    assert "law (800 steps; docs/results/references.txt): 13 runs of deltanet, linear" in (
        capsys.readouterr().out
    )  # 16 less the 3 that are the sweep's own by config hash
    figure = drawn["capacity_vs_state"]
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert any(label.startswith("linear (reference: law, 800 steps)") for label in labels)
    gids = [c.lines[0].get_gid() for c in figure.axes[0].containers]
    ours, theirs = gids.count("run:deltanet"), gids.count("run:linear (reference: law, 800 steps)")
    assert ours == 3 and theirs == 8
    linear = look.colour("linear")
    assert look.colour("linear (reference: law, 800 steps)") > linear  # toward white
    report(sweep, tmp_path / "n80", wandb_mode="disabled", threshold=0.8)  # read anew at 0.8
    at80 = pd.read_csv(tmp_path / "n80" / "pairs.csv", keep_default_na=False)
    by_state = dict(zip(at80["state"], at80["capacity_b"], strict=True))
    assert by_state["R 64; 512 and 544 floats"].startswith("5 (")  # 2.5 at 0.9, one slope on
    assert all(why.startswith("n80 ") for why in at80["why"])


def test_no_references_with_the_switch_off(committed: Path, tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sweep", records(("deltanet",), protocol=True))
    report(sweep, wandb_mode="disabled", references=False)
    assert not (sweep / "report" / "pairs.csv").exists()
    laws = pd.read_csv(sweep / "report" / "laws.csv")
    assert set(laws["source"]) == {"own"} and set(laws["model"]) == {"deltanet"}


def test_a_sweep_under_another_budget_is_told_no_reference_matches(
    committed: Path, tmp_path: Path, capsys
) -> None:
    own = records(("deltanet",), protocol=True)
    for rec in own:
        rec["config"]["trainer"]["max_steps"] = 1500
        rec["config_hash"] += "-1500"
    report(write_sweep(tmp_path / "sweep", own), wandb_mode="disabled")
    printed = capsys.readouterr().out
    assert "No committed reference (docs/results/references.txt) shares this sweep's" in printed
    assert "(reference:" not in printed
