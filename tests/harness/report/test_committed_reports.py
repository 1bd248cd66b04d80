"""A committed report redraws from its committed records with the same numbers: the headline
capacity law (docs/results/capacity_law/budget_4000), its table, its laws and its console
text byte for byte."""

from pathlib import Path

import pytest

from harness.report.sweep_report import report

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


@pytest.mark.parametrize("folder", ["capacity_law/budget_4000"])
def test_a_committed_report_redraws_with_its_numbers(folder: str, tmp_path: Path, capsys) -> None:
    committed = RESULTS / folder
    report(committed / "records", tmp_path, wandb_mode="disabled")
    for name in ("table.csv", "laws.csv"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    kept = (committed / "report.txt").read_text().splitlines()
    kept = [line for line in kept if line.strip() and not line.startswith("written to")]
    assert printed[:-1] == kept and printed[-1].startswith("written to")
    assert {"acc_vs_load.png", "capacity_vs_state.png"} <= {p.name for p in tmp_path.iterdir()}
