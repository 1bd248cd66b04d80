"""The report as one self-contained HTML page: how the sweep was run (command, fixed
settings), the figures with how to read them, the table, and each failed job's error."""

import base64
import html
from pathlib import Path
from typing import Any

CAPTIONS = {
    "acc_vs_seq_len": (
        "Test accuracy (fraction of scored tokens right) against the training sequence length, "
        "log2 axis, one line per model. Grey lines are binding-free baselines (chance, guessing "
        "from the context, ...): a model on them has not learned to retrieve. An x at the "
        "bottom is a point with no ok job, with the reason (diverged at step N, failed); a "
        "hollow marker is a run whose step budget ran out while it was still improving. Every "
        "other swept parameter makes its own panel; one swept together with the length "
        "(key-value pairs = length / 8) is written beside the points."
    ),
    "acc_vs_state": (
        "Test accuracy against the recurrent state per layer, in bytes, log2 axis: what a "
        "model must keep to produce the next token (softmax: its KV cache, 2 x length x "
        "d_model floats, which grows with the length). Up and to the left is better: Zoology's "
        "recall-memory frontier. Points of one model at several widths are joined; the width "
        "is written beside each point."
    ),
    "acc_vs_test_length": (
        "One model per line, trained at one length (dotted line) and tested at others "
        "(task.eval_seq_lens): how retrieval degrades, or holds, past the training length."
    ),
    "needle_heatmap": (
        "Needle retrieval accuracy by depth (rows: where in the context the needle was, 0 = "
        "the start) and length (columns), one panel per model. A fixed-size state forgets "
        "early needles first: the bottom rows fade as the length grows."
    ),
    "copy_vs_length": (
        "Copying accuracy against the length of the string to copy, one line per model: a "
        "fixed state holds a bounded number of tokens, so accuracy falls past that length."
    ),
}


def cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape("" if value is None else str(value))


def table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


STYLE = """<style>
body { font-family: sans-serif; max-width: 1400px; margin: 1em auto; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f3f3f3; } code { background: #f3f3f3; padding: 2px 4px; }
img { max-width: 100%; } .caption { max-width: 900px; color: #333; }
</style>"""


def write_page(
    path: Path,
    sweep: Path,
    description: dict,
    notes: list[str],
    fixed: dict[str, Any],
    figures: list[Path],
    rows: list[dict],
    problems: list[dict],
) -> Path:
    """Write the page; images are inlined (base64), so the file stands alone."""
    parts = [f"<html><head><meta charset='utf-8'><title>report: {html.escape(str(sweep))}</title>"]
    parts += [STYLE, "</head><body>", f"<h1>recall-harness report: {html.escape(str(sweep))}</h1>"]
    commands = description.get("commands") or [description.get("command")]
    for command in filter(None, commands):
        parts.append(f"<p>Command: <code>{html.escape(command)}</code></p>")
    parts += [f"<p>{html.escape(n)}</p>" for n in notes]
    parts.append("<h2>Fixed settings</h2>")
    parts.append(table([{"setting": k, "value": v} for k, v in fixed.items()]))
    for figure in figures:
        data = base64.b64encode(figure.read_bytes()).decode()
        caption = CAPTIONS.get(figure.stem, "")
        parts.append(f"<h2>{html.escape(figure.stem)}</h2>")
        parts.append(f"<p class='caption'>{html.escape(caption)}</p>")
        parts.append(f"<img src='data:image/png;base64,{data}'/>")
    parts += ["<h2>Results</h2>", table(rows)]
    parts += ["<h2>Failed and diverged jobs</h2>", table(problems)]
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
    return path
