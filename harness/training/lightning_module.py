"""LightningModule: next-token cross-entropy on labelled positions, recall accuracy metrics."""

import lightning as L
import torch
import torch.distributed as dist
import torch.nn.functional as F

from harness.records.failures import Diverged
from harness.training.metrics import RecallAccuracy
from harness.training.optimizer import adamw, warmup_cosine
from models.backbone import LanguageModel
from models.mixers.base import DenominatorCollapse
from tasks import IGNORE


class RecallModule(L.LightningModule):
    """Trains `model` on cross-entropy over positions whose label is not -100, with fused AdamW
    (weight decay on `decay` parameters: `harness.training.optimizer.adamw`) and a per-step learning
    rate: linear warm-up over `warmup_fraction` of the trainer's `max_steps`, then `schedule`
    (cosine decay to `min_lr_ratio * lr`, or constant; `harness.training.optimizer.lr_factor`).
    Gradient clipping is the trainer's (`gradient_clip_val`, set from `optim.grad_clip`).

    Validation logs `val/acc`, `val/seq_acc`; test computes, per test length, `acc`,
    `seq_acc` and sliced accuracies into `self.test_results` (the first length is the
    training length and gives the unsuffixed `test/*` keys)."""

    def __init__(
        self,
        model: LanguageModel,
        lr: float,
        weight_decay: float,
        test_seq_lens: list[int],
        decay: str = "matrices",
        schedule: str = "cosine",
        warmup_fraction: float = 0.05,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__()
        self.model, self.lr, self.weight_decay = model, lr, weight_decay
        self.decay, self.schedule = decay, schedule
        self.warmup_fraction, self.min_lr_ratio = warmup_fraction, min_lr_ratio
        self.test_seq_lens = test_seq_lens
        self.test_results: dict[str, float] = {}
        self.val_results: dict[str, float] = {}

    def _logits_and_loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(batch["inputs"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)
        return logits, loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        try:
            _, loss = self._logits_and_loss(batch)
        except DenominatorCollapse as error:
            raise Diverged(str(error), self.global_step) from error
        if not torch.isfinite(loss):
            raise Diverged(f"training loss is {loss.item()}", self.global_step)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.val_metrics = RecallAccuracy()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits, loss = self._logits_and_loss(batch)
        self.val_metrics.update(logits.argmax(-1), batch)
        self.log("val/loss", loss, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        results = self._gathered(self.val_metrics).compute()
        self.val_results = {"val/acc": results["acc"], "val/seq_acc": results["seq_acc"]}
        self.log_dict(self.val_results, prog_bar=True, sync_dist=True)

    def on_test_epoch_start(self) -> None:
        self.test_metrics = [RecallAccuracy() for _ in self.test_seq_lens]

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        logits, _ = self._logits_and_loss(batch)
        self.test_metrics[dataloader_idx].update(logits.argmax(-1), batch)

    def on_test_epoch_end(self) -> None:
        results = {}
        for index, (seq_len, metrics) in enumerate(
            zip(self.test_seq_lens, self.test_metrics, strict=True)
        ):
            computed = self._gathered(metrics).compute()
            results[f"test/acc_by/seq_len/{seq_len}"] = computed["acc"]
            if index == 0:
                results.update({f"test/{key}": value for key, value in computed.items()})
        self.test_results = results
        self.log_dict(results, sync_dist=True)

    def _gathered(self, metrics: RecallAccuracy) -> RecallAccuracy:
        """Under DDP, the counts of every rank merged: each rank evaluated its own shard of
        the split (`harness.training.data_module`), so the sums are exactly one process's counts.
        Every rank
        then holds the same metrics (their `sync_dist` mean when logged changes nothing)."""
        if not (dist.is_available() and dist.is_initialized()):
            return metrics
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, dict(metrics.counts))
        merged = RecallAccuracy()
        for counts in everyone:
            merged.merge(counts)
        return merged

    def configure_optimizers(self) -> dict:
        mixed = "mixed" in str(self.trainer.precision)  # fused AdamW: no clipping there
        optimizer = adamw(self.model, self.lr, self.weight_decay, self.decay, fused=not mixed)
        total = max(1, int(self.trainer.max_steps))  # -1 (no step budget): warm-up only
        warmup = round(self.warmup_fraction * total)
        scheduler = warmup_cosine(optimizer, total, warmup, self.min_lr_ratio, self.schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
