"""The printed table fits 120 columns and the page's 1,280 px: the columns that fit, in the
page's order; every column stays in `table.csv`."""

import csv
import re
from pathlib import Path

import pytest

from harness.report.plain_table import fitting
from harness.report.sweep_report import CONSOLE_WIDTH, report
from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.report.test_report_page import CHROMIUM, PROBE, probed_in_chromium
from tests.harness.synthetic import write_sweep

WRAPPERS = (
    "width: window.innerWidth, wide: [...document.querySelectorAll('.wide')].map("
    "w => [w.scrollWidth, w.clientWidth]),"
)


def test_the_console_table_fits_and_table_csv_keeps_every_column(tmp_path: Path, capsys) -> None:
    records = [curve_record("linear", d, s, accuracies(d / 8)) for d in (32, 64) for s in (0, 1)]
    records += [curve_record("softmax", 64, s, accuracies(100.0), "still_rising") for s in (0, 1)]
    report(write_sweep(tmp_path / "sweep", records), tmp_path / "out", "disabled", dpi=30)
    printed = capsys.readouterr().out.splitlines()
    table = printed[: printed.index("(the columns that fit 120 characters; all are in table.csv)")]
    assert len(table) == 2 + 3 and all(len(line) <= CONSOLE_WIDTH for line in table)
    shown = table[0].split()
    with open(tmp_path / "out" / "table.csv") as handle:
        every = next(csv.reader(handle))
    assert shown[:2] == ["model", "backbone.d_model"] and "n90" in shown
    assert set(shown) < set(every) and "baseline.in_context" in every
    page = (tmp_path / "out" / "report.html").read_text()
    results = page.split("<h2>Results</h2>")[1].split("</table>")[0]
    assert 4 < len(re.findall("<th>", results)) < len(every)
    assert f"all {len(every)} are in <code>table.csv</code>" in page


def test_a_column_that_does_not_fit_is_left_out_and_the_next_tried() -> None:
    rows = [{"a": "x" * 10, "wide": "y" * 50, "b": 1.5}]
    assert fitting(rows, ["a", "wide", "b"], 45) == ["a", "b"]
    assert fitting(rows, ["a", "wide", "b"], 45, wraps=("wide",)) == ["a", "wide"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")
def test_the_results_table_fits_the_page_in_chromium(tmp_path: Path) -> None:
    records = [curve_record("linear", d, s, accuracies(d / 8)) for d in (32, 64) for s in (0, 1, 2)]
    report(write_sweep(tmp_path / "sweep", records), tmp_path / "out", "disabled", dpi=30)
    probe = PROBE.replace("width: window.innerWidth,", WRAPPERS)
    probed = tmp_path / "probed.html"
    page = (tmp_path / "out" / "report.html").read_text()
    probed.write_text(page.replace("</body>", probe + "</body>"))
    results = probed_in_chromium(probed, 1280)["wide"][0]  # the results table's wrapper
    assert results[0] <= results[1], results  # its width within the wrapper's: no scrolling
