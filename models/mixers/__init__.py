"""One registered mixer per module; importing this package fills `models.MIXERS`."""

from models.mixers import kernel_attention, softmax  # noqa: F401
