"""Every registered mixer: causal, modes agree, step() reproduces forward(), honest state size."""

import pytest
import torch

from models import MIXERS, build_mixer
from models.backbone import LanguageModel

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def recurrent_modes(name: str) -> list[str]:
    has_mode = "mode" in MIXERS.parameters(name)
    return ["chunk", "parallel", "recurrent"] if has_mode else []


def make(name: str, **params) -> torch.nn.Module:
    """The mixer in float64; signed-feature mixers without their collapse guard (it is tested
    in test_zoo.py), so that inputs of any size can be compared across modes."""
    torch.manual_seed(0)
    if "collapse_fraction" in MIXERS.parameters(name):
        params.setdefault("collapse_fraction", 1.0)
    return build_mixer(name, D_MODEL, **params).double()


@pytest.mark.parametrize("name", MIXERS.names())
def test_mixer_is_causal(name: str) -> None:
    mixer = make(name)
    x = torch.randn(2, 23, D_MODEL)
    y = mixer(x)
    x2 = x.clone()
    x2[:, 11:] = torch.randn(2, 12, D_MODEL) * 10
    y2 = mixer(x2)
    torch.testing.assert_close(y[:, :11], y2[:, :11])
    assert not torch.allclose(y[:, 11:], y2[:, 11:])


@pytest.mark.parametrize("name", [n for n in MIXERS.names() if recurrent_modes(n)])
def test_modes_agree_forward_and_backward(name: str) -> None:
    x = torch.randn(2, 37, D_MODEL, requires_grad=True)
    outputs = {}
    for mode in recurrent_modes(name):
        mixer = make(name, mode=mode, chunk_size=8)
        y = mixer(x)
        (grad,) = torch.autograd.grad(y.square().sum(), x)
        outputs[mode] = (y.detach(), grad)
    for mode, (y, grad) in outputs.items():
        torch.testing.assert_close(y, outputs["recurrent"][0], msg=mode)
        torch.testing.assert_close(grad, outputs["recurrent"][1], msg=mode)


@pytest.mark.parametrize("name", MIXERS.names())
def test_step_reproduces_forward(name: str) -> None:
    mixer = make(name).eval()
    x = torch.randn(3, 19, D_MODEL)
    y = mixer(x)
    state = mixer.init_state(3)
    for t in range(x.shape[1]):
        y_t, state = mixer.step(x[:, t], state)
        torch.testing.assert_close(y_t, y[:, t], msg=f"step {t}")


@pytest.mark.parametrize("name", MIXERS.names())
def test_state_size_counts_the_floats_step_carries(name: str) -> None:
    mixer = make(name).eval()
    state = mixer.init_state(2)
    for t in range(1, 21):
        _, state = mixer.step(torch.randn(2, D_MODEL), state)
        carried = sum(s.numel() for s in state) // 2
        assert mixer.state_size(t) == carried, (t, mixer.state_size(t), carried)


@pytest.mark.parametrize("name", MIXERS.names())
def test_recurrent_state_memory_is_flat_softmax_grows(name: str) -> None:
    mixer = make(name)
    grows = mixer.state_size(4096) > mixer.state_size(16)
    assert grows == mixer.grows_with_seq_len
    assert grows == (name == "softmax")


def test_exercise_3_state_vs_kv_cache() -> None:
    """d_k = d_v = 128, one head, T = 4096: S holds 128 x 128 = 16,384 floats (+128 for z);
    the KV cache holds 2 x 4096 x 128 = 1,048,576."""
    linear = build_mixer("linear", d_model=128, n_heads=1)
    softmax = build_mixer("softmax", d_model=128, n_heads=1)
    assert linear.state_size(4096) == 16_384 + 128
    assert softmax.state_size(4096) == 1_048_576


@pytest.mark.parametrize("name", MIXERS.names())
@pytest.mark.parametrize("short_conv", [0, 3])
def test_backbone_step_equals_forward(name: str, short_conv: int) -> None:
    torch.manual_seed(0)
    model = LanguageModel(11, 16, name, d_model=D_MODEL, n_layers=2, short_conv=short_conv)
    model = model.double().eval()
    tokens = torch.randint(0, 11, (2, 16))
    logits = model(tokens)
    state = model.init_state(2)
    for t in range(16):
        step_logits, state = model.step(tokens[:, t], state)
        torch.testing.assert_close(step_logits, logits[:, t])
    floats = sum(s.numel() for s in state["blocks"][0][1]) // 2
    conv = (short_conv - 1) * D_MODEL if short_conv else 0
    assert model.state_size(16) == floats + conv


def test_learned_positions_refuse_longer_sequences() -> None:
    model = LanguageModel(11, 16, "softmax", d_model=D_MODEL)
    with pytest.raises(ValueError, match="seq_len=17"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_heads": 3}, "n_heads=3"),
        ({"n_heads": 0}, "n_heads=0"),
        ({"no_such": 1}, "no parameter 'no_such'"),
    ],
)
def test_bad_mixer_params_name_the_parameter(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_mixer("linear", D_MODEL, **params)


def test_unknown_mixer_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: .*favor.*softmax"):
        build_mixer("nope", D_MODEL)
