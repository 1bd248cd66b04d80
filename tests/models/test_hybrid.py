"""A hybrid stack (`model=hybrid`, a mixer per layer): its modes agree, it is causal, `step`
reproduces `forward`, its state and rank bound are its layers' sums, and a bad layer list is
refused in one line."""

import pytest
import torch

from harness.records.record import state_record
from models import MIXERS
from models.backbone import LanguageModel
from models.stack import hybrid_label, stack_layers

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL, VOCAB, T = 16, 13, 24
STACKS = [
    ["gated_deltanet", "softmax"],
    ["softmax", {"name": "mamba2", "d_state": 3}],
    [{"name": "deltanet", "head_k_dim": 4}, {"name": "sliding_window", "window": 5}],
    ["gla", "rwkv", "linear"],
]
IDS = ["gdn+softmax", "softmax+mamba2", "deltanet+swa", "gla+rwkv+linear"]


def hybrid(layers: list, mode: str | None = None, **backbone) -> LanguageModel:
    """The stack in float64, seed 0; `mode` set in every layer that has one."""
    if mode is not None:
        layers = [
            {**({"name": e} if isinstance(e, str) else e), "mode": mode}
            if (e if isinstance(e, str) else e["name"]) in MODED
            else e
            for e in layers
        ]
    torch.manual_seed(0)
    n_layers = backbone.pop("n_layers", len(layers))
    model = LanguageModel(VOCAB, 64, "hybrid", {"layers": layers}, D_MODEL, n_layers, **backbone)
    return model.eval()


MODED = {name for name in MIXERS.names() if "mode" in MIXERS.parameters(name)}


def tokens(batch: int = 2, length: int = T) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("layers", STACKS, ids=IDS)
def test_every_mode_gives_the_same_logits(layers: list) -> None:
    x = tokens()
    reference = hybrid(layers, "recurrent")
    expected = reference(x)
    for mode in ("chunk", "parallel"):
        model = hybrid(layers, mode)
        model.load_state_dict(reference.state_dict())
        torch.testing.assert_close(model(x), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("layers", STACKS, ids=IDS)
def test_it_is_causal(layers: list) -> None:
    model, x = hybrid(layers), tokens()
    changed = x.clone()
    changed[:, 11] = (changed[:, 11] + 1) % VOCAB
    a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, :11], b[:, :11], rtol=0, atol=1e-12)
    assert (a[:, 11:] - b[:, 11:]).abs().max() > 1e-6  # and the change is seen


@pytest.mark.parametrize("layers", STACKS, ids=IDS)
def test_step_over_a_sequence_equals_forward_and_holds_the_recorded_state(layers: list) -> None:
    model, x = hybrid(layers), tokens()
    expected = model(x)
    state, rows = model.init_state(x.shape[0]), []
    with torch.no_grad():
        for t in range(x.shape[1]):
            logits, state = model.step(x[:, t], state)
            rows.append(logits)
            held = sum(s.numel() for part in state["blocks"] for s in flat(part)) / x.shape[0]
            assert held == model.state_size(t + 1), t
    torch.testing.assert_close(torch.stack(rows, 1), expected, rtol=1e-9, atol=1e-9)


def flat(part) -> list[torch.Tensor]:
    """The tensors of a block's (conv window, mixer state), Nones left out."""
    if part is None:
        return []
    if isinstance(part, torch.Tensor):
        return [part]
    return [t for item in part for t in flat(item)]


