"""One registered mixer per module; importing this package fills `models.MIXERS`."""

from models.mixers import (  # noqa: F401
    based,
    deltanet,
    forgetting_attention,
    gated_deltanet,
    gated_deltaproduct,
    gdn2,
    gla,
    kda,
    kernel_attention,
    log_linear_mamba2,
    mamba2,
    mesanet,
    retnet,
    rwkv,
    rwkv7,
    sliding_window,
    softmax,
)
