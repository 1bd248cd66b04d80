"""The report's capacity-against-state figure (`capacity_vs_state.png`) and the capacity law in
its table and notes, on synthetic load-curve records whose stored readouts are stale: the
report reads every curve anew, fits every run that is not training_limited (censored ones
included), and draws each kind of readout as what it is."""

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from harness.readouts.cell_law import observations
from harness.readouts.censored_law import fit_censored_law
from harness.readouts.restarts import CAPACITY, TYPICAL, restarts
from harness.records.sweep import flat_row
from harness.report.capacity_figure import capacity_figure, law_label, no_fit_note
from harness.report.capacity_law import CELL, cells_and_laws, restart_frame
from harness.report.capacity_runs import design_runs
from harness.report.frame import clean_rows, points
from harness.report.look import caption_of
from harness.report.reread import reread
from harness.report.sweep_report import report
from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.synthetic import state_floats, write_sweep

KEYS = ["backbone.d_model"]


def law_n90(d_model: int, seed: int) -> float:
    """n90 = 0.0244 floats^0.81 with a seed's scatter: below 2 pairs at d_model 16, read
    between tested loads at 32 and 64, every load held at 128."""
    if d_model == 128:
        return 100.0
    return 0.0244 * state_floats("linear", d_model, 64) ** 0.81 * math.exp(0.1 * (seed - 1))


def law_records() -> list[dict]:
    """linear at four widths, three seeds; one seed still rising (a lower bound), one flat at
    the floor (training_limited, left out); softmax holding every load."""
    records = [
        curve_record("linear", d, s, accuracies(law_n90(d, s)))
        for d in (16, 32, 64, 128)
        for s in (0, 1, 2)
        if (d, s) not in ((64, 2), (32, 2))
    ]
    records.append(curve_record("linear", 32, 2, accuracies(law_n90(32, 2)), "still_rising"))
    floor = {n: 1 / n + 0.005 for n in accuracies(1.0)}
    records.append(curve_record("linear", 64, 2, floor, "at_floor"))
    records += [curve_record("softmax", 64, s, accuracies(1000.0)) for s in (0, 1)]
    return records


def read(records: list[dict], threshold: float = 0.9):
    """(runs drawn, rows, the capacity laws by mixer, every law, the restarts, the cells)."""
    rows = reread(clean_rows(pd.DataFrame([flat_row(r) for r in records])), threshold)
    table = points(rows, KEYS)
    table["name"] = table["model"]
    cells, laws = cells_and_laws(rows, table, KEYS)
    frame = restart_frame(rows, table, KEYS)
    capacity = {m: law for (m, e), law in laws.items() if e == CAPACITY}
    return design_runs(frame, cells), rows, capacity, laws, restarts(frame, "mixer"), cells


def runs_of(records: list[dict], threshold: float = 0.9):
    runs, rows, capacity, *_ = read(records, threshold)
    return runs, rows, capacity


def test_the_fit_keeps_censored_runs_and_leaves_out_training_limited_ones() -> None:
    runs, _, capacity, laws, frame, cells = read(law_records())
    linear = [r for r in runs if r.mixer == "linear"]
    kinds = sorted(str(r.n90_censoring) for r in linear if r.fitted)
    assert kinds.count("left") == 3 and kinds.count("right") == 4 and kinds.count("None") == 4
    assert sum(not r.fitted for r in linear) == 1  # the run at the floor
    assert sum(r.best for r in linear) == 4  # one best restart a width
    typical = laws[("linear", TYPICAL)]
    keys = ["mixer", CELL]
    mine = cells[cells["mixer"] == "linear"]
    expected = fit_censored_law(observations(frame, mine, TYPICAL, keys, "rank_bound"))
    assert typical.rank.b == pytest.approx(expected.b) and typical.rank.n == 11
    assert typical.rank.counts == {"exact": 4, "left": 3, "right": 4, "interval": 0}
    law = capacity["linear"]  # d_model 16's best alone (below the judging load), the rest
    assert law.rank.counts == {"exact": 4, "left": 1, "right": 4, "interval": 0}
    assert 0.6 < law.floats.b < 1.6  # 0.81 below 64 pairs; the held loads at 128 pull it up
    assert law.primary is not None and law.held and law.c_range is not None
    assert math.isnan(law.rank.b_low)  # read at two widths: the scatter about the law unknown
    assert "softmax" not in capacity  # lower bounds only
    learnability = dict(
        zip(mine["state.mixer_floats_per_layer"], mine["learnability"], strict=True)
    )
    assert learnability == {144: "0 of 3", 544: "3 of 3", 2112: "2 of 3", 8320: ">=3 of 3"}


