"""Training speed of runs started side by side, against one run alone: `python -m
studies.runs_side_by_side [--steps 300] [--model favor] [--env OMP_WAIT_POLICY=PASSIVE]`.

Each scenario starts its runs (`python run.py task=assoc_recall model=<model>
task.num_kv_pairs=8 trainer.max_steps=<steps> logger=none` plus the scenario's `threads`) at
the same moment, waits for all of them, and reads each record's `train.tokens_per_s` and
`threads` block. Scenarios, on this machine's cores:

- one run alone, one thread (`threads=1`): the yardstick;
- one run alone, as many threads as cores (`threads=<cores>`, torch's own default), with
  OpenMP's idle threads spinning (`OMP_WAIT_POLICY=ACTIVE`) and sleeping (`PASSIVE`, run.py's
  default);
- one run alone, the default (`threads=0`: its share of the free cores, re-judged as it trains);
- two runs at once, each with `threads=<cores>` (torch's default for both), active and passive;
- two runs at once, one thread each;
- two runs at once, the default.

Printed: a Markdown table of tokens/s per run, their sum, and each run's ratio to the
yardstick (docs/performance.md, "Threads beside other work"). Run it on a quiet machine:
other work in the background is counted as the runs' neighbour."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.training.threads import usable_cores


def start_run(steps: int, model: str, threads: int, folder: Path, env: dict) -> subprocess.Popen:
    """One training run in the background, its record under `folder`."""
    command = [
        sys.executable,
        "run.py",
        "task=assoc_recall",
        f"model={model}",
        "task.num_kv_pairs=8",
        f"trainer.max_steps={steps}",
        "trainer.enable_progress_bar=false",
        "logger=none",
        f"threads={threads}",
        f"hydra.run.dir={folder}",
    ]
    return subprocess.Popen(
        command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def scenario(runs: int, threads: int, steps: int, model: str, env: dict) -> list[dict]:
    """Start `runs` runs at once with `threads` each; their records' speed and threads."""
    with tempfile.TemporaryDirectory() as scratch:
        folders = [Path(scratch) / str(i) for i in range(runs)]
        for proc in [start_run(steps, model, threads, f, env) for f in folders]:
            proc.wait()
        records = [json.loads((f / "results.json").read_text()) for f in folders]
    return [
        {"tokens_per_s": r["train"]["tokens_per_s"], "threads": r.get("threads", {})}
        for r in records
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--model", default="favor")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every run")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    cores = len(usable_cores())
    active, passive = {"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "PASSIVE"}
    rows = [
        ("one run alone", 1, 1, {}),
        ("one run alone", 1, cores, active),
        ("one run alone", 1, cores, passive),
        ("one run alone", 1, 0, {}),
        ("two runs at once", 2, cores, active),
        ("two runs at once", 2, cores, passive),
        ("two runs at once", 2, 1, {}),
        ("two runs at once", 2, 0, {}),
    ]
    print(f"{args.model}, {args.steps} steps, {cores} cores, env {env or 'unchanged'}")
    print("| what ran | threads per run | tokens/s per run | together | per run / alone at 1 |")
    print("|---|---|---|---|---|")
    yardstick = None
    for label, runs, threads, extra in rows:
        results = scenario(runs, threads, args.steps, args.model, {**env, **extra})
        label += f", OMP_WAIT_POLICY={extra['OMP_WAIT_POLICY']}" if extra else ""
        speeds = [r["tokens_per_s"] for r in results]
        yardstick = yardstick or speeds[0]
        shown = "0 (default: " if threads == 0 else str(threads)
        if threads == 0:
            counts = [
                f"{r['threads'].get('count')}{'->' if r['threads'].get('changes') else ''}"
                + "->".join(str(c[1]) for c in r["threads"].get("changes", []))
                for r in results
            ]
            shown += ", ".join(counts) + ")"
        per_run = ", ".join(f"{s / 1e3:.1f}k" for s in speeds)
        ratios = ", ".join(f"{s / yardstick:.2f}" for s in speeds)
        print(f"| {label} | {shown} | {per_run} | {sum(speeds) / 1e3:.1f}k | {ratios} |")


if __name__ == "__main__":
    main()
