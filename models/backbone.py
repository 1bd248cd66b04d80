"""The language model around a mixer: embeddings, N pre-norm blocks (mixer, then an MLP unless
`mlp_ratio=0`), LM head."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import require, require_choice, require_int
from models.registry import build_mixer

POSITIONAL = ("learned", "none")


class ShortConv(nn.Module):
    """Depthwise causal convolution over time, y_t = sum_i w_i * x_{t-i} (i < kernel_size).
    Put before the mixer (as in Zoology and Based) it builds previous-token features, so a
    failure to retrieve is not a failure to form a previous-token head."""

    def __init__(self, d_model: int, kernel_size: int) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x.transpose(1, 2), (self.kernel_size - 1, 0))
        return self.conv(padded).transpose(1, 2)

    def step(self, x: torch.Tensor, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, d]; window [B, d, kernel_size - 1], the previous inputs (oldest first)."""
        full = torch.cat([window, x[:, :, None]], dim=2)
        return (full * self.conv.weight[:, 0]).sum(dim=2), full[:, :, 1:]


class Block(nn.Module):
    """x + mixer(conv(norm(x))), then x + mlp(norm(x)) (pre-norm); `mlp_ratio=0` leaves the
    MLP out (Zoology's MQAR block: the mixer alone). A mixer that convolves its own
    projections (`owns_short_conv`: fla's DeltaNet, Mamba-2) gets norm(x) without the shared
    convolution, as its reference layer does."""

    def __init__(self, d_model: int, mixer: nn.Module, short_conv: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        shared_conv = short_conv > 0 and not getattr(mixer, "owns_short_conv", False)
        self.conv = ShortConv(d_model, short_conv) if shared_conv else None
        self.mixer = mixer
        self.mlp = None
        if mlp_ratio > 0:
            self.norm2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(
                nn.Linear(d_model, mlp_ratio * d_model),
                nn.GELU(),
                nn.Linear(mlp_ratio * d_model, d_model),
            )

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """x + mlp(norm(x)), or x without an MLP."""
        return x if self.mlp is None else x + self.mlp(self.norm2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        if self.conv is not None:
            h = self.conv(h)
        return self.feed_forward(x + self.mixer(h))

    def init_state(self, batch_size: int) -> tuple:
        conv_state = None
        if self.conv is not None:
            param = self.conv.conv.weight
            shape = (batch_size, param.shape[0], self.conv.kernel_size - 1)
            conv_state = torch.zeros(shape, dtype=param.dtype, device=param.device)
        return conv_state, self.mixer.init_state(batch_size)

    def step(self, x: torch.Tensor, state: tuple) -> tuple[torch.Tensor, tuple]:
        conv_state, mixer_state = state
        h = self.norm1(x)
        if self.conv is not None:
            h, conv_state = self.conv.step(h, conv_state)
        y, mixer_state = self.mixer.step(h, mixer_state)
        return self.feed_forward(x + y), (conv_state, mixer_state)

    def shared_conv_state_size(self) -> int:
        """Floats of the shared convolution's window, (k - 1) * d_model, or 0 without it."""
        return (self.conv.kernel_size - 1) * self.norm1.normalized_shape[0] if self.conv else 0

    def state_size(self, seq_len: int) -> int:
        return self.shared_conv_state_size() + self.mixer.state_size(seq_len)


class LanguageModel(nn.Module):
    """Token embedding (+ learned positions) -> `n_layers` blocks -> final norm -> LM head.

    `short_conv` (default 4, as Zoology and Based) is the kernel size of the causal
    convolution before every mixer, softmax included, so that every mixer gets the same
    previous-token features; 0 = none. A mixer with its own convolutions
    (`owns_short_conv`) has no shared one. `mlp_ratio=0` gives blocks without an MLP.
    `pos_emb="learned"` cannot run past `max_seq_len`; `"none"` relies on the mixer (and the
    short convolution) for order and runs at any length."""

    def __init__(
        self,
        vocab_size: int,
        max_seq_len: int,
        mixer: str,
        mixer_params: dict | None = None,
        d_model: int = 64,
        n_layers: int = 2,
        pos_emb: str = "learned",
        short_conv: int = 4,
        mlp_ratio: int = 4,
    ) -> None:
        super().__init__()
        require_int("vocab_size", vocab_size, 2)
        require_int("max_seq_len", max_seq_len, 1)
        require_int("d_model", d_model, 1)
        require_int("n_layers", n_layers, 1)
        require_choice("pos_emb", pos_emb, POSITIONAL)
        require_int("short_conv", short_conv, 0)
        require_int("mlp_ratio", mlp_ratio, 0)
        self.max_seq_len, self.pos_emb = max_seq_len, pos_emb
        self.embed = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_seq_len, d_model) if pos_emb == "learned" else None
        mixers = [build_mixer(mixer, d_model, **(mixer_params or {})) for _ in range(n_layers)]
        self.blocks = nn.ModuleList(Block(d_model, m, short_conv, mlp_ratio) for m in mixers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def check_length(self, seq_len: int) -> None:
        """Learned positions exist only up to `max_seq_len`."""
        require(
            self.positions is None or seq_len <= self.max_seq_len,
            "seq_len",
            seq_len,
            f"<= {self.max_seq_len}, the trained length, with pos_emb=learned "
            "(backbone.pos_emb=none evaluates at any length)",
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] int64 -> logits [B, T, vocab]."""
        self.check_length(tokens.shape[1])
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def init_state(self, batch_size: int) -> dict:
        """The empty recurrent state: per block (conv window, mixer state), and the position."""
        return {"t": 0, "blocks": [b.init_state(batch_size) for b in self.blocks]}

    def step(self, tokens: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """One token per example, tokens [B] -> logits [B, vocab]; equals forward's last row."""
        self.check_length(state["t"] + 1)
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions.weight[state["t"]]
        new_blocks = []
        for block, block_state in zip(self.blocks, state["blocks"], strict=True):
            x, block_state = block.step(x, block_state)
            new_blocks.append(block_state)
        return self.head(self.norm(x)), {"t": state["t"] + 1, "blocks": new_blocks}

    def state_size(self, seq_len: int) -> int:
        """Floats per layer needed to produce token seq_len + 1 (mixer state + conv window)."""
        return self.blocks[0].state_size(seq_len)

    def mixer_state_size(self, seq_len: int) -> int:
        """Floats per layer of the mixer's own state, every convolution's window left out
        (the shared one and the mixer's own, `conv_state_size`): where the bindings are kept
        (docs/background.md, section 17)."""
        mixer = self.blocks[0].mixer
        return mixer.state_size(seq_len) - mixer.conv_state_size()

    def conv_state_size(self) -> int:
        """Floats per layer of convolution windows: the shared short convolution's and the
        mixer's own (conv state: the last few inputs, never an earlier binding)."""
        block = self.blocks[0]
        return block.shared_conv_state_size() + block.mixer.conv_state_size()

    def rank_bound(self, seq_len: int) -> int:
        """Bindings one layer's state reads back exactly at seq_len (the mixer's
        `rank_bound`, docs/background.md, section 17); the short convolution is not counted:
        its window holds the current token's few neighbours, never an earlier binding."""
        return self.blocks[0].mixer.rank_bound(seq_len)
