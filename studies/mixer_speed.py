"""The training step of chosen mixers against softmax, and each chunk form against its step loop:
`python -m studies.mixer_speed [--mixers kda,rwkv7,...] [--seq-lens 64,1024] [--batch 16]`.

One process, torch threads 1 (`--threads`). The model is `python run.py model=<name>`'s
language model (conf/config.yaml: backbone d_model 64, 2 layers; the default task's
vocabulary; the `model=<name>` option), built for length T. A step is forward + cross-entropy +
backward on a fixed batch of random tokens (`--batch`, default 16), no optimiser. At each T
the cells step in turn (one step of each, repeated `--reps` times after a warm-up step), so
that a change of machine load slows every cell alike; a cell's time is its median step, by
the process's CPU time (`--clock cpu`, the default: robust to other processes on a shared
machine, with one thread) or the wall clock.

Printed: per T, each mixer's tokens/s and its ratio to softmax's (softmax = 1); at the
`--recurrent-at` length, the same mixer with `mode="recurrent"` (the step loop, the
specification) and the chunk form's speed-up over it, the chunk cells stepped again in turn
with the step loops (`--recurrent-reps` steps each, so that the ratio is of one stretch of
machine load); with `--floor`, also the model whose
recurrence is a zero-cost stand-in (`STAND_INS`, `stand_in`): the speed-up over the step loop
that no chunk form of that recurrence can pass, the rest of the model's cost. With `--layer`,
each cell is the mixer alone as the model builds it (d_model 64, its projections, convs, norms
and gates), a step forward and backward of the sum of its output's squares over random
inputs: the chunk form against the step loop without the rest of the model."""

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from unittest import mock

import torch
import torch.nn.functional as F

from harness.config.compose import compose_config
from harness.config.hashing import params_of
from models.backbone import LanguageModel
from models.registry import REFERENCE, build_mixer
from studies.threads import torch_threads

DEFAULT_MIXERS = ("kda", "rwkv7", "gated_deltaproduct", "log_linear_mamba2")
STAND_INS = {
    "kda": "models.mixers.kda.kda_rule",
    "rwkv7": "models.mixers.rwkv7.gated_dplr",
    "gated_deltaproduct": "models.mixers.gated_deltaproduct.gated_delta_rule",
}
"""The recurrence each mixer calls, by its import in the mixer's module (`--floor`)."""


def stand_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *rest, **_) -> torch.Tensor:
    """A recurrence that costs nothing: o = v, every other input added times 0 (its mean), so
    that the backward still reaches all of them and the layers that made them."""
    touched = sum(t.mean() for t in (q, k, *rest) if isinstance(t, torch.Tensor))
    return v + 0 * touched


@dataclass
class Cell:
    """One model at one T: its fixed batch and measured step times."""

    label: str
    model: torch.nn.Module
    tokens: torch.Tensor
    labels: torch.Tensor | None  # None: a mixer alone, whose loss is its output's squares
    times: list[float] = field(default_factory=list)
    patch: str | None = None  # a recurrence replaced by `stand_in` while this cell steps

    def step(self) -> None:
        if self.patch is not None:
            with mock.patch(self.patch, stand_in):
                return self._step()
        return self._step()

    def _step(self) -> None:
        self.model.zero_grad(set_to_none=True)
        out = self.model(self.tokens)
        if self.labels is None:
            return out.square().sum().backward()
        F.cross_entropy(out.flatten(0, 1), self.labels.flatten()).backward()

    def timed_step(self, clock: Callable[[], float]) -> None:
        t0 = clock()
        self.step()
        self.times.append(clock() - t0)

    def tokens_per_s(self) -> float:
        return self.tokens.shape[0] * self.tokens.shape[1] / statistics.median(self.times)


