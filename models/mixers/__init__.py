"""One registered mixer per module; importing this package fills `models.MIXERS`."""

from models.mixers import (  # noqa: F401
    based,
    deltanet,
    kernel_attention,
    retnet,
    rwkv,
    sliding_window,
    softmax,
)
