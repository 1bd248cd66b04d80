"""Turn a sweep folder into a comparison: `python -m harness.report multirun/<date>/<time>`.

Reads every job's record (`harness.records.sweep.load_sweep`), aggregates repeated seeds (mean,
standard deviation, count), picks the best learning rate per point by validation accuracy
where a grid was swept, and writes into `<sweep>/report/`: `table.csv`, the figures that the
sweep's varied parameters call for (`acc_vs_seq_len.png`, `acc_vs_<task parameter>.png` for
each other varied numeric task parameter such as `num_kv_pairs`, one of the two where they
are functions of each other; `acc_vs_state.png`, `acc_vs_load.png`, `capacity_vs_state.png`,
`acc_vs_test_length.png`, `needle_heatmap.png`, `copy_vs_length.png`) and `report.html` (one
self-contained page: the verdicts, the figures with their captions, the table, the failed
jobs, the provenance and the settings). Panels split by the parameters the sweep's commands
swept (`sweep.json`: `swept`). The table is printed (with each mixer's capacity law, when
its runs give one), and everything is logged to one W&B run per sweep in the sweep's
project."""
