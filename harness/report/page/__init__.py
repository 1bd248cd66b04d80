"""The report as one self-contained HTML page, results first: the verdicts, the figures with
how to read them, the table, each failed job's error, then where the numbers come from (the
provenance) and the settings (those that define the experiment, then the plumbing; both
collapsed). The page is `page.html.j2` (Jinja2, every value escaped), its tables
`table.html.j2`, its style `page.css`, its captions `captions.yaml`."""

import base64
import re
from pathlib import Path
from typing import Any

import jinja2
import yaml

from harness.readouts.capacity import level_name
from harness.report.plain_table import fitting, format_cell

HERE = Path(__file__).parent
TEXTS = yaml.safe_load((HERE / "captions.yaml").read_text())
CAPTIONS: dict[str, str] = {
    stem: text.replace("{reading}", TEXTS["reading"]) for stem, text in TEXTS["captions"].items()
}
"""Each figure's caption by file stem, with `{level}`, `{threshold}` and `{fit}` to fill."""
FIT = {True: TEXTS["fit"]["fitted"], False: TEXTS["fit"]["bare"]}
"""The capacity figure's sentence on its fitted line (`{fit}`), by whether any was drawn."""
STYLE = f"<style>\n{(HERE / 'page.css').read_text()}</style>"


def caption(stem: str, threshold: float, fitted: bool) -> str:
    """The caption under figure `stem`, naming the readout at `threshold`; the capacity
    figure's says the fitted line only where one is drawn (`fitted`)."""
    level = level_name(threshold)
    fit = FIT[fitted].format(level=level)
    return CAPTIONS.get(stem, "").format(level=level, threshold=threshold, fit=fit)


ENVIRONMENT = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE), autoescape=True, keep_trailing_newline=True
)
ENVIRONMENT.filters["cell"] = format_cell  # floats to 4 significant digits, None blank
TEMPLATE = ENVIRONMENT.get_template("page.html.j2")

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
    seeds = ["read_seeds"] * ("read_seeds" in columns)  # whose readouts, in that order
    lead = lead[:1] + params + lead[1:3] + seeds + readouts + lead[3:]
    tail = [c for c in TRAILING if c in columns and c not in lead]
    return lead + [c for c in columns if c not in lead and c not in tail] + tail


WRAPPED = ("note", "verdict", "error")
"""Columns whose text wraps in its cell instead of widening the table."""
PAGE_WIDTH = 1240
"""Pixels the page's results table may take (the page is 1,280 px wide): the columns that fit
(`plain_table.fitting`, at most 9 px a character at 13 px, 13 px of padding), the rest in
`table.csv`."""


def table(rows: list[dict]) -> str:
    """The rows as an HTML table in a wrapper that scrolls sideways (`page_columns`' order;
    the note wraps in its column instead of widening the table); `(none)` for no rows."""
    return str(ENVIRONMENT.get_template("table.html.j2").module.table(rows, page_columns(rows)))


def write_page(
    path: Path,
    sweep: Path,
    verdicts: list[str],
    notes: list[str],
    figures: dict[str, tuple[bytes, str]],
    rows: list[dict],
    problems: list[dict],
    provenance: dict[str, str],
    settings: tuple[dict[str, Any], dict[str, Any]],
    threshold: float,
    fitted: bool = True,
    curves: dict[str, tuple[bytes, str]] | None = None,
) -> Path:
    """Write the page; images (`figures`, `curves`: by stem, the PNG and the figure's caption
    line) are inlined (base64), so the file stands alone. The captions name the readout at
    `threshold` (`n90` at 0.9); `fitted`: whether the capacity figure draws a fitted law (its
    caption says the line only then). The results table shows the columns that fit
    `PAGE_WIDTH`; every column is in `table.csv`."""
    experiment, plumbing = settings

    def inlined(found: dict[str, tuple[bytes, str]]) -> list[dict]:
        return [
            dict(stem=stem, data=base64.b64encode(png).decode(),
                 caption=" ".join(filter(None, [caption(stem, threshold, fitted), line])))
            for stem, (png, line) in found.items()
        ]  # fmt: skip

    shown = fitting(rows, page_columns(rows), PAGE_WIDTH, char=9, pad=13, wraps=WRAPPED)
    page = TEMPLATE.render(
        title=str(sweep), style=(HERE / "page.css").read_text(), verdicts=verdicts, notes=notes,
        figures=inlined(figures), curves=inlined(curves or {}), rows=rows, columns=shown,
        hidden=len(page_columns(rows)) - len(shown), problems=problems,
        problem_columns=page_columns(problems), provenance=provenance,
        settings=[
            ("Settings that define the experiment", as_rows(experiment)),
            ("Plumbing: how the runs were carried out", as_rows(plumbing)),
        ],
    )  # fmt: skip
    path.write_text(page)
    return path


def as_rows(settings: dict[str, Any]) -> list[dict]:
    return [{"setting": key, "value": value} for key, value in settings.items()]
