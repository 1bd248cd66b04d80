"""The `lightning` section: one training step under Lightning (the harness's `RecallModule`)
against a bare torch loop on the same model, batch and optimizer."""

import copy
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from harness.training.lightning_module import RecallModule
from harness.training.quiet_trainer import quiet_trainer
from models.backbone import LanguageModel
from studies.bench.settings import Settings
from studies.measure import quiet_lightning, sync
from tasks import IGNORE, build_task


class RepeatBatch(Dataset):
    """One batch, `times` times (a DataLoader with batch_size=None yields it as is)."""

    def __init__(self, batch: dict[str, torch.Tensor], times: int) -> None:
        self.batch, self.times = batch, times

    def __len__(self) -> int:
        return self.times

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.batch


class StepTimer(L.Callback):
    """Wall time from the start of training step `first` to the end of step `last`."""

    def __init__(self, device: torch.device, first: int, last: int) -> None:
        self.device, self.first, self.last = device, first, last
        self.t0 = self.t1 = 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx: int) -> None:  # noqa: ANN001
        if batch_idx == self.first:
            sync(self.device)
            self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, out, batch, batch_idx: int) -> None:  # noqa: ANN001
        if batch_idx == self.last:
            sync(self.device)
            self.t1 = time.perf_counter()


def lightning_rows(s: Settings, seq_len: int = 64, batch_size: int = 64) -> list[dict]:
    """Per-step time of N training steps under Lightning and in a bare torch loop: same
    softmax model (d_model 64, 2 layers), same fixed MQAR batch, AdamW, same device; runs
    alternate (bare, Lightning, bare, Lightning), the faster of each kind counts."""
    task = build_task("assoc_recall", seq_len=seq_len)
    data = task.generate(batch_size, seed=0)
    batch = {key: torch.from_numpy(data[key]) for key in ("inputs", "labels")}
    lr, wd, steps, warm = 2e-3, 0.1, s.lightning_steps, s.lightning_warmup
    loader = DataLoader(RepeatBatch(batch, steps), batch_size=None)  # the same batch, N times
    torch.manual_seed(0)
    model = LanguageModel(task.vocab_size, seq_len, "softmax", {"n_heads": 2}, d_model=64)
    model = model.to(s.device)
    init = copy.deepcopy(model.state_dict())

    def bare() -> float:
        model.load_state_dict(init)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
        for i, cpu_batch in enumerate(loader):
            if i == warm:
                sync(s.device)
                t0 = time.perf_counter()
            b = {key: x.to(s.device) for key, x in cpu_batch.items()}
            logits = model(b["inputs"])
            loss = F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync(s.device)
        return (time.perf_counter() - t0) / (steps - warm)

    def lightning() -> float:
        model.load_state_dict(init)
        timer = StepTimer(s.device, warm, steps - 1)
        with quiet_lightning():
            trainer = quiet_trainer(
                accelerator=s.device.type,
                devices=1,
                max_steps=steps,
                limit_val_batches=0,
                callbacks=[timer],
            )
            trainer.fit(RecallModule(model, lr, wd, [seq_len]), train_dataloaders=loader)
        return (timer.t1 - timer.t0) / (steps - warm)

    results: dict[str, list[float]] = {"bare torch loop": [], "lightning": []}
    for _ in range(2):
        results["bare torch loop"].append(bare())
        results["lightning"].append(lightning())
    base = min(results["bare torch loop"])
    return [
        {
            "loop": kind,
            "ms_per_step": round(1e3 * min(times), 2),
            "runs_ms": " / ".join(f"{1e3 * t:.1f}" for t in times),
            "timed_steps": steps - warm,
            "vs_bare_pct": round(100 * (min(times) / base - 1), 1),
        }
        for kind, times in results.items()
    ]