def third_width() -> list[dict]:
    """The records without d_model 128 and with d_model 48: read at three widths."""
    held = [
        r
        for r in law_records()
        if (r["model"], r["config"]["backbone"]["d_model"]) != ("linear", 128)
    ]
    return held + [curve_record("linear", 48, s, accuracies(law_n90(48, s))) for s in (0, 1, 2)]


def test_each_kind_of_readout_is_drawn_as_what_it_is() -> None:
    runs, rows, laws = runs_of(third_width())  # read at d_model 32, 48, 64: a line
    fig = capacity_figure(runs, rows, laws, 0.9)
    ax = fig.axes[0]
    gids = [c.lines[0].get_gid() for c in ax.containers]
    assert gids.count("upper_bound:linear") == 3  # below the judging load: arrows down
    assert gids.count("lower_bound:linear") == 1 and gids.count("lower_bound:softmax") == 2
    assert gids.count("run:linear") + gids.count("interval:linear") == 7
    hollow = [c for c in ax.containers if c.lines[0].get_markerfacecolor() == "white"]
    assert len(hollow) == 1  # the one run still rising; the run at the floor is not drawn
    large = [c for c in ax.containers if c.lines[0].get_markersize() > 9]
    assert len(large) == 4 + 1  # linear's best restart a width, softmax's
    fit = next(line for line in ax.lines if line.get_gid() == "fit:linear")
    low, high = laws["linear"].floats.floats_range
    assert fit.get_xdata()[0] == pytest.approx(low) and fit.get_xdata()[-1] == pytest.approx(high)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    fit = laws["linear"].floats
    censored = fit.counts["left"] + fit.counts["right"]
    assert f"linear: b = {fit.shown()} ({fit.n} readouts, {censored} censored)" in labels
    assert "softmax: no fit (censored readouts only)" in labels
    assert any(label.startswith("hollow: not converged") for label in labels)
    # linear's dashed line is its rank bound; softmax's, a KV cache, the tokens it keeps
    assert "the stack's rank bound R = layers x H x D (dashed)" in labels
    assert "softmax's KV cache: R = T tokens (dashed)" in labels
    dashed = {line.get_gid() for line in ax.lines if str(line.get_gid()).startswith("rank_")}
    assert dashed == {"rank_bound:linear", "rank_bound:softmax"}
    assert fig._suptitle.get_text() == "Capacity against state"  # the question; the rest below
    caption = caption_of(fig)
    assert (
        "1 training_limited run(s) (not above the floor at the judging load, or still rising "
        "below it): not drawn" in caption
    )
    assert ax.get_ylabel().startswith("n90: largest load at accuracy >= 0.9")


