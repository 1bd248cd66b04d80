"""A sweep folder's report: read, aggregate, draw, write and log it (the package docstring,
`harness/report/__init__.py`, says what it holds)."""

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from common.checks import is_real
from harness.config.figure_specs import (
    ACCURACY_FIGURE,
    STATE,
    FigureSpec,
    declared_figures,
    default_figures,
)
from harness.readouts.capacity import level_name
from harness.readouts.cell_law import CellLaw, laws_frame
from harness.readouts.restarts import CAPACITY
from harness.records.schema import status_of, tally
from harness.records.sweep import load_sweep, sweep_description
from harness.report import look
from harness.report.budget import budget, rate_chosen
from harness.report.capacity_figure import capacity_figure, lined
from harness.report.capacity_law import cells_and_laws, law_notes, restart_frame
from harness.report.capacity_runs import CapacityRun, design_runs
from harness.report.curves import curve_figures
from harness.report.figures import accuracy_figure, length_figure
from harness.report.frame import (
    AVERAGED,
    SELECTED,
    STATE_FLOATS,
    clean_rows,
    covaries,
    fixed_settings,
    missing,
    parameter_columns,
    points,
    split_settings,
    varied,
)
from harness.report.load_curve import load_figure
from harness.report.page import page_columns, write_page
from harness.report.pairs import COLUMNS, OWN, REFERENCE, pair_lines, pair_rows
from harness.report.plain_table import fitting, print_table, write_csv
from harness.report.provenance import provenance
from harness.report.references import reference_name, reference_rows
from harness.report.reread import default_threshold, reread, threshold_of
from harness.report.slices import copy_figure, needle_heatmap
from harness.report.table import frontier_rows, point_rows, problem_rows
from harness.report.verdict import verdicts

__all__ = ["report", "read"]
CONSOLE_WIDTH = 120
"""Characters the printed table may take: the columns that fit (`page_columns`' order), the
rest in `table.csv`."""


def description_of(sweep: Path) -> dict:
    """`sweep.json`, or what Hydra's `multirun.yaml` says where there is no `sweep.json`."""
    description = sweep_description(sweep)
    if description or not (sweep / "multirun.yaml").exists():
        return description
    from harness.records.sweep_console import sweep_plan

    config = OmegaConf.load(sweep / "multirun.yaml")
    overrides = list(OmegaConf.select(config, "hydra.overrides.task") or [])
    logger = OmegaConf.to_container(config.get("logger") or OmegaConf.create({}), resolve=False)
    return {
        "command": " ".join(["python run.py -m", *overrides]),
        "swept": sweep_plan(config)[1],
        "experiment": OmegaConf.select(config, "hydra.runtime.choices.experiment"),
        "logger": logger,
    }


def task_axes(frame: pd.DataFrame, point_keys: list[str]) -> list[str]:
    """Varied numeric task parameters besides the length (`task.num_kv_pairs`, ...): each
    gets its own accuracy figure, the length has one already."""
    numeric = lambda k: all(is_real(v) and v > 0 for v in frame[k] if not missing(v))  # noqa: E731
    return [k for k in point_keys if k.startswith("task.") and k != "task.seq_len" and numeric(k)]


