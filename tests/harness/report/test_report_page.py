"""The report page leads with results: the verdicts, the figures with their captions, the
table, then provenance and the settings (experiment, then plumbing, collapsed); the table's
state in floats, std blank for one seed, full precision in `table.csv`; and, where Chromium is
installed, the page as a browser shows it: every figure loads, nothing overflows."""

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.report.page import CAPTIONS, FIT, STYLE, caption, page_columns, table
from harness.report.sweep_report import report
from tests.harness.synthetic import record, retrieval_gap, write_sweep


@pytest.fixture(scope="module")
def gap(tmp_path_factory) -> Path:
    """A retrieval_gap-shaped sweep's report folder."""
    sweep = retrieval_gap(tmp_path_factory.mktemp("gap") / "sweep")
    report(sweep, wandb_mode="disabled")
    return sweep / "report"


def test_the_page_leads_with_the_verdict_then_figures_table_provenance_settings(gap) -> None:
    page = (gap / "report.html").read_text()
    order = ["<h2>Verdict</h2>", "<img", "<h2>Results</h2>", "<h2>Provenance</h2>",
             "<h2>Settings</h2>"]  # fmt: skip
    positions = [page.index(marker) for marker in order]
    assert positions == sorted(positions)
    verdict = page[positions[0] : positions[1]]
    assert "18 of 24 finished runs converged." in verdict  # 3 points x 2 rates are not
    assert (
        "At the binding-free floor (no retrieval learned): deltanet seq_len=128, kv pairs=16"
        in verdict
    )
    assert (
        "Still improving when the budget ran out: " in verdict
        and "deltanet seq_len=64, kv pairs=8" in verdict
    )
    assert "trainer.max_steps" in verdict and "At chance" not in verdict


def test_at_chance_between_chance_and_the_floor_and_at_the_floor_differ(tmp_path) -> None:
    floors = {"chance": 1 / 128, "in_context": 0.125}
    records = [record("linear", acc=0.008, baselines=floors, converged=False)]
    records += [record("softmax", acc=0.12, baselines=floors, converged=False)]
    records += [record("deltanet", acc=0.06, baselines=floors, converged=False)]
    report(write_sweep(tmp_path / "sweep", records), wandb_mode="disabled")
    page = (tmp_path / "sweep" / "report" / "report.html").read_text()
    assert "At chance (not even the answer tokens learned): linear." in page
    assert "At the binding-free floor (no retrieval learned): softmax." in page
    assert "(learning which tokens answer): deltanet." in page


def test_every_figure_has_its_caption_under_it(gap) -> None:
    page = (gap / "report.html").read_text()
    figures = re.findall(r"<h2>(acc_vs_\w+|needle_heatmap|copy_vs_length)</h2>", page)
    assert figures == ["acc_vs_num_kv_pairs", "acc_vs_state"]
    for name in figures:
        assert CAPTIONS[name] and CAPTIONS[name][:60] in page


def test_the_capacity_caption_names_a_fitted_line_only_where_one_is_drawn() -> None:
    fitted = caption("capacity_vs_state", 0.8, fitted=True)
    assert "A line is the power law n80 = a * floats^b fitted by censored" in fitted
    assert "most key-value pairs recalled at 0.8" in fitted and "{" not in fitted
    bare = caption("capacity_vs_state", 0.8, fitted=False)
    assert FIT[False].strip() in bare and "A line is" not in bare and "fitted by" not in bare
    assert "its KV cache, the T tokens it keeps (every layer caches the same T" in bare
    assert caption("acc_vs_load", 0.8, fitted=False) == CAPTIONS["acc_vs_load"].format(
        level="n80", threshold=0.8
    )


def test_settings_are_split_into_the_experiment_and_the_plumbing_collapsed(gap) -> None:
    page = (gap / "report.html").read_text()
    settings = page[page.index("<h2>Settings</h2>") :]
    experiment, plumbing = settings.split("<summary>Plumbing")
    assert settings.count("<details>") == 2 and "<details open" not in settings
    assert "backbone.d_model" in experiment and "optim.weight_decay" in experiment
    for key in ("use_distributed_sampler", "num_sanity_val_steps", "log_every_n_steps"):
        assert key in plumbing and key not in experiment