def make_cell(
    name: str,
    T: int,
    batch: int,
    mode: str | None = None,
    floor: bool = False,
    layer: bool = False,
) -> Cell:
    """The default language model with mixer `name` (mode overridden if given; with `floor`
    its recurrence replaced by `stand_in`), seed 0, and a batch of random tokens (every
    position labelled); with `layer`, the mixer alone on random inputs of width d_model."""
    cfg = compose_config([f"model={name}", "logger=none"])
    params = params_of(cfg.model)
    if mode is not None:
        params["mode"] = mode
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(T)
    label = name if mode is None else f"{name} ({mode})"
    patch = STAND_INS[name] if floor else None
    if layer:
        d_model = cfg.backbone.d_model
        mixer = build_mixer(cfg.model.name, d_model=d_model, **params).train()
        x = torch.randn(batch, T, d_model, generator=g, requires_grad=True)
        return Cell(label, mixer, x, None, patch=patch)
    model = LanguageModel(cfg.task.vocab_size, T, cfg.model.name, params, **cfg.backbone).train()
    tokens = torch.randint(0, cfg.task.vocab_size, (batch, T + 1), generator=g)
    return Cell(label, model, tokens[:, :-1], tokens[:, 1:], patch=patch)


def time_cells(cells: list[Cell], reps: int, clock: Callable[[], float]) -> None:
    for cell in cells:
        cell.step()  # warm-up
    for _ in range(reps):
        for cell in cells:
            cell.timed_step(clock)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=",".join(DEFAULT_MIXERS))
    parser.add_argument("--seq-lens", default="64,1024")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5, help="timed steps per cell")
    parser.add_argument("--recurrent-at", type=int, default=1024, help="T of chunk vs step loop")
    parser.add_argument("--recurrent-reps", type=int, default=2)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also each mixer of STAND_INS with its recurrence a zero-cost stand-in",
    )
    parser.add_argument(
        "--layer", action="store_true", help="time the mixer alone, not the language model"
    )
    args = parser.parse_args()
    build = functools.partial(make_cell, batch=args.batch, layer=args.layer)
    mixers = [m for m in args.mixers.split(",") if m]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu counts one thread's time: use --threads 1")
    with torch_threads(args.threads):
        for T in map(int, args.seq_lens.split(",")):
            cells = [build(name, T) for name in [REFERENCE, *mixers]]
            time_cells(cells, args.reps, clock)
            reference = cells[0].tokens_per_s()
            print(f"\nT = {T}, batch {args.batch}, {args.reps} steps each ({args.clock} clock)")
            print("| mixer | tokens/s | vs softmax |")
            print("|---|---|---|")
            for cell in cells:
                rate = cell.tokens_per_s()
                print(f"| {cell.label} | {rate:,.0f} | {rate / reference:.2f} |", flush=True)
            if args.recurrent_at != T:
                continue
            loops = [build(name, T, mode="recurrent") for name in mixers]
            floored = [name for name in mixers if args.floor and name in STAND_INS]
            floors = {name: build(name, T, floor=True) for name in floored}
            for cell in cells[1:]:
                cell.times.clear()
            time_cells(cells[1:] + loops + list(floors.values()), args.recurrent_reps, clock)
            print(f"\nT = {T}: chunk form against the step loop (mode='recurrent')")
            head = "| mixer | chunk tokens/s | recurrent tokens/s | chunk / recurrent |"
            rule = "|---|---|---|---|"
            if floors:
                head += " stand-in tokens/s | stand-in / recurrent |"
                rule += "---|---|"
            print(head)
            print(rule)
            for chunk, loop, name in zip(cells[1:], loops, mixers, strict=True):
                a, b = chunk.tokens_per_s(), loop.tokens_per_s()
                row = f"| {chunk.label} | {a:,.0f} | {b:,.0f} | {a / b:.1f}x |"
                if floors:
                    f = floors[name].tokens_per_s() if name in floors else None
                    row += " - | - |" if f is None else f" {f:,.0f} | {f / b:.1f}x |"
                print(row, flush=True)


if __name__ == "__main__":
    main()
