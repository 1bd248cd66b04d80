"""The state grid study (`studies.state_grid`) on committed capacity-law records of linear
attention, each run given two value dims with the same readout: every run lands in its cell as
read, the probe's n90 sits beside the cells it has, and the value exponent comes out near 0."""

import csv
import json
from pathlib import Path

import pytest

from studies.state_grid import main

RECORDS = Path("docs/results/capacity_law/protocol/both_rates/records/summary.jsonl")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    rows = [json.loads(line) for line in RECORDS.read_text().splitlines()]
    linear = [r for r in rows if r["model"] == "linear" and r["config"]["optim"]["lr"] == 0.01]
    lines = []
    for value_dim in (8, 32):
        for row in linear:
            copy = json.loads(json.dumps(row))
            copy["model_params"]["head_v_dim"] = value_dim
            copy["config"]["model"]["head_v_dim"] = value_dim
            copy["config_hash"] += f"v{value_dim}"
            lines.append(json.dumps(copy))
    (tmp_path / "summary.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_the_grid_reads_every_run_and_sets_the_probe_beside_it(sweep: Path, capsys) -> None:
    laws = main([str(sweep), "--out", str(sweep / "out")])
    with (sweep / "out/cells.csv").open() as handle:
        cells = list(csv.DictReader(handle))
    assert len(cells) == 4 * 2  # feature dims 2, 3, 4, 6 x value dims 8, 32
    first = cells[0]
    assert (first["family"], first["D"], first["d_v"]) == ("linear", "2", "8")
    assert first["n90 by seed"] == "< 2, < 2, < 2"
    assert first["probe random"] == "1"  # the sum rule at D = 2, d_v = 8 (memory_probe.json)
    assert [c["probe random"] for c in cells if c["D"] == "3"] == ["", ""]  # not probed
    ratios = {(c["D"], c["d_v"]): c.get("middle seed / probe random") for c in cells}
    assert ratios[("4", "8")] == "2.2x"  # 2.19 (seeds 2.16, 2.19, 2.42) over the probe's 1
    assert ratios[("2", "8")] == "<2x"  # every seed below the judging load 2
    assert {c["n90 by seed"] for c in cells if c["D"] == "6"} == {"4.16, 3.73, 3.49"}
    runs = (sweep / "out/runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 24
    both = laws["linear"].both
    assert both is not None and abs(both.b) < 0.05  # the same readouts at both value dims
    assert both.b_low < 0 < both.b_high
    assert laws["linear"].chosen in ("rank", "floats", "both")
    assert (sweep / "out/state_grid.png").stat().st_size > 10_000
    tables = (sweep / "out/tables.md").read_text()
    assert "| linear | 6 | 32 | 12 |" in tables and "| family | chosen (AIC) |" in tables
    assert "chosen (AIC)" in capsys.readouterr().out


def test_several_rates_in_one_family_are_refused(sweep: Path) -> None:
    rows = [json.loads(line) for line in (sweep / "summary.jsonl").read_text().splitlines()]
    rows[0]["config"]["optim"]["lr"] = 0.003
    (sweep / "summary.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    with pytest.raises(SystemExit, match="several learning rates"):
        main([str(sweep)])


def test_value_dims_keeps_only_those(sweep: Path) -> None:
    main([str(sweep), "--out", str(sweep / "v8"), "--value-dims", "8"])
    with (sweep / "v8/cells.csv").open() as handle:
        assert {row["d_v"] for row in csv.DictReader(handle)} == {"8"}