def test_provenance_names_command_commit_versions_machine_and_wall_time(gap) -> None:
    page = (gap / "report.html").read_text()
    block = page[page.index("<h2>Provenance</h2>") : page.index("<h2>Settings</h2>")]
    assert "python run.py -m experiment=retrieval_gap logger=none" in block
    for what in ("commit", "versions", "machine", "wall time", "started"):
        assert f"<th>{what}</th>" in block
    assert re.search(r"[0-9a-f]{40}|not a git checkout", block)
    assert "Python 3." in block and "torch " in block and "Lightning " in block
    assert "cores, GPU: " in block
    assert "288 s (4.8 min) of training summed over 24 jobs" in block  # 24 x 12 s


def test_table_state_in_floats_std_blank_for_one_seed_full_precision_in_csv(tmp_path) -> None:
    records = [record("linear", acc=0.00975), record("softmax", acc=0.5, seed=0),
               record("softmax", acc=0.6, seed=1)]  # fmt: skip
    sweep = write_sweep(tmp_path / "sweep", records)
    table = {r["model"]: r for r in report(sweep, wandb_mode="disabled")}
    assert table["linear"]["state_floats_per_layer"] == 2 * (32 * 32 + 32)
    assert table["linear"]["std"] is None and table["softmax"]["std"] == pytest.approx(0.0707, 1e-3)
    with open(sweep / "report" / "table.csv") as handle:
        rows = {r["model"]: r for r in csv.DictReader(handle)}
    assert rows["linear"]["test_acc"] == "0.00975" and rows["linear"]["std"] == ""
    assert rows["linear"]["state_floats_per_layer"] == "2112"
    assert rows["softmax"]["test_acc"] == "0.55"


def test_the_table_leads_with_what_matters_and_ends_with_its_context() -> None:
    row = {"task": "assoc_recall", "model": "linear", "model.feature_dim": 8, "test_acc": 0.9}
    row |= {"baseline.chance": 0.02, "n90": 5.0, "verdict": "capacity_limited"}
    row |= {"status": "ok", "note": "a long note"}
    assert page_columns([row]) == [
        "model",
        "model.feature_dim",
        "status",
        "verdict",
        "n90",
        "test_acc",
        "baseline.chance",
        "note",
        "task",
    ]
    assert "<td class='note'>a long note</td>" in table([row])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = """<script>
window.addEventListener('load', () => {
  const images = [...document.images];
  const result = document.createElement('pre');
  result.id = 'probe';
  result.textContent = JSON.stringify({
    images: images.length,
    loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    scrollWidth: document.documentElement.scrollWidth,
    width: window.innerWidth,
  });
  document.body.appendChild(result);
});
</script>"""


def probed_in_chromium(page: Path, width: int) -> dict:
    """`PROBE`'s result for `page` in headless Chromium `width` pixels wide."""
    import json

    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", done.stdout)
    assert found, done.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")
def test_the_page_in_headless_chromium_loads_every_figure_and_does_not_overflow(
    gap, tmp_path
) -> None:
    probed = tmp_path / "probed.html"
    probed.write_text((gap / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    for width in (1280, 900):
        probe = probed_in_chromium(probed, width)
        assert probe["images"] == probe["loaded"] >= 2, probe  # figures, then the curves
        assert probe["scrollWidth"] <= probe["width"], probe


def wide_rows() -> list[dict]:
    """A table far wider than a screen: 40 columns of long values."""
    return [{f"baseline.column_{i}": f"{'long value ' * 3}{i}" for i in range(40)}]


def test_the_table_sits_in_a_wrapper_that_scrolls_sideways() -> None:
    assert table(wide_rows()).startswith("<div class='wide'><table>")
    assert table(wide_rows()).endswith("</table></div>")
    assert re.search(r"\.wide \{[^}]*overflow-x: auto", STYLE)


WRAPPER_PROBE = PROBE.replace(
    "width: window.innerWidth,",
    "width: window.innerWidth, wide: [...document.querySelectorAll('.wide')].map("
    "w => [w.scrollWidth, w.clientWidth, getComputedStyle(w).overflowX]),",
)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")
def test_a_wide_table_scrolls_in_its_wrapper_instead_of_being_cut(tmp_path) -> None:
    page = tmp_path / "wide.html"
    page.write_text(f"<html><head>{STYLE}</head><body>{table(wide_rows())}{WRAPPER_PROBE}</body>")
    probe = probed_in_chromium(page, 1280)
    assert probe["scrollWidth"] <= probe["width"], probe  # the page itself is not widened
    ((scroll, client, overflow),) = probe["wide"]
    assert overflow == "auto" and scroll > client, probe  # the table scrolls, all of it there