def test_state_and_rank_bound_are_the_sums_of_the_layers() -> None:
    layers = [{"name": "gated_deltanet", "head_k_dim": 4}, "softmax", "sliding_window"]
    model = hybrid(layers, short_conv=4)
    mixers = [block.mixer for block in model.blocks]
    gdn, softmax, window = mixers
    for length in (8, 64):
        assert model.rank_bound(length) == 2 * 4 + length + min(length, 16)
        shared = 2 * 3 * D_MODEL  # softmax's and the window's blocks keep the shared conv
        assert model.state_size(length) == sum(m.state_size(length) for m in mixers) + shared
    record = state_record(model, 64)
    assert [layer["mixer"] for layer in record["layers"]] == [
        "gated_deltanet",
        "softmax",
        "sliding_window",
    ]
    assert [layer["rank_bound"] for layer in record["layers"]] == [8, 64, 16]
    assert record["rank_bound_stack"] == 88 == sum(m.rank_bound(64) for m in mixers)
    assert record["floats_stack"] == model.state_size(64)
    assert record["mixer_floats_stack"] == (
        gdn.state_size(64) - gdn.conv_state_size() + 2 * 64 * D_MODEL + 2 * 16 * D_MODEL
    )
    assert record["layers"][0]["knob"] == {"name": "head_k_dim", "value": 4}
    assert record["knob"] is None  # the layers differ: each carries its own
    assert record["grows_with_seq_len"] and record["layers"][1]["grows_with_seq_len"]
    assert not record["layers"][2]["grows_with_seq_len"]  # a window's state is fixed


def test_a_stack_without_a_growing_layer_does_not_grow() -> None:
    record = state_record(hybrid(["gated_deltanet", "sliding_window"]), 64)
    assert not record["grows_with_seq_len"]
    assert record["floats_per_layer"] == record["floats_stack"] / 2


def test_one_mixer_stacks_keep_their_per_layer_fields() -> None:
    torch.manual_seed(0)
    model = LanguageModel(VOCAB, 64, "deltanet", {"head_k_dim": 4}, D_MODEL, n_layers=3)
    record = state_record(model, 64)
    assert record["rank_bound_per_layer"] == 8 and record["rank_bound_stack"] == 24
    assert record["floats_stack"] == 3 * record["floats_per_layer"] == model.state_size(64)
    assert record["knob"] == {"name": "head_k_dim", "value": 4}


def test_a_hybrid_of_one_mixer_is_that_model() -> None:
    """Same seed, same parameters, same logits: the list only chooses each layer's mixer."""
    x = tokens()
    torch.manual_seed(0)
    plain = LanguageModel(VOCAB, 64, "gla", {"head_k_dim": 4}, D_MODEL, n_layers=2).eval()
    stacked = hybrid([{"name": "gla", "head_k_dim": 4}] * 2)
    torch.testing.assert_close(stacked(x), plain(x), rtol=0, atol=0)


def test_the_list_repeats_over_the_depth() -> None:
    model = hybrid(["deltanet", "softmax"], n_layers=4)
    names = [block.mixer.registry_name for block in model.blocks]
    assert names == ["deltanet", "softmax", "deltanet", "softmax"]
    assert model.blocks[0].mixer is not model.blocks[2].mixer  # own parameters


def test_the_label_names_the_layers_in_order() -> None:
    assert hybrid_label(["gated_deltanet", "softmax"]) == "gdn+softmax"
    assert hybrid_label(["sliding_window", "mamba2"]) == "swa+mamba2"


@pytest.mark.parametrize(
    ("layers", "n_layers", "message"),
    [
        (["gated_deltanet", "sofmax"], 2, "layers[1].name='sofmax' is invalid: must be one of"),
        (["deltanett", "softmax"], 2, "(did you mean deltanet?)"),
        (
            [{"name": "softmax", "n_heads": 3}],
            2,
            "layers[0].n_heads=3 is invalid: must be a divisor",
        ),
        (
            ["softmax", {"name": "gla", "windw": 4}],
            2,
            "layers[1].windw=4 is invalid: must be a parameter of gla",
        ),
        ([{"n_heads": 2}], 2, "layers[0]={'n_heads': 2} is invalid: must be a mixer's name or"),
        ([], 2, "layers=[] is invalid: must be a non-empty list"),
        ("softmax", 2, "layers='softmax' is invalid: must be a non-empty list"),
        (["softmax", "softmax", "gla"], 2, "n_layers=2 is invalid: must be a multiple of the 3"),
    ],
)
def test_a_bad_layer_list_is_refused_in_one_line(layers, n_layers: int, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        LanguageModel(VOCAB, 64, "hybrid", {"layers": layers}, D_MODEL, n_layers)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_hybrid_takes_only_its_layers() -> None:
    with pytest.raises(ValueError, match="n_heads=2 is invalid: must be unset"):
        stack_layers("hybrid", {"layers": ["softmax"], "n_heads": 2}, 1)
