"""Turn a sweep folder into a comparison: `python -m harness.report multirun/<date>/<time>`.

Reads every job's record (`harness.records.sweep.load_sweep`), aggregates repeated seeds (mean,
standard deviation, count), picks the best learning rate per point by validation accuracy
where a grid was swept, and writes into `<sweep>/report/`: `table.csv`, `laws.csv`, `pairs.csv`
(mixers at equal state, `harness.report.pairs`; beside the committed references,
`harness.report.references`), the figures its preset
declares (`report.figures` in `conf/experiment/<name>.yaml`; without one, the default rule's:
`acc_vs_<task parameter>.png` for each varied numeric task parameter, `acc_vs_state.png`,
`acc_vs_load.png`, `capacity_vs_state.png`, `acc_vs_test_length.png`, `needle_heatmap.png`,
`copy_vs_length.png`; `harness.config.figure_specs`), each where its records hold it (in
`--format` png, pdf, svg at `--dpi`), each cell's validation curves under `curves/`, and
`report.html` (one self-contained page: the verdicts, the figures with their captions, the
table, the failed jobs, the provenance and the settings). The default rule's panels split by
the parameters the sweep's commands swept (`sweep.json`: `swept`). The table is printed (with
each mixer's capacity law, when its runs give one), and everything is logged to one W&B run
per sweep in the sweep's project."""

FORMATS = ("png", "pdf", "svg")
"""The formats a figure can be written in (`--format`): PNG (the page's), PDF and SVG."""
DPI = 200
"""The PNG's resolution (`--dpi`): a one-panel figure is about 1,400 px wide."""
