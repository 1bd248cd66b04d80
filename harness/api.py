"""The Python way in: `run_config` trains and tests one config without the command line.

    from harness.api import run_config
    record = run_config("assoc_recall", "linear", "trainer.max_steps=50", seed=1)
    record = run_config("assoc_recall", "linear", task_params={"num_kv_pairs": 4})

It composes `conf/` exactly as `python run.py` does (`harness.config.compose`) and returns the
record that the run also writes to `<output_dir>/results.json`.
"""

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.config.command_line import check_overrides
from harness.config.compose import compose_config, overrides_of
from harness.train import run


def default_output_dir() -> Path:
    """`outputs/<date>/<time>` as for `python run.py`, made unique within the second."""
    base = Path("outputs") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    path, n = base, 0
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def run_config(
    task: str | None = None,
    model: str | None = None,
    *overrides: str,
    task_params: Mapping[str, Any] | None = None,
    model_params: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    **settings: Any,
) -> dict:
    """Train and test one config; returns its record (`results.json`).

    - `task`, `model`: registry names (None: the config's defaults, or the preset's);
    - `overrides`: command-line style strings, e.g. `"trainer.max_steps=50"`,
      `"experiment=retrieval_gap"`, `"debug=smoke"`, `"task.eval_seq_lens=[128]"`;
    - `task_params`, `model_params`: the task's and the mixer's parameters as dicts
      (`task_params={"num_kv_pairs": 40}`);
    - `settings`: other settings as keywords: a top-level key (`seed=1`, `debug="smoke"`), a
      group as a dict (`trainer={"max_steps": 50}`), or a dotted key
      (`**{"trainer.max_steps": 50}`);
    - `output_dir`: where the run writes (default `outputs/<date>/<time>`).

    Bad input raises `harness.config.refusal.BadInput` (a `ValueError`) before training, with
    the command line's one line (an unknown key names the nearest one). A run that diverges
    returns `status: diverged`.
    """
    args = [f"task={task}"] if task else []
    args += [f"model={model}"] if model else []
    groups = {"task": task_params or {}, "model": model_params or {}}
    args += [*overrides, *overrides_of(settings), *overrides_of(groups)]
    check_overrides(args)
    return run(compose_config(args, output_dir=output_dir or default_output_dir()))
