"""The value-dim knob (`Mixer.value_knob`, `head_v_dim`): d_v per head moves the state's floats
and leaves the rank bound, H x key dim, where it was (docs/background.md, section 17); the
mixers stay causal, their modes agree and step() reproduces forward() at a value dim that is
not d_model / n_heads; the record's layers carry the value dim."""

import pytest
import torch

from common.checks import InvalidValue
from harness.records.record import state_record
from models import build_mixer
from models.backbone import LanguageModel

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16
KNOB = {"linear": "feature_dim", "deltanet": "head_k_dim", "gated_deltanet": "head_k_dim"}


def expected_floats(name: str, key_dim: int, value_dim: int, heads: int = 2) -> tuple[int, int]:
    """(mixer floats, conv-window floats) per layer from the settings: linear attention
    H (D d_v + D) (S and the normaliser z); the delta rules H d_k d_v, plus their own q, k, v
    convolutions' windows (kernel 4: 3 (2 H d_k + H d_v))."""
    if name == "linear":
        return heads * (key_dim * value_dim + key_dim), 0
    return heads * key_dim * value_dim, 3 * (2 * heads * key_dim + heads * value_dim)


@pytest.mark.parametrize("name", sorted(KNOB))
@pytest.mark.parametrize("key_dim", [2, 4])
def test_value_dim_moves_the_floats_not_the_rank_bound(name: str, key_dim: int) -> None:
    bounds, floats = set(), []
    for value_dim in (3, 8, 32, 128):
        torch.manual_seed(0)
        mixer = build_mixer(name, D_MODEL, **{KNOB[name]: key_dim, "head_v_dim": value_dim})
        assert mixer.value_knob == "head_v_dim" and mixer.head_v_dim == value_dim
        mixer_floats, conv = expected_floats(name, key_dim, value_dim)
        assert mixer.state_size(64) == mixer_floats + conv
        assert mixer.conv_state_size() == conv
        bounds.add(mixer.rank_bound(64))
        floats.append(mixer.state_size(64))
    assert bounds == {2 * key_dim}
    assert floats == sorted(floats) and len(set(floats)) == len(floats)


@pytest.mark.parametrize(
    ("name", "default_value_dim"),
    [("linear", D_MODEL // 2), ("deltanet", D_MODEL // 2), ("gated_deltanet", D_MODEL)],
)
def test_the_default_is_unchanged_and_naming_it_builds_the_same_mixer(
    name: str, default_value_dim: int
) -> None:
    """head_v_dim=None is the value dim the mixer had before the knob (d_model / n_heads, Gated
    DeltaNet's expand_v 2 times it); naming that value gives the same weights and outputs."""
    x = torch.randn(2, 9, D_MODEL)
    torch.manual_seed(0)
    default = build_mixer(name, D_MODEL, **{KNOB[name]: 4})
    torch.manual_seed(0)
    named = build_mixer(name, D_MODEL, **{KNOB[name]: 4, "head_v_dim": default_value_dim})
    assert default.head_v_dim == default_value_dim
    assert default.state_dict().keys() == named.state_dict().keys()
    torch.testing.assert_close(default(x), named(x))


VARIANTS = [
    ("linear", {"head_v_dim": 5}),
    ("linear", {"feature_dim": 3, "head_v_dim": 24}),
    ("deltanet", {"head_k_dim": 3, "head_v_dim": 20}),
    ("deltanet", {"head_v_dim": 2, "conv_size": 0}),
    ("gated_deltanet", {"head_k_dim": 2, "head_v_dim": 11}),
]
IDS = [name + "".join(f"-{k}={v}" for k, v in params.items()) for name, params in VARIANTS]


def make(name: str, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer(name, D_MODEL, **params).double()


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_causal_at_a_non_default_value_dim(name: str, params: dict) -> None:
    mixer = make(name, **params)
    x = torch.randn(2, 23, D_MODEL)
    x2 = x.clone()
    x2[:, 11:] = torch.randn(2, 12, D_MODEL) * 10
    y, y2 = mixer(x), mixer(x2)
    assert y.shape == x.shape
    torch.testing.assert_close(y[:, :11], y2[:, :11])
    assert not torch.allclose(y[:, 11:], y2[:, 11:])


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_modes_agree_at_a_non_default_value_dim(name: str, params: dict) -> None:
    x = torch.randn(2, 37, D_MODEL, requires_grad=True)
    outputs = {}
    for mode in ("recurrent", "parallel", "chunk"):
        y = make(name, mode=mode, chunk_size=8, **params)(x)
        (grad,) = torch.autograd.grad(y.square().sum(), x)
        outputs[mode] = (y.detach(), grad)
    for mode, (y, grad) in outputs.items():
        torch.testing.assert_close(y, outputs["recurrent"][0], msg=mode)
        torch.testing.assert_close(grad, outputs["recurrent"][1], msg=mode)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_step_reproduces_forward_and_carries_state_size(name: str, params: dict) -> None:
    mixer = make(name, **params).eval()
    x = torch.randn(3, 19, D_MODEL)
    y = mixer(x)
    state = mixer.init_state(3)
    for t in range(x.shape[1]):
        y_t, state = mixer.step(x[:, t], state)
        torch.testing.assert_close(y_t, y[:, t], msg=f"step {t}")
        assert sum(s.numel() for s in state) // 3 == mixer.state_size(t + 1)


@pytest.mark.parametrize("name", sorted(KNOB))
def test_the_record_says_the_value_dim_and_its_floats(name: str) -> None:
    torch.manual_seed(0)
    params = {KNOB[name]: 4, "head_v_dim": 32}
    model = LanguageModel(11, 64, name, params, d_model=D_MODEL, n_layers=1, short_conv=4)
    state = state_record(model, 64)
    (layer,) = state["layers"]
    mixer_floats, conv = expected_floats(name, 4, 32)
    assert layer["value_dim"] == 32
    assert layer["mixer_floats"] == mixer_floats == state["mixer_floats_per_layer"]
    assert layer["rank_bound"] == 2 * 4
    assert layer["knob"] == {"name": KNOB[name], "value": 4}


def test_a_mixer_without_a_value_knob_records_no_value_dim() -> None:
    model = LanguageModel(11, 64, "softmax", d_model=D_MODEL)
    assert "value_dim" not in state_record(model, 64)["layers"][0]


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("linear", {"head_v_dim": 0}, "head_v_dim=0"),
        ("deltanet", {"head_v_dim": 2.5}, "head_v_dim=2.5"),
        ("deltanet", {"head_v_dim": 8, "expand_v": 2.0}, "expand_v=2.0"),
        ("gated_deltanet", {"head_v_dim": 8, "expand_v": 1.0}, "expand_v=1.0"),
    ],
)
def test_bad_value_dims_are_refused_by_name(name: str, params: dict, match: str) -> None:
    with pytest.raises(InvalidValue, match=match):
        build_mixer(name, D_MODEL, **params)
