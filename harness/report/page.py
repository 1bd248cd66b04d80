"""The report as one self-contained HTML page, results first: the verdicts, the figures with
how to read them, the table, each failed job's error, then where the numbers come from (the
provenance) and the settings (those that define the experiment, then the plumbing; both
collapsed)."""

import base64
import html
import re
from pathlib import Path
from typing import Any

from harness.readouts.capacity import level_name

READING = (
    " Softmax, the reference, is the wide grey band under the other lines: a line lying on it "
    "reached softmax's accuracy. Grey lines are binding-free baselines (chance, guessing from "
    "the context, ...; baselines equal at every point share one line and one legend entry): "
    "a model on them has not learned to retrieve. With three seeds or fewer each seed is a "
    "small point and the line joins their mean; with more, bars are one standard deviation. "
    "The subtitle gives the budget: steps, learning rate (or the grid the best was chosen "
    "from on validation) and width."
)
CAPTIONS = {
    "acc_vs_num_kv_pairs": (
        "The headline: test accuracy (fraction of scored tokens right) against the number of "
        "key-value pairs to recall, log2 axis, one line per model. A fixed-size state must "
        "hold every pair, so it falls as the pairs grow; softmax keeps every token. Parameters "
        "swept with the pairs (the length, the batch) are written under each tick; an x at "
        "the bottom is a point with no ok job, with the reason; a hollow marker is a run whose "
        "budget ran out while it was still improving." + READING
    ),
    "acc_vs_seq_len": (
        "Test accuracy (fraction of scored tokens right) against the training sequence length, "
        "log2 axis, one line per model. An x at the bottom is a point with no ok job, with the "
        "reason (diverged at step N, failed); a hollow marker is a run whose step budget ran "
        "out while it was still improving. Every other swept parameter makes its own panel; "
        "one swept together with the length is written under the ticks or beside the points; "
        "one that differs between separate commands (a raised budget) is a dashed line of its "
        "own, named beside its points." + READING
    ),
    "capacity_vs_state": (
        "The capacity law: {level} (the most key-value pairs recalled at {threshold}) against "
        "the state's floats per layer, log-log, one colour per mixer, each seed a point.{fit} "
        "An arrow is a censored readout (up: within a quarter of the largest tested load, or "
        "still rising, a lower bound; down: converged below the threshold at the smallest "
        "load, an upper bound), and a hollow point did not converge. Dashed: the stack's rank "
        "bound R, layers x H x D bindings (docs/background.md, section 17), the law's primary "
        "model; for softmax, whose state is its KV cache, the tokens it keeps, layers x T."
    ),
    "acc_vs_state": (
        "Test accuracy against the state per layer, in floats, log2 axis: what a model must "
        "keep to produce the next token (softmax: its KV cache, 2 x length x d_model floats, "
        "which grows with the length), the short convolutions' windows left out (the table "
        "gives them apart). Up and to the left is better: Zoology's "
        "recall-memory frontier. Points of one model at several widths are joined; the width "
        "is written beside each point." + READING
    ),
    "acc_vs_test_length": (
        "One model per line, trained at one length (dotted line) and tested at others "
        "(task.eval_seq_lens): how retrieval degrades, or holds, past the training length."
    ),
    "needle_heatmap": (
        "Needle retrieval accuracy by depth (rows: where in the context the needle was, 0 = "
        "the start) and length (columns), one panel per model. A fixed-size state forgets "
        "early needles first: the bottom rows fade as the length grows. The red marks on the "
        "colour scale are the binding-free floors: a cell at or below one retrieved nothing."
    ),
    "copy_vs_length": (
        "Copying accuracy against the length of the string to copy, one line per model: a "
        "fixed state holds a bounded number of tokens, so accuracy falls past that length."
    ),
    "acc_vs_load": (
        "Test accuracy against load from runs trained on a range of loads, log2 axis: each "
        "run's per-load accuracy beside the binding-free baselines at every load, and in the "
        "legend its readout ({level}: the largest load at >= {threshold}; >= for a run that "
        "held every tested load or was still rising, a lower bound) and verdict; a hollow "
        "marker did not converge (docs/background.md, 'Reading a load curve')."
    ),
}
FIT = {
    True: (
        " The line is the power law {level} = a * floats^b fitted by censored maximum "
        "likelihood to every run that learned to bind (b and its 90% interval in the legend)."
    ),
    False: " No law was fitted, so no line is drawn: the legend says why for each mixer.",
}
"""The capacity figure's sentence on its fitted line (`{fit}`), by whether any was drawn."""


def caption(stem: str, threshold: float, fitted: bool) -> str:
    """The caption under figure `stem`, naming the readout at `threshold`; the capacity
    figure's says the fitted line only where one is drawn (`fitted`)."""
    level = level_name(threshold)
    fit = FIT[fitted].format(level=level)
    return CAPTIONS.get(stem, "").format(level=level, threshold=threshold, fit=fit)


def cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape("" if value is None else str(value))


LEADING = ("model", "status", "verdict", "test_acc", "std", "seeds", "converged")
"""What a reader looks for first in a row, in this order; the cell's parameters (`model.*`,
`task.*`, `backbone.*`) right after the model, the readouts (`READOUT_COLUMN`) after the verdict."""
READOUT_COLUMN = re.compile(r"^n\d")
"""A readout's column: `n90`, `n50`, `n90 SE`, ... at the sweep's threshold."""
TRAILING = ("not_ok", "note", "task")
"""Context read last: the failed-job count, the note (wrapped, not widened), the task."""


def page_columns(rows: list[dict]) -> list[str]:
    """Every column of `rows`, the leading ones first, the trailing ones last, the rest (the
    baselines, the state, ...) in their order between."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    params = [
        c for c in columns if c.split(".", 1)[0] in ("model", "task", "backbone") and "." in c
    ]
    readouts = [c for c in columns if READOUT_COLUMN.match(c)]  # n90, n50 (n80 at another level)
    lead = [c for c in LEADING if c in columns]
    lead = lead[:1] + params + lead[1:3] + readouts + lead[3:]
    tail = [c for c in TRAILING if c in columns and c not in lead]
    return lead + [c for c in columns if c not in lead and c not in tail] + tail


def data_cell(column: str, value: Any) -> str:
    """One `<td>`; the note's wraps in its column instead of widening the table."""
    return f"<td class='note'>{cell(value)}</td>" if column == "note" else f"<td>{cell(value)}</td>"


def table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = page_columns(rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(data_cell(c, row.get(c)) for c in columns) + "</tr>" for row in rows
    )
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def collapsed(summary: str, rows: list[dict]) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>{table(rows)}</details>"


STYLE = """<style>
body { font-family: sans-serif; max-width: 1400px; margin: 1em auto; padding: 0 1em; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
td.note { white-space: normal; min-width: 16em; text-align: left; }
th { background: #f3f3f3; } code { background: #f3f3f3; padding: 2px 4px; }
img { max-width: 100%; height: auto; } .caption { max-width: 900px; color: #333; }
.wide { overflow-x: auto; max-width: 100%; } summary { cursor: pointer; margin: 0.5em 0; }
ul.verdict li { margin: 0.3em 0; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; }
.provenance td { text-align: left; }
</style>"""


def provenance_section(provenance: dict[str, str]) -> str:
    """Where the numbers come from: commit, versions, machine, the jobs' wall time."""
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td><pre>{html.escape(v)}</pre></td></tr>"
        for k, v in provenance.items()
    )
    return (
        "<h2>Provenance</h2><p>Commit, versions and machine are those that wrote this report; "
        f"the wall time is the jobs' own.</p><table class='provenance'>{rows}</table>"
    )


def write_page(
    path: Path,
    sweep: Path,
    verdicts: list[str],
    notes: list[str],
    figures: list[Path],
    rows: list[dict],
    problems: list[dict],
    provenance: dict[str, str],
    settings: tuple[dict[str, Any], dict[str, Any]],
    threshold: float,
    fitted: bool = True,
) -> Path:
    """Write the page; images are inlined (base64), so the file stands alone. The captions
    name the readout at `threshold` (`n90` at 0.9); `fitted`: whether the capacity figure
    draws a fitted law (its caption says the line only then)."""
    title = html.escape(str(sweep))
    parts = [f"<html><head><meta charset='utf-8'><title>report: {title}</title>", STYLE]
    parts += ["</head><body>", f"<h1>recall-harness report: {title}</h1>", "<h2>Verdict</h2>"]
    parts.append("<ul class='verdict'>" + "".join(f"<li>{html.escape(v)}</li>" for v in verdicts))
    parts.append("</ul>" + "".join(f"<p>{html.escape(n)}</p>" for n in notes))
    for figure in figures:
        data = base64.b64encode(figure.read_bytes()).decode()
        parts.append(f"<h2>{html.escape(figure.stem)}</h2>")
        parts.append(f"<img src='data:image/png;base64,{data}' alt='{html.escape(figure.stem)}'/>")
        text = caption(figure.stem, threshold, fitted)
        parts.append(f"<p class='caption'>{html.escape(text)}</p>")
    parts += ["<h2>Results</h2>", table(rows)]
    parts += ["<h2>Failed and diverged jobs</h2>", table(problems)]
    parts.append(provenance_section(provenance))
    experiment, plumbing = settings
    parts.append("<h2>Settings</h2>")
    for summary, group in (
        (f"Settings that define the experiment ({len(experiment)})", experiment),
        (f"Plumbing: how the runs were carried out ({len(plumbing)})", plumbing),
    ):
        parts.append(collapsed(summary, [{"setting": k, "value": v} for k, v in group.items()]))
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
    return path
