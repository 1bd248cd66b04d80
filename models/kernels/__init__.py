"""Sequence-mixing kernels: pure functions, layout [batch, heads, time, dim], causal.

One module per algorithm, each with its plain step loop (`mode="recurrent"`, the
specification) beside its faster forms (docs/background.md, section 5):

    common.py            the modes, the input checks, the split of a sequence into blocks
    linear_chunk.py      chunk-form linear attention as one autograd node, eq. 9's division
    softmax.py           softmax_attention (eq. 1)
    linear.py            linear_attention (eq. 8-10: plain, normalised, RetNet's decay),
                         taylor_features, taylor_linear_attention (Based), linear_attention_cumsum
    rwkv4.py             rwkv4_wkv (eq. 11)
    delta_rule.py        delta_rule (DeltaNet)
    gated_linear.py      gated_linear_attention (GLA's per-dimension gate, Mamba-2's per head)
    gated_delta_rule.py  gated_delta_rule (Gated DeltaNet)
    dplr.py              gated_dplr (the gated DPLR rule: RWKV-7), kda_rule (KDA)
    forgetting.py        forgetting_attention, forgetting_step (the Forgetting Transformer)
    gdn2.py              gdn2_rule (Gated DeltaNet-2: erase and write gates per channel)
    log_linear.py        log_linear_attention (log-linear Mamba-2: a Fenwick tree of states)
    mesa.py              mesa_attention (MesaNet: a regularised least-squares read-out)
    conjugate_gradient.py  conjugate_gradient (fla's fixed-step solver for MesaNet's system)
"""

from models.kernels.common import MODES, check_mode
from models.kernels.conjugate_gradient import conjugate_gradient
from models.kernels.delta_rule import delta_rule
from models.kernels.dplr import gated_dplr, kda_rule
from models.kernels.forgetting import forgetting_attention, forgetting_step
from models.kernels.gated_delta_rule import gated_delta_rule
from models.kernels.gated_linear import gated_linear_attention
from models.kernels.gdn2 import gdn2_rule
from models.kernels.linear import (
    LinearState,
    linear_attention,
    linear_attention_cumsum,
    taylor_features,
    taylor_linear_attention,
)
from models.kernels.linear_chunk import normalized
from models.kernels.log_linear import log_linear_attention
from models.kernels.mesa import MesaState, mesa_attention
from models.kernels.rwkv4 import WKVState, rwkv4_wkv
from models.kernels.softmax import softmax_attention

__all__ = [
    "MODES",
    "LinearState",
    "MesaState",
    "WKVState",
    "check_mode",
    "conjugate_gradient",
    "delta_rule",
    "forgetting_attention",
    "forgetting_step",
    "gated_delta_rule",
    "gated_dplr",
    "gated_linear_attention",
    "gdn2_rule",
    "kda_rule",
    "linear_attention",
    "linear_attention_cumsum",
    "log_linear_attention",
    "mesa_attention",
    "normalized",
    "rwkv4_wkv",
    "softmax_attention",
    "taylor_features",
    "taylor_linear_attention",
]
