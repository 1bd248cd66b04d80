"""The language model around its mixers: embeddings, N pre-norm blocks (a mixer, then an MLP
unless `mlp_ratio=0`), LM head. Every block gets the same mixer, or in a hybrid its own
(`models.stack`, docs/hybrids.md)."""

import torch
import torch.nn.functional as F
from torch import nn

from common.checks import InvalidValue, require, require_choice, require_int
from models.registry import build_mixer
from models.stack import Layer, stack_layers

POSITIONAL = ("learned", "none")
INITS = ("torch", "fla")
"""`init`: PyTorch's default initialisation of every module, or fla's models' (`fla_init`)."""
FLA_INIT_STD = 0.02
"""fla's `initializer_range`: the std of every Linear, Conv1d and Embedding weight."""
OWN_INIT_MIXERS = ("rwkv7",)
"""Mixers whose modules fla's model leaves to the layer's own initialisation (fla flags every
module of `RWKV7Attention` `_in_rwkv_module`, and `RWKV7PreTrainedModel._init_weights` skips
them)."""


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

    def state_record(self, seq_len: int) -> dict:
        """This layer's state at seq_len: its mixer, floats (all, the mixer's own without any
        convolution window, the windows'), rank bound (docs/background.md, section 17),
        whether it grows with the length, and the mixer's state knob with its value; for a
        mixer with a value knob (`Mixer.value_knob`) also `value_dim`, d_v per head."""
        mixer = self.mixer
        conv = self.shared_conv_state_size() + mixer.conv_state_size()
        floats = self.state_size(seq_len)
        knob = getattr(mixer, "state_knob", None)
        record = {
            "mixer": mixer.registry_name,
            "floats": floats,
            "mixer_floats": mixer.state_size(seq_len) - mixer.conv_state_size(),
            "conv_floats": conv,
            "rank_bound": mixer.rank_bound(seq_len),
            "grows_with_seq_len": self.state_size(2 * seq_len) > floats,
            "knob": None if knob is None else {"name": knob, "value": getattr(mixer, knob)},
        }
        value_knob = getattr(mixer, "value_knob", None)
        if value_knob is not None:
            record["value_dim"] = getattr(mixer, value_knob)
        return record


def fla_init(model: nn.Module, std: float = FLA_INIT_STD) -> None:
    """Re-initialise `model` as fla's models do after construction (`_init_weights` of
    `fla/models/<name>/modeling_<name>.py`, e.g. `GatedDeltaNetPreTrainedModel`): every
    nn.Linear and nn.Conv1d weight (projections, the mixers' and the block's short convs, the
    MLP, the LM head) drawn from N(0, std^2) with std = 0.02 (`initializer_range`), every
    such bias set to zero, and every nn.Embedding weight (tokens, learned positions) drawn
    from N(0, std^2) too, as fla's `_init_weights` does; norms and the mixers' own parameters
    (A_log, dt_bias, gains, mixes) keep what their constructors drew, which are fla's
    distributions already (fla re-draws A_log and dt_bias from the same ranges).
    Skipped, as fla skips them: every module inside a mixer named in `OWN_INIT_MIXERS`
    (RWKV-7 keeps its orthogonal and zero initialisations). fla's `_no_reinit` flags are set
    only on Mamba-1's dt_proj bias and, with `conv_init` set (default None), the Mamba-2
    convs: neither exists here. Not mirrored: the Mamba-2 family's
    `rescale_prenorm_residual` (out_proj redrawn as kaiming / sqrt(2 n_layers)) and the RWKV-7
    model's own embedding (uniform +-1e-4) and head (orthogonal), because the backbone
    around the mixers is one for every mixer here. Draws from the torch RNG, module by
    module in `model.modules()` order."""
    skip: set[int] = set()
    for module in model.modules():
        if getattr(module, "registry_name", None) in OWN_INIT_MIXERS:
            skip.update(id(m) for m in module.modules())
    with torch.no_grad():
        for module in model.modules():
            if id(module) in skip:
                continue
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=std)


def build_layer(layer: Layer, d_model: int) -> nn.Module:
    """The layer's mixer; a hybrid layer's bad parameter is named by its entry
    (`layers[1].n_heads=3 is invalid: ...`)."""
    try:
        return build_mixer(layer.name, d_model, **layer.params)
    except InvalidValue as error:
        if layer.entry is None:
            raise
        raise InvalidValue(layer.key(error.name), error.value, error.allowed) from error


class LanguageModel(nn.Module):
    """Token embedding (+ learned positions) -> `n_layers` blocks -> final norm -> LM head.

    `mixer` names the registered mixer of every block, with `mixer_params`; or `mixer="hybrid"`
    with `mixer_params={"layers": [...]}`, one entry per block (a mixer's name or a dict of its
    name and parameters), repeated when `n_layers` is a multiple of its length
    (`models.stack`). A stack's state and rank bound are its layers' sums.

    `short_conv` (default 4, as Zoology and Based) is the kernel size of the causal
    convolution before every mixer, softmax included, so that every mixer gets the same
    previous-token features; 0 = none. A mixer with its own convolutions
    (`owns_short_conv`) has no shared one. `mlp_ratio=0` gives blocks without an MLP.
    `pos_emb="learned"` cannot run past `max_seq_len`; `"none"` relies on the mixer (and the
    short convolution) for order and runs at any length.

    `init="torch"` (default) keeps PyTorch's initialisation of every module (and each
    mixer's own); `init="fla"` then re-initialises the model as fla's models do: Linear,
    Conv1d and Embedding weights from N(0, 0.02^2), their biases zero (`fla_init`, which
    names what it skips as fla does)."""

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
        init: str = "torch",
    ) -> None:
        super().__init__()
        require_int("vocab_size", vocab_size, 2)
        require_int("max_seq_len", max_seq_len, 1)
        require_int("d_model", d_model, 1)
        require_int("n_layers", n_layers, 1)
        require_choice("pos_emb", pos_emb, POSITIONAL)
        require_int("short_conv", short_conv, 0)
        require_int("mlp_ratio", mlp_ratio, 0)
        require_choice("init", init, INITS)
        self.max_seq_len, self.pos_emb = max_seq_len, pos_emb
        self.embed = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_seq_len, d_model) if pos_emb == "learned" else None
        layers = stack_layers(mixer, mixer_params, n_layers)
        mixers = [build_layer(layer, d_model) for layer in layers]
        self.blocks = nn.ModuleList(Block(d_model, m, short_conv, mlp_ratio) for m in mixers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if init == "fla":
            fla_init(self)

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

    def layer_states(self, seq_len: int) -> list[dict]:
        """Each layer's state at seq_len (`Block.state_record`), bottom first."""
        return [block.state_record(seq_len) for block in self.blocks]

    def state_size(self, seq_len: int) -> int:
        """Floats of the whole stack's state needed to produce token seq_len + 1: the sum of
        its layers' (mixer state and convolution windows)."""
        return sum(block.state_size(seq_len) for block in self.blocks)

    def rank_bound(self, seq_len: int) -> int:
        """Bindings the stack's states read back exactly at seq_len: the sum of its layers'
        `rank_bound` (docs/background.md, section 17); a convolution's window adds none: it
        holds the current token's few neighbours, never an earlier binding."""
        return sum(block.mixer.rank_bound(seq_len) for block in self.blocks)
