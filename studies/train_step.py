"""The training step users run: tokens/s of forward + backward + AdamW for every registered
mixer in the default language model (the composed Hydra defaults: `conf/config.yaml`'s
`backbone`, `optim`, the default task's vocabulary and each `conf/model/<name>.yaml`), with
the number of tokens per step held fixed, as a ratio to softmax measured in the same run.

Steps of every mixer at one T are interleaved (one step of each, repeated), so that a change
of machine load during the run affects every mixer alike; each mixer's time is the median.
Peak memory: the rise of the process's peak RSS over one step after the warm-up step (which
allocated AdamW's moments), as in the kernel section.
"""

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness.results import params_of
from models import MIXERS
from models.backbone import LanguageModel
from studies.bench import PeakMemory, sync

CONF = Path(__file__).resolve().parents[1] / "conf"
REFERENCE = "softmax"


def composed_config(model: str = REFERENCE) -> DictConfig:
    """The run config a user gets with `python run.py model=<model>` (no other override)."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=[f"model={model}", "logger=none"])


def default_model(name: str, seq_len: int, device: torch.device) -> LanguageModel:
    cfg = composed_config(name)
    torch.manual_seed(0)
    model = LanguageModel(
        vocab_size=cfg.task.vocab_size,
        max_seq_len=seq_len,
        mixer=name,
        mixer_params=params_of(cfg.model),
        **cfg.backbone,
    )
    return model.to(device).train()


@dataclass
class StepCell:
    """One mixer at one T: its model, optimiser, batch and the measured step times."""

    name: str
    model: LanguageModel
    optimizer: torch.optim.Optimizer
    tokens: torch.Tensor
    labels: torch.Tensor
    times: list
    peak_bytes: int | None = None

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(self.tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), self.labels.flatten())
        loss.backward()
        self.optimizer.step()


def make_cell(name: str, T: int, batch: int, device: torch.device) -> StepCell:
    cfg = composed_config(name)
    model = default_model(name, T, device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
    )
    g = torch.Generator().manual_seed(T)
    tokens = torch.randint(0, cfg.task.vocab_size, (batch, T + 1), generator=g).to(device)
    return StepCell(name, model, optimizer, tokens[:, :-1], tokens[:, 1:], [])


def train_step_rows(
    device: torch.device,
    seq_lens: list[int],
    tokens_per_step: int = 4096,
    reps: int = 5,
    budget_s: float = 30.0,
    names: list[str] | None = None,
) -> list[dict]:
    """Rows (mixer, T): tokens/s of one optimiser step, ratio to softmax, peak memory."""
    names = names or MIXERS.names()
    rows = []
    for T in seq_lens:
        batch = max(1, tokens_per_step // T)
        cells = [make_cell(name, T, batch, device) for name in names]
        for cell in cells:  # warm-up (AdamW state), then one step measured for memory
            cell.step()
            memory = PeakMemory(device)
            memory.start()
            t0 = time.perf_counter()
            cell.step()
            sync(device)
            cell.times.append(time.perf_counter() - t0)
            cell.peak_bytes = memory.stop()
        started = time.perf_counter()
        for _ in range(reps - 1):
            if time.perf_counter() - started > budget_s:
                break
            for cell in cells:
                sync(device)
                t0 = time.perf_counter()
                cell.step()
                sync(device)
                cell.times.append(time.perf_counter() - t0)
        seconds = {cell.name: statistics.median(cell.times) for cell in cells}
        for cell in cells:
            tps = batch * T / seconds[cell.name]
            ref = batch * T / seconds[REFERENCE] if REFERENCE in seconds else None
            rows.append(
                {
                    "mixer": cell.name,
                    "T": T,
                    "batch": batch,
                    "tokens_per_s": round(tps),
                    "vs_softmax": round(tps / ref, 2) if ref else None,
                    "ms_per_step": round(1e3 * seconds[cell.name], 1),
                    "steps": len(cell.times),
                    "peak_mem_mb": None
                    if cell.peak_bytes is None
                    else round(cell.peak_bytes / 2**20, 1),
                }
            )
        del cells
    return rows


if __name__ == "__main__":
    import sys

    from harness.tables import print_table
    from studies.threads import torch_threads

    Ts = [int(t) for t in (sys.argv[1] if len(sys.argv) > 1 else "64,256,1024,4096").split(",")]
    print(open("/proc/loadavg").read())
    with torch_threads(1):
        rows = train_step_rows(torch.device("cpu"), Ts)
    print(open("/proc/loadavg").read())
    for value in ("vs_softmax", "tokens_per_s", "peak_mem_mb"):
        table: dict = {}
        for r in rows:
            table.setdefault(r["mixer"], {"mixer": r["mixer"]})[f"T={r['T']}"] = r[value]
        print(value)
        print_table(list(table.values()))
