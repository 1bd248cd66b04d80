"""The training step of the reference-layer mixers against softmax, in one process, and what
their own convolutions cost (docs/performance.md, "The reference layers").

    python -m studies.bench.reference_layers [--seq-lens 64,1024] [--block zoology] [--reps 7]

Each row is one mixer, optionally with Hydra overrides of its model (`model.conv_size=0`: the
mixer without its own convolution, the block's shared one back), built and stepped as the
`step` section does (`studies.bench.train_step`: the model `python run.py` trains, 4,096
tokens a step, steps of every row interleaved, the median step on the process's CPU clock,
one thread). Printed: tokens/s and the ratio to softmax in the same run.
"""

import argparse
import statistics

import torch

from studies.bench.settings import Settings
from studies.bench.train_step import make_cell, repeat_steps, warmed_up
from studies.threads import torch_threads

ROWS = [
    ("softmax", []),
    ("deltanet", []),
    ("deltanet", ["model.conv_size=0"]),
    ("gated_deltanet", []),
    ("gated_deltanet", ["model.conv_size=0"]),
    ("mamba2", []),
    ("mamba2", ["model.conv_size=0"]),
    ("gla", []),
    ("gla", ["model.conv_size=0"]),
    ("linear", []),
]


def rows_at(T: int, block: str, reps: int) -> list[dict]:
    """Every row of ROWS at length T: tokens/s and the ratio to softmax's step."""
    cells = []
    for name, overrides in ROWS:
        s = Settings(torch.device("cpu"), [T], clock="cpu", step_reps=reps)
        s.step_overrides = overrides
        cells.append(warmed_up(make_cell(name, T, s, block), s))
    repeat_steps(cells, s)
    seconds = [statistics.median(c.times) for c in cells]
    batch = cells[0].tokens.shape[0]
    return [
        {
            "mixer": name + "".join(f" {o}" for o in overrides),
            "T": T,
            "tokens_per_s": round(batch * T / sec),
            "vs_softmax": round(seconds[0] / sec, 2),
            "ms_per_step": round(1e3 * sec, 1),
        }
        for (name, overrides), sec in zip(ROWS, seconds, strict=True)
    ]


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m studies.bench.reference_layers")
    p.add_argument("--seq-lens", default="64,1024")
    p.add_argument("--block", default="zoology", help="conf/backbone/<name>.yaml")
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    rows = []
    with torch_threads(1):
        for T in (int(t) for t in args.seq_lens.split(",")):
            rows += rows_at(T, args.block, args.reps)
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return rows


if __name__ == "__main__":
    main()
