"""The benchmark's settings: shapes, lengths, time and memory budgets."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from studies.measure import CLOCKS


@dataclass
class Settings:
    device: torch.device
    seq_lens: list[int]
    batch: int = 16
    heads: int = 2
    head_dim: int = 32
    chunk_size: int = 64
    clock: str = "wall"  # or "cpu": the process's CPU time (studies.measure.CLOCKS)
    max_call_s: float = 20.0  # skip a cell whose one forward+backward is estimated longer
    single_shot_s: float = 2.0  # above this estimate: no warm-up, one timed call
    cell_budget_s: float = 1.5  # timed repetitions stop once they add up to this
    max_reps: int = 3
    mem_fraction: float = 0.5  # skip a cell estimated to need more of the free memory
    decode_steps: int = 20
    decode_prefill_s: float = 10.0  # skip stepping a mixer to T if estimated longer
    task_tokens: int = 2_000_000
    lightning_steps: int = 60
    lightning_warmup: int = 10
    matmul_n: int = 2048
    # the training step of the default language model
    step_seq_lens: list[int] = field(default_factory=lambda: [64, 256, 1024, 4096])
    step_tokens: int = 4096  # tokens per optimiser step, at every T
    step_reps: int = 7  # timed steps per mixer and T (after one warm-up step)
    step_budget_s: float = 60.0  # per T, stop repeating once exceeded
    step_threads: int = 1
    step_blocks: list[str] = field(default_factory=lambda: ["default", "zoology"])  # conf/backbone
    step_overrides: list[str] = field(default_factory=list)  # Hydra overrides of the model
    compile: bool = False  # torch.compile every model of the training-step section

    @property
    def timer(self) -> Callable[[], float]:
        return CLOCKS[self.clock]

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim


def quick_settings(s: Settings) -> Settings:
    """The tiny version used by the tests: T = 64, 128, few repetitions."""
    s.seq_lens, s.max_call_s = [64, 128], math.inf  # every cell runs
    s.max_reps, s.cell_budget_s, s.decode_steps = 2, 0.5, 3
    s.task_tokens, s.lightning_steps, s.lightning_warmup, s.matmul_n = 100_000, 8, 3, 512
    s.step_seq_lens, s.step_tokens, s.step_reps = [32, 64], 256, 2
    return s