def variants(
    frame: pd.DataFrame, point_keys: list[str], hue: tuple[str, ...] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """The `hue` parameters' values join the model's name ("linear elu"): variants of a model,
    drawn as lines of their own in one panel, so that they compare at equal x. By default
    (`hue` None) the swept model parameters whose values are names (`model.feature_map`: elu,
    taylor, favor); numeric ones (`model.feature_dim`) stay axes or panels."""
    if hue is None:
        strings = [k for k in point_keys if any(isinstance(v, str) for v in frame[k])]
        hue = tuple(k for k in strings if k.startswith("model."))
    named = [key for key in point_keys if key in hue]
    if not named:
        return frame, point_keys
    renamed = frame.copy()
    renamed["model"] = [
        " ".join([p["model"], *(str(p[k]) for k in named if not missing(p[k]) and p[k])])
        for _, p in frame.iterrows()
    ]
    return renamed, [key for key in point_keys if key not in named]


def figure_specs(
    frame: pd.DataFrame, point_keys: list[str], chosen: list[str] | None, experiment: str | None
) -> list[FigureSpec]:
    """The figures the preset declares (`harness.config.figure_specs`; a parameter the command
    swept beyond the declaration makes panels too), else the default rule's."""
    declared = declared_figures(experiment)
    if declared is not None:
        return [with_swept_panels(spec, point_keys, chosen or []) for spec in declared]
    frame, point_keys = variants(frame, point_keys)
    axes = ["task.seq_len", *task_axes(frame, point_keys)]

    def together(key: str, x: str) -> bool:
        return covaries(frame, key, STATE_FLOATS if x == STATE else x)

    load_curves = any(bool(c) for c in frame["capacity"])
    return default_figures(axes, point_keys, chosen, together, load_curves)


def with_swept_panels(spec: FigureSpec, point_keys: list[str], chosen: list[str]) -> FigureSpec:
    """A declared accuracy figure with a panel for each parameter the command swept that the
    declaration does not place (`backbone.d_model=32,64` added to a preset)."""
    if spec.kind != ACCURACY_FIGURE:
        return spec  # the other kinds lay out their own panels
    placed = {spec.x, *spec.panels, *spec.ticks, *(spec.hue or ())}
    extra = [k for k in point_keys if k in chosen and k not in placed]
    return replace(spec, panels=(*spec.panels, *extra)) if extra else spec


def draw(
    frame: pd.DataFrame,
    point_keys: list[str],
    rows: list[dict],
    specs: list[FigureSpec],
    laws: dict[tuple[str, str], CellLaw] | None = None,
    threshold: float | None = None,
    cells: pd.DataFrame | None = None,
    references: list[CapacityRun] = (),
) -> dict[str, Figure]:
    """The figures of `specs` by file name, those the records hold (a figure for a variable
    that was not varied, or a task that is not there, is left out); `rows`, the jobs behind
    them, give a load curve's seeds and every figure's budget; `laws` (by mixer and
    estimand), `threshold` and `cells` (`harness.report.capacity_law.cells_and_laws`), the
    capacity figure's, `references` the committed references' runs drawn beside them. The
    default rule leaves the accuracy against state out of load curves:
    its accuracy would be a token-weighted mean over the tested loads, no one load and no
    readout; the capacity figure (or the load curves' legend) gives the readout against
    the state."""
    threshold = default_threshold() if threshold is None else threshold
    runs = design_runs(
        restart_frame(rows, frame, point_keys), cells if cells is not None else pd.DataFrame()
    )
    capacity = {m: law for (m, e), law in (laws or {}).items() if e == CAPACITY}
    named, named_keys = variants(frame, point_keys)
    subtitle = budget(rows)
    drawers = {
        "load_curve": lambda _: load_figure(named, named_keys, rows, threshold),
        "capacity": lambda _: capacity_figure([*runs, *references], rows, capacity, threshold),
        "test_length": lambda _: length_figure(named, named_keys, subtitle),
        "needle_heatmap": lambda _: needle_heatmap(named, named_keys, subtitle),
        "copy_vs_length": lambda _: copy_figure(named, named_keys, subtitle),
        ACCURACY_FIGURE: lambda spec: accuracy_figure(
            *variants(frame, point_keys, spec.hue), spec, subtitle
        ),
    }
    # the capacity figure first: a name outside the registry gets its colour there first
    drawn = {s.name: drawers[s.kind](s) for s in sorted(specs, key=lambda s: s.kind != "capacity")}
    return {s.name: drawn[s.name] for s in specs if drawn[s.name] is not None}


def opening_notes(rows: list[dict], swept: list[str], lr_grid: bool) -> list[str]:
    """The page's first notes: the jobs and what varied, how accuracy is aggregated, and the
    learning-rate grid where some point had one (`lr_grid`)."""
    statuses = Counter(status_of(r) for r in rows)
    notes = [
        f"{len(rows)} jobs: {tally(statuses)}"
        + f". Varied: {', '.join(['model', *swept]) if swept else 'model only'}.",
        "Accuracy: mean over the seeds that finished; up to three seeds each is drawn as a "
        "point, beyond that their sample standard deviation (n - 1) is drawn (error bars, or a "
        "band on a load curve); std is blank for one seed.",
    ]
    if lr_grid:
        lrs = sorted({r["optim.lr"] for r in rows if "optim.lr" in r})
        notes.append(f"Learning rate: the best of {lrs} per point, chosen on validation accuracy.")
    return notes


def log_to_wandb(sweep, out, description, wandb_mode, table, rows, problems, figures) -> None:
    """The report as one W&B run in the sweep's project (`auto`: the sweep's own mode, and
    `disabled` when it ran with `logger=none`)."""
    logger, mode = description.get("logger") or {}, wandb_mode
    if mode == "auto":
        mode = "disabled" if logger.get("name") == "none" else logger.get("mode") or "offline"
    if mode != "disabled":
        from harness.records.wandb_run import log_report

        tables = {"table": table, "frontier": frontier_rows(rows), "problems": problems}
        print(f"W&B ({mode}): {log_report(sweep, out, description, mode, tables, figures)}")


def read(
    sweep: Path, threshold: float | None = None
) -> tuple[list[dict], list[str], list[str], pd.DataFrame, float]:
    """A sweep's jobs (`rows`, readouts read anew at `threshold`: `harness.report.reread`),
    its parameter columns, the varied ones, and its points (`harness.report.frame.points`,
    with each point's variant `name`, `linear elu`); the threshold used."""
    frame = load_sweep(sweep)
    if frame.empty:
        raise SystemExit(f"error: no results.json or summary.jsonl records under {sweep}")
    rows = clean_rows(frame)
    threshold = threshold_of(rows, threshold)
    rows = reread(rows, threshold)
    return rows, *tabulated(rows), threshold


def tabulated(rows: list[dict]) -> tuple[list[str], list[str], pd.DataFrame]:
    """`rows`' parameter columns, the varied ones, and their points with each point's variant
    `name`."""
    columns = parameter_columns(rows)
    swept = varied(rows, columns)
    point_keys = [c for c in swept if c not in AVERAGED + SELECTED]
    table = points(rows, point_keys)
    table["name"] = list(variants(table, point_keys)[0]["model"]) if len(table) else []
    return columns, swept, table


def with_references(
    rows: list[dict], threshold: float
) -> tuple[pd.DataFrame, dict[tuple[str, str], CellLaw], list[CapacityRun], list[str]]:
    """The committed references' cells (`source` reference, `family` their mixer), laws and
    capacity runs beside `rows` (`harness.report.references`), and a note a reference."""
    cells, laws, runs, notes = [], {}, [], []
    matched = reference_rows(rows)
    for folder, found in ((f, reread(kept, threshold)) for f, kept in matched if kept):
        _, swept, table = tabulated(found)
        keys = [c for c in swept if c not in AVERAGED + SELECTED]
        steps, originals = found[0].get("trainer.max_steps"), list(table["name"])
        table["name"] = [reference_name(n, folder, steps) for n in originals]
        family = dict(zip(table["name"], originals, strict=True))
        mine, fitted = cells_and_laws(found, table, keys)
        if mine.empty:
            continue
        cells.append(mine.assign(source=REFERENCE, family=mine["mixer"].map(family)))
        laws.update(fitted)
        runs += design_runs(restart_frame(found, table, keys), mine)
        names = ", ".join(sorted(set(originals)))
        where = f"docs/results/{folder} ({steps} steps; docs/results/references.txt)"
        said = "under this sweep's capacity protocol, drawn faded and paired with its own"
        notes.append(f"Reference {where}: {len(found)} runs of {names} {said}.")
    if not matched and any(r.get("capacity.protocol") for r in rows):
        found = "shares this sweep's capacity protocol (task, budget, layers, width)"
        notes.append(f"No committed reference (docs/results/references.txt) {found}.")
    return (pd.concat(cells) if cells else pd.DataFrame()), laws, runs, notes


def report(
    sweep: Path,
    out: Path | None = None,
    wandb_mode: str = "auto",
    threshold: float | None = None,
    references: bool = True,
    formats: tuple[str, ...] = ("png",),
    dpi: int = look.DPI,
) -> list[dict]:
    """Write the report of `sweep` into `out` (default `<sweep>/report`); return the table.
    Every load curve's readout is read anew at `threshold` (default: the sweep's
    `capacity.threshold`; `harness.report.reread`); `references`: with the committed
    references that match the sweep's protocol (`with_references`); each figure is written in
    `formats` (at `dpi`), the validation curves under `curves/`."""
    sweep = Path(sweep)
    rows, columns, swept, frame, threshold = read(sweep, threshold)
    out = Path(out or sweep / "report")
    out.mkdir(parents=True, exist_ok=True)
    description = description_of(sweep)
    point_keys = [c for c in swept if c not in AVERAGED + SELECTED]
    notes = opening_notes(rows, swept, rate_chosen(rows))
    cells, laws = cells_and_laws(rows, frame, point_keys)
    empty = (pd.DataFrame(), {}, [], [])
    ref_cells, ref_laws, ref_runs, ref_notes = (
        with_references(rows, threshold) if references else empty
    )
    chosen = description.get("swept")
    specs = figure_specs(frame, point_keys, chosen, description.get("experiment"))
    drawn = draw(frame, point_keys, rows, specs, laws | ref_laws, threshold, cells, ref_runs)

    def saved(figures: Iterable, under: Path) -> dict[str, tuple[list[Path], bytes, str]]:
        return {k: (*look.save(f, under / k, formats, dpi), look.caption_of(f)) for k, f in figures}

    figures = saved(drawn.items(), out)
    curves = saved(curve_figures(frame, rows, point_keys), out / "curves")
    notes.extend([*law_notes(laws, cells, threshold), *ref_notes])
    table = point_rows(frame, point_keys, "optim.lr" in swept, threshold, laws, cells)
    problems = problem_rows(rows, chosen or point_keys)
    settings = split_settings(fixed_settings(rows, [c for c in columns if c not in swept]))
    pairs = pair_rows(pd.concat([cells, ref_cells]), level_name(threshold))
    summary, closing = verdicts(frame, rows, threshold), pair_lines(pairs)
    fitted = any(lined(law) for (_, e), law in laws.items() if e == CAPACITY)
    origin = provenance(sweep, description, rows)
    on_page = lambda found: {k: (png, line) for k, (_, png, line) in found.items()}  # noqa: E731
    page = write_page(
        out / "report.html", sweep, [*summary, *closing], notes, on_page(figures), table,
        problems, origin, settings, threshold, fitted, on_page(curves),
    )  # fmt: skip
    shown = fitting(table, page_columns(table), CONSOLE_WIDTH) if table else None
    print_table(table, shown)
    if table and len(shown) < len(page_columns(table)):
        print(f"(the columns that fit {CONSOLE_WIDTH} characters; all are in table.csv)")
    failed = [f"{p['status']}: {p['job']}: {p['error']}" for p in problems]
    for line in [*notes, *summary, *failed, *closing]:
        print(line)
    files = [p for paths, _, _ in figures.values() for p in paths]
    images = [p for p in files if p.suffix == ".png"]
    log_to_wandb(sweep, out, description, wandb_mode, table, rows, problems, images)
    written = [write_csv(table, out / "table.csv"), *files, page]
    if laws or ref_laws:
        sources = [REFERENCE if k in ref_laws else OWN for k in laws | ref_laws]
        laws_frame(laws | ref_laws).assign(source=sources).to_csv(out / "laws.csv", index=False)
        written.insert(1, out / "laws.csv")
    if pairs:
        pd.DataFrame(pairs, columns=COLUMNS).to_csv(out / "pairs.csv", index=False)
        written.insert(1, out / "pairs.csv")
    drawn_curves = f", curves/ ({len(curves)} cells' validation curves)" if curves else ""
    print(f"written to {out}: {', '.join(p.name for p in written)}{drawn_curves}")
    return table