def test_a_law_whose_interval_reaches_zero_draws_no_line_and_says_why() -> None:
    runs, rows, laws = runs_of(third_width())
    law = laws["linear"]
    loose = replace(law, floats=replace(law.floats, b_low=-0.5))
    fig = capacity_figure(runs, rows, {"linear": loose}, 0.9)
    assert not [line for line in fig.axes[0].lines if line.get_gid() == "fit:linear"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    expected = f"linear: b = {loose.floats.shown()} ("
    assert any(
        label.startswith(expected) and "not pinned (the interval" in label for label in labels
    ), labels


def test_a_law_read_at_two_state_sizes_draws_no_line_and_says_why() -> None:
    """Two parameters fit two read state sizes exactly: nothing tests the line's shape, and
    nothing says how far widths scatter about it, so b has no interval."""
    runs, rows, laws = runs_of(law_records())  # read at d_model 32 and 64 only
    assert math.isnan(laws["linear"].floats.b_low)
    fig = capacity_figure(runs, rows, laws, 0.9)
    assert not [line for line in fig.axes[0].lines if line.get_gid() == "fit:linear"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(label.startswith("linear: b = ") and "not pinned" in label for label in labels)


def test_a_run_judged_by_an_older_rule_is_judged_anew_by_the_last_third_rule() -> None:
    rising = curve_record("linear", 32, 0, accuracies(law_n90(32, 0)))
    rising["train"].update(val_curve=[[1000, 0.5], [2000, 0.6], [3000, 0.9]], floor=0.16)
    flat = curve_record("linear", 32, 1, accuracies(law_n90(32, 1)))
    flat["train"].update(converged=False, val_curve=[[1000, 0.5], [2000, 0.8], [3000, 0.8]])
    flat["train"]["floor"] = 0.16
    rows = reread(clean_rows(pd.DataFrame([flat_row(r) for r in (rising, flat)])), 0.9)
    assert [r["train.converged"] for r in rows] == [False, True]
    assert [r["capacity.training"] for r in rows] == ["still_rising", "converged"]


def test_a_reason_for_no_fit_that_three_mixers_share_is_written_once_with_the_others() -> None:
    censored = "censored readouts only"
    reasons = {"gdn+gdn": censored, "gla+gla": censored, "gla+swa": censored}
    assert no_fit_note({**reasons, "mamba2+mamba2": "every run training_limited"}) == (
        "no fit for the mixers named alone: censored readouts only; "
        "mamba2+mamba2: every run training_limited"
    )
    assert no_fit_note({"gdn+gdn": censored, "gla+gla": censored}) == ""  # each entry says it
    assert law_label("gdn+gdn", None, "") == "gdn+gdn"
    assert law_label("gdn+gdn", None, censored) == "gdn+gdn: no fit (censored readouts only)"


def test_another_threshold_names_every_label() -> None:
    runs, rows, laws = runs_of(law_records(), threshold=0.8)
    fig = capacity_figure(runs, rows, laws, 0.8)
    assert fig.axes[0].get_ylabel().startswith("n80: largest load at accuracy >= 0.8")
    assert "n80 per restart" in caption_of(fig)


def test_no_figure_without_two_state_sizes() -> None:
    records = [curve_record("linear", 64, s, accuracies(law_n90(64, s))) for s in (0, 1, 2)]
    runs, rows, laws = runs_of(records)
    assert capacity_figure(runs, rows, {}, 0.9) is None
    assert laws == {}


def test_the_report_reads_the_curves_anew_at_the_threshold_asked(tmp_path: Path, capsys) -> None:
    sweep = write_sweep(tmp_path / "sweep", law_records())
    table = report(sweep, wandb_mode="disabled")
    assert (sweep / "report" / "capacity_vs_state.png").exists()
    assert not (sweep / "report" / "acc_vs_state.png").exists()  # the capacity figure answers
    linear = {row["backbone.d_model"]: row for row in table if row["model"] == "linear"}
    assert "999" not in str(table)  # the records' stale readouts are not shown
    assert linear[16]["n90"] == "<2; <2; <2" and linear[128]["n90"] == ">=64; >=64; >=64"
    assert linear[32]["n90"].split("; ")[2].startswith(">=")  # still rising: a lower bound
    assert linear[64]["verdict"].endswith("training_limited (at_floor)")
    assert len({row["b n90 in R [90%] capacity"] for row in linear.values()}) == 1
    assert linear[16]["capacity_n90"] == "<2" and linear[16]["learnability"] == "0 of 3"
    assert linear[128]["learnability"] == ">=3 of 3" and linear[128]["restarts"] == "3"
    laws = pd.read_csv(sweep / "report" / "laws.csv")
    assert list(laws["estimand"]) == ["capacity", "typical"] and set(laws["model"]) == {"linear"}
    assert linear[32]["read_seeds"] == "0, 1, 2" and linear[32]["seeds"] == 3
    assert all("seeds_read" not in row for row in table)
    with open(sweep / "report" / "table.csv") as handle:
        header = handle.readline().strip().split(",")
    assert "read_seeds" in header and "seeds_read" not in header
    page = (sweep / "report" / "report.html").read_text()
    assert "<th>read_seeds</th>" in page and "<td>0, 1, 2</td>" in page
    shown = page[page.index("<h2>capacity_vs_state</h2>") :]
    shown = shown[shown.index("<p class='caption'>") : shown.index("</p>")]
    # a law read at two state sizes (d_model 32 and 64) is fitted but drawn with no line
    assert "No line is drawn: the legend gives each mixer" in shown
    assert "A line is the power law" not in shown and "{fit}" not in shown
    assert "for softmax, whose state is its KV cache, the T tokens it keeps" in shown
    printed = capsys.readouterr().out
    assert "capacity law: linear, on capacity" in printed and "b in R = " in printed
    assert "typical law: linear, on the typical restart" in printed
    cell = "Cell linear d_model=16, 3 seeds (0, 1, 2): n90 <2 (seed 0), <2 (seed 1), <2 (seed 2); "
    assert cell + "verdicts: 3 seeds " in printed
    assert "n90 <2 ; " not in printed and ": seeds " not in printed

    table = report(sweep, wandb_mode="disabled", threshold=0.8)
    linear80 = {row["backbone.d_model"]: row for row in table if row["model"] == "linear"}
    assert "n80" in linear80[32] and "n90" not in linear80[32]
    read90 = float(linear[64]["n90"].split(";")[0].split(" ")[0])
    read80 = float(linear80[64]["n80"].split(";")[0].split(" ")[0])
    assert read80 > read90  # a lower level is held further: read anew, not the stored value
    assert "capacity law: linear, on capacity" in capsys.readouterr().out
