"""The `step` section: the training step users run. Tokens/s of one optimiser step (forward +
backward + AdamW) of the default language model for every registered mixer, with the number
of tokens per step held fixed (batch = tokens / T), as a ratio to softmax measured in the
same run, and the peak memory of a step. One more row, NO_MIXER, is the same model with every
mixer replaced by the identity: the rest of the model alone, the ceiling of any mixer's ratio.

The model is what `python run.py model=<name>` trains: `conf/config.yaml` composed by Hydra
(its `backbone` and `optim` keys, the default task's vocabulary, the `model=<name>` option),
plus `Settings.step_overrides`, with the run's optimiser (`harness.training.optimizer.adamw`; the
run also clips gradients, left out here). Steps of every mixer at one T are interleaved (one step of
each, repeated), so that a change of machine load during the run slows every mixer alike;
each mixer's time is its median step, on the wall clock or (`--clock cpu`) the process's CPU
time. Peak memory: the rise of the process's peak RSS over the first timed step, after a
warm-up step that allocated AdamW's moments.
"""

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from harness.config.compose import compose_config
from harness.config.hashing import params_of
from harness.training.optimizer import adamw
from models import MIXERS
from models.backbone import LanguageModel
from models.registry import REFERENCE
from studies.bench.settings import Settings
from studies.bench.step_flops import step_flops
from studies.measure import PeakMemory, sync
from studies.threads import torch_threads

NO_MIXER = "(no mixer)"  # the model with every mixer an identity: the ceiling of any ratio


def composed_config(model: str, overrides: list[str]) -> DictConfig:
    """The config of `python run.py model=<model> <overrides>`."""
    return compose_config([f"model={model}", "logger=none", *overrides])


@dataclass
class StepCell:
    """One mixer at one T: its model, optimiser, fixed batch, and measured step times."""

    name: str
    model: LanguageModel
    optimizer: torch.optim.Optimizer
    tokens: torch.Tensor
    labels: torch.Tensor
    times: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    flops: int = 0  # of the matrix products of one forward + backward (`step_flops`)
    first_step_s: float = 0.0  # wall time of the warm-up step (with torch.compile: compiling)
    block: str = "default"  # the backbone (conf/backbone/<block>.yaml)

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(self.tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), self.labels.flatten())
        loss.backward()
        self.optimizer.step()

    def timed_step(self, device: torch.device, clock: Callable[[], float]) -> None:
        sync(device)
        t0 = clock()
        self.step()
        sync(device)
        self.times.append(clock() - t0)


def make_cell(name: str, T: int, s: Settings, block: str = "default") -> StepCell:
    """The default model with mixer `name` (or NO_MIXER) for length T, AdamW as configured, a
    batch of `s.step_tokens // T` random token sequences (every position labelled)."""
    model_name = REFERENCE if name == NO_MIXER else name
    cfg = composed_config(model_name, [f"backbone={block}", *s.step_overrides])
    torch.manual_seed(cfg.seed)
    model = LanguageModel(
        vocab_size=cfg.task.vocab_size,
        max_seq_len=T,
        mixer=cfg.model.name,
        mixer_params=params_of(cfg.model),
        **cfg.backbone,
    )
    if name == NO_MIXER:
        for layer in model.blocks:
            layer.mixer = torch.nn.Identity()
    batch = max(1, s.step_tokens // T)
    g = torch.Generator().manual_seed(T)
    tokens = torch.randint(0, cfg.task.vocab_size, (batch, T + 1), generator=g)
    flops = step_flops(model.train(), tokens[:, :-1], tokens[:, 1:])  # on the CPU: same count
    model.zero_grad(set_to_none=True)
    model.to(s.device)
    if s.compile:
        model.compile()
    optimizer = adamw(model, cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.decay)
    tokens = tokens.to(s.device)
    return StepCell(name, model, optimizer, tokens[:, :-1], tokens[:, 1:], flops=flops, block=block)


def step_rows(s: Settings) -> list[dict]:
    """Rows (block, mixer, T): tokens/s of a step, ratio to softmax in the same block
    (`backbone=<block>`: the default block and Zoology's), ms per step, the step's counted
    FLOPs (`step_flops`), the FLOP/s it reached, softmax's count over its own (the ratio at
    softmax's FLOP/s: what the math allows), peak memory."""
    with torch_threads(s.step_threads):
        return [row for T in s.step_seq_lens for row in rows_at(T, s)]


def rows_at(T: int, s: Settings) -> list[dict]:
    """Every mixer at T. Eager models step in turn (interleaved); compiled ones one after the
    other, each alone with a fresh dynamo cache (instances of one model class share compiled
    code, and steps of several compiled models interleaved were measured 20x slow)."""
    names = [(block, name) for block in s.step_blocks for name in [*MIXERS.names(), NO_MIXER]]
    if s.compile:
        cells = []
        for block, name in names:
            torch._dynamo.reset()
            cells.append(warmed_up(make_cell(name, T, s, block), s))
            repeat_steps([cells[-1]], s)
    else:
        cells = [warmed_up(make_cell(name, T, s, block), s) for block, name in names]
        repeat_steps(cells, s)
    print(f"  step T={T}: done", file=sys.stderr, flush=True)
    seconds = {(c.block, c.name): statistics.median(c.times) for c in cells}
    reference = {c.block: c for c in cells if c.name == REFERENCE}
    batch = cells[0].tokens.shape[0]
    return [
        {
            "block": cell.block,
            "mixer": cell.name,
            "T": T,
            "batch": batch,
            "tokens_per_s": round(batch * T / seconds[key(cell)]),
            "vs_softmax": round(seconds[key(reference[cell.block])] / seconds[key(cell)], 2),
            "ms_per_step": round(1e3 * seconds[key(cell)], 1),
            "gflop_per_step": round(cell.flops / 1e9, 2),
            "gflop_per_s": round(cell.flops / 1e9 / seconds[key(cell)], 1),
            "flop_bound_vs_softmax": round(reference[cell.block].flops / cell.flops, 2),
            "steps": len(cell.times),
            "peak_mem_mb": None if cell.peak_bytes is None else round(cell.peak_bytes / 2**20, 1),
            "first_step_s": round(cell.first_step_s, 2),
        }
        for cell in cells
    ]


def key(cell: StepCell) -> tuple[str, str]:
    return cell.block, cell.name


def warmed_up(cell: StepCell, s: Settings) -> StepCell:
    """A warm-up step (AdamW's moments, a compiled graph), then one timed step whose peak
    memory is measured."""
    t0 = time.perf_counter()
    cell.step()
    cell.first_step_s = time.perf_counter() - t0
    memory = PeakMemory(s.device)
    memory.start()
    cell.timed_step(s.device, s.timer)
    cell.peak_bytes = memory.stop()
    return cell


def repeat_steps(cells: list[StepCell], s: Settings) -> None:
    """One timed step of each cell in turn, until `step_reps` each or the time budget."""
    started = time.perf_counter()
    while len(cells[0].times) < s.step_reps and time.perf_counter() - started < s.step_budget_s:
        for cell in cells:
            cell.timed_step(s.device, s.timer)
