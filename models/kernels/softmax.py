"""Causal softmax attention (docs/background.md, section 1, eq. 1)."""

import torch.nn.functional as F
from torch import Tensor

from models.kernels.common import check_qkv


def softmax_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal softmax attention (eq. 1): o_t = sum_{s<=t} softmax_s(q_t^T k_s / sqrt(d)) v_s.

    Args:
        q, k: queries and keys, [B, H, T, d].
        v: values, [B, H, T, dv].

    Returns:
        o [B, H, T, dv], by torch SDPA with the causal mask and 1 / sqrt(d) scaling.
    """
    check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
