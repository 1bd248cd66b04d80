"""The floating-point work of one training step, counted, so that a mixer's speed can be read
against what its math allows.

`step_flops` runs one forward + backward under torch's `FlopCounterMode`, which counts the
matrix products (mm, bmm, addmm, baddbmm, convolutions) that actually execute; elementwise
work (norms, activations, the loss, AdamW) is not counted. Softmax attention on the CPU runs
as one fused op that the counter does not know: it is counted here as its math requires,
causal: the pairs s <= t only, T (T + 1) / 2 per head, d + d_v multiply-adds each (q.k and
the weighted sum of v) forward, and twice that backward (dq, dk, dv and the weights' gradient).

Two models at the same efficiency (FLOP/s) step in the ratio of their counts: softmax's count
over a mixer's is the speed-up its math allows at softmax's efficiency (README, "How fast").
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten


def causal_attention_flops(query: torch.Size, value: torch.Size, is_causal: bool) -> int:
    """Forward FLOPs of softmax attention for q [B, H, T, d], v [B, H, T, d_v]: q.k over the
    pairs it scores and the weights' product with v, 2 FLOPs per multiply-add."""
    B, H, T, d = query
    pairs = T * (T + 1) // 2 if is_causal else T * T
    return 2 * B * H * pairs * (d + value[-1])


def _sdpa_cpu_forward(query, key, value, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
    return causal_attention_flops(query, value, is_causal)


def _sdpa_cpu_backward(
    grad_out, query, key, value, out, lse, dropout_p, is_causal, *a, **kw
) -> int:
    return 2 * causal_attention_flops(query, value, is_causal)


FUSED_ATTENTION = {
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward,
}


def step_flops(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> int:
    """FLOPs of the matrix products of one forward + backward of `model` on `tokens` with
    the cross-entropy against `labels` (gradients are left in the parameters' .grad)."""
    with FlopCounterMode(display=False, custom_mapping=FUSED_ATTENTION) as counter:
        logits = model(tokens)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
    return counter.get_total_flops()
