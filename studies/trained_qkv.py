"""Queries, keys and values of a small softmax model trained on MQAR through the harness: the
inputs a feature map meets in practice, for the approximation study."""

import time

import torch

from harness.training.data_module import TaskDataModule
from harness.training.lightning_module import RecallModule
from harness.training.quiet_trainer import quiet_trainer
from models.backbone import LanguageModel
from studies.measure import quiet_lightning
from studies.reference import HEAD_DIM
from tasks import build_task


def trained_qkv(seconds: float, steps: int, seed: int = 0) -> tuple[tuple, dict]:
    """Train a softmax model (d_model 64, 2 heads of HEAD_DIM) on MQAR with the harness
    (RecallModule + TaskDataModule + Lightning), stopping at `steps` or `seconds`; return the
    last layer's q, k, v on validation examples, one sequence per (example, head):
    [N * H, T, head_dim] in float64, and a summary of the training."""
    task = build_task("assoc_recall", vocab_size=64, seq_len=48, num_kv_pairs=6)
    torch.manual_seed(seed)
    model = LanguageModel(
        task.vocab_size, task.seq_len, "softmax", {"n_heads": 2}, d_model=2 * HEAD_DIM
    )
    data = TaskDataModule(task, 20000, 256, 64, batch_size=64, seed=seed)
    module = RecallModule(model, lr=2e-3, weight_decay=0.1, test_seq_lens=[task.seq_len])
    start = time.perf_counter()
    with quiet_lightning():
        trainer = quiet_trainer(
            accelerator="cpu",
            max_steps=steps,
            max_time={"seconds": seconds},
            val_check_interval=min(100, steps),
            check_val_every_n_epoch=None,
        )
        trainer.fit(module, datamodule=data)
        trainer.validate(module, datamodule=data, verbose=False)
    captured = {}
    mixer = model.blocks[-1].mixer
    hook = mixer.register_forward_hook(lambda m, args, out: captured.update(x=args[0]))
    model.eval()
    with torch.no_grad():
        model(data.splits["val"].parts[0]["inputs"][:32])
        q, k, v = (t.flatten(0, 1).double() for t in mixer.split_heads(captured["x"]))
    hook.remove()
    info = {
        "steps": trainer.global_step,
        "train_s": round(time.perf_counter() - start, 1),
        "val_acc": round(float(module.val_results.get("val/acc", float("nan"))), 3),
        "mean_norm_q'": round(float((q.norm(dim=-1) * HEAD_DIM**-0.25).mean()), 2),
        "mean_norm_k'": round(float((k.norm(dim=-1) * HEAD_DIM**-0.25).mean()), 2),
    }
    return (q, k, v), info
