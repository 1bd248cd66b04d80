"""The training recipe's optimiser parts (nanoGPT's and Zoology's): AdamW whose weight decay
falls on weight matrices only, and a learning rate that warms up linearly then decays along a
cosine."""

import math

import torch
from torch import nn

from harness.config.settings import DECAY_CHOICES


def no_decay_names(model: nn.Module) -> set[str]:
    """Full names of the parameters that a module marks as not to be decayed: every module
    with a `no_weight_decay()` method (the mixers: `models.mixers.base.Mixer`) names its own,
    e.g. RWKV's decay rates, bonus and token-shift mixes."""
    marked = set()
    for prefix, module in model.named_modules():
        hook = getattr(module, "no_weight_decay", None)
        if callable(hook):
            marked |= {f"{prefix}.{name}" if prefix else name for name in hook()}
    return marked


def decays(name: str, param: nn.Parameter, embeddings: set[int], marked: set[str]) -> bool:
    """A weight matrix (or a convolution's filter bank): at least 2-D, not an embedding table,
    not marked by its mixer. Norms' gains, biases and per-channel vectors are 1-D."""
    return param.ndim >= 2 and id(param) not in embeddings and name not in marked


def param_groups(model: nn.Module, weight_decay: float, decay: str = "matrices") -> list[dict]:
    """AdamW parameter groups: `decay="matrices"` puts `weight_decay` on the weight matrices
    only (`decays`) and 0 on the rest; `decay="all"` decays every parameter (an
    ablation). Each group carries `names` for inspection."""
    if decay not in DECAY_CHOICES:
        raise ValueError(f"decay={decay!r} is invalid: must be one of {', '.join(DECAY_CHOICES)}")
    embeddings = {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
    }
    marked = no_decay_names(model)
    groups = {True: ([], []), False: ([], [])}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decayed = decay == "all" or decays(name, param, embeddings, marked)
        groups[decayed][0].append(param)
        groups[decayed][1].append(name)
    return [
        {"params": params, "names": names, "weight_decay": weight_decay if decayed else 0.0}
        for decayed, (params, names) in groups.items()
        if params
    ]


def adamw(
    model: nn.Module, lr: float, weight_decay: float, decay: str = "matrices", fused: bool = True
) -> torch.optim.AdamW:
    """AdamW over `param_groups(model, weight_decay, decay)`. `fused`: one kernel updates every
    parameter (the default model on one CPU thread: 0.3 ms per step instead of 0.9 for
    torch's per-parameter loop), the same update up to float rounding; Lightning refuses to
    clip the gradients of a fused optimiser under mixed precision (it unscales them itself)."""
    return torch.optim.AdamW(param_groups(model, weight_decay, decay), lr=lr, fused=fused)


def lr_factor(
    step: int, total_steps: int, warmup_steps: int, min_ratio: float, schedule: str = "cosine"
) -> float:
    """The learning rate at optimiser step `step` (0-based) as a fraction of the peak:

        warm-up, step < W:      (step + 1) / W
        cosine, W <= step:      m + (1 - m) (1 + cos(pi p)) / 2,   p = (step - W) / (S - W)
        constant, W <= step:    1

    with W = warmup_steps, S = total_steps, m = min_ratio; p is clipped to [0, 1], so the rate
    reaches m * peak at the last step and stays there if training runs on."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int,
    min_ratio: float,
    schedule: str = "cosine",
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step scheduler following `lr_factor`."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps, warmup_steps, min_ratio, schedule)
    )
