"""Recall accuracy over labelled positions, whole-example exact match, and sliced accuracy."""

from collections import defaultdict

import torch

from tasks import IGNORE

RESERVED = ("inputs", "labels")


class RecallAccuracy:
    """Accumulates counts over batches, then reports

    - `acc`: labelled tokens predicted right / labelled tokens (micro average),
    - `seq_acc`: examples with every labelled token right / examples with a label,
    - `acc_by/<slice>/<value>`: `acc` restricted to positions whose slice has that value; a
      slice is any other batch key, per example [B] or per position [B, T] (-1 = no value).
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])

    def update(self, preds: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        labels = batch["labels"]
        scored = labels != IGNORE
        correct = (preds == labels) & scored
        self._add("acc", 0, correct.sum(), scored.sum())
        has_label = scored.any(dim=1)
        all_right = (correct.sum(dim=1) == scored.sum(dim=1)) & has_label
        self._add("seq_acc", 0, all_right.sum(), has_label.sum())
        for name, values in batch.items():
            if name in RESERVED:
                continue
            per_position = values if values.dim() == 2 else values[:, None].expand_as(labels)
            keep = scored & (per_position >= 0)
            keys, inverse = torch.unique(per_position[keep], return_inverse=True)
            hits = torch.bincount(inverse, weights=correct[keep].float(), minlength=len(keys))
            totals = torch.bincount(inverse, minlength=len(keys))
            for key, hit, total in zip(keys.tolist(), hits.tolist(), totals.tolist(), strict=True):
                self._add(f"acc_by/{name}", key, hit, total)

    def _add(self, name: str, value: int, hits, total) -> None:
        entry = self.counts[(name, value)]
        entry[0] += int(hits)
        entry[1] += int(total)

    def merge(self, counts: dict[tuple[str, int], list[int]]) -> None:
        """Add another accumulator's `counts` (e.g. another DDP rank's)."""
        for key, (hits, total) in counts.items():
            self._add(*key, hits, total)

    def compute(self) -> dict[str, float]:
        out = {}
        for (name, value), (hits, total) in sorted(self.counts.items()):
            key = name if name in ("acc", "seq_acc") else f"{name}/{value}"
            out[key] = hits / total if total else float("nan")
        return out
