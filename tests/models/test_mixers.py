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


VARIANTS = [(name, {}) for name in MIXERS.names()] + [
    ("linear", {"feature_map": "favor", "feature_dim": 12}),
    ("linear", {"feature_map": "taylor", "qk_dim": 4}),
    ("linear", {"feature_map": "elu", "qk_dim": 4}),
    ("deltanet", {"head_k_dim": 3, "expand_v": 1.5}),
    ("deltanet", {"conv_size": 0}),
    ("gated_deltanet", {"head_k_dim": 5, "conv_size": 2}),
    ("gated_deltanet", {"conv_size": 0}),
    ("mamba2", {"d_state": 3, "n_groups": 2, "conv_size": 3}),
    ("mamba2", {"conv_size": 0, "expand": 1}),
    ("gla", {"head_k_dim": 6}),
    ("gla", {"conv_size": 0}),
]
"""Every registered mixer with its defaults, `linear` with each of its feature maps, and the
reference layers with their state knobs, value widths and conv ablations."""
VARIANT_IDS = [name + "".join(f"-{k}={v}" for k, v in params.items()) for name, params in VARIANTS]


def make(name: str, **params) -> torch.nn.Module:
    """The mixer in float64; signed-feature mixers without their collapse guard (it is tested
    in test_zoo.py), so that inputs of any size can be compared across modes."""
    torch.manual_seed(0)
    if "collapse_fraction" in MIXERS.parameters(name):
        params.setdefault("collapse_fraction", 1.0)
    return build_mixer(name, D_MODEL, **params).double()


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
def test_mixer_is_causal(name: str, params: dict) -> None:
    mixer = make(name, **params)
    x = torch.randn(2, 23, D_MODEL)
    y = mixer(x)
    x2 = x.clone()
    x2[:, 11:] = torch.randn(2, 12, D_MODEL) * 10
    y2 = mixer(x2)
    torch.testing.assert_close(y[:, :11], y2[:, :11])
    assert not torch.allclose(y[:, 11:], y2[:, 11:])


@pytest.mark.parametrize(
    ("name", "params"),
    [v for v in VARIANTS if recurrent_modes(v[0])],
    ids=[i for v, i in zip(VARIANTS, VARIANT_IDS, strict=True) if recurrent_modes(v[0])],
)
def test_modes_agree_forward_and_backward(name: str, params: dict) -> None:
    x = torch.randn(2, 37, D_MODEL, requires_grad=True)
    outputs = {}
    for mode in recurrent_modes(name):
        mixer = make(name, mode=mode, chunk_size=8, **params)
        y = mixer(x)
        (grad,) = torch.autograd.grad(y.square().sum(), x)
        outputs[mode] = (y.detach(), grad)
    for mode, (y, grad) in outputs.items():
        torch.testing.assert_close(y, outputs["recurrent"][0], msg=mode)
        torch.testing.assert_close(grad, outputs["recurrent"][1], msg=mode)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
def test_step_reproduces_forward(name: str, params: dict) -> None:
    mixer = make(name, **params).eval()
    x = torch.randn(3, 19, D_MODEL)
    y = mixer(x)
    state = mixer.init_state(3)
    for t in range(x.shape[1]):
        y_t, state = mixer.step(x[:, t], state)
        torch.testing.assert_close(y_t, y[:, t], msg=f"step {t}")


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
def test_state_size_counts_the_floats_step_carries(name: str, params: dict) -> None:
    mixer = make(name, **params).eval()
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
    assert grows == (
        name in {"softmax", "forgetting_attention", "log_linear_mamba2"}
    )  # KV caches; log T levels


def test_exercise_3_state_vs_kv_cache() -> None:
    """d_k = d_v = 128, one head, T = 4096: S holds 128 x 128 = 16,384 floats (+128 for z);
    the KV cache holds 2 x 4096 x 128 = 1,048,576."""
    linear = build_mixer("linear", d_model=128, n_heads=1)
    softmax = build_mixer("softmax", d_model=128, n_heads=1)
    assert linear.state_size(4096) == 16_384 + 128
    assert softmax.state_size(4096) == 1_048_576


@pytest.mark.parametrize("name", MIXERS.names())
@pytest.mark.parametrize(("short_conv", "mlp_ratio"), [(0, 4), (3, 4), (3, 0)])
def test_backbone_step_equals_forward(name: str, short_conv: int, mlp_ratio: int) -> None:
    torch.manual_seed(0)
    model = LanguageModel(
        11, 16, name, d_model=D_MODEL, n_layers=2, short_conv=short_conv, mlp_ratio=mlp_ratio
    )
    model = model.double().eval()
    tokens = torch.randint(0, 11, (2, 16))
    logits = model(tokens)
    state = model.init_state(2)
    for t in range(16):
        step_logits, state = model.step(tokens[:, t], state)
        torch.testing.assert_close(step_logits, logits[:, t])
    floats = sum(s.numel() for s in state["blocks"][0][1]) // 2
    owns = model.blocks[0].mixer.owns_short_conv  # then the block has no shared conv
    conv = (short_conv - 1) * D_MODEL if short_conv and not owns else 0
    layer = model.layer_states(16)[0]
    assert layer["floats"] == model.blocks[0].state_size(16) == floats + conv
    assert layer["mixer_floats"] == floats + conv - layer["conv_floats"]
    assert model.state_size(16) == 2 * (floats + conv)  # the stack: both layers


def test_mlp_ratio_0_leaves_the_mlp_out() -> None:
    with_mlp = LanguageModel(11, 16, "softmax", d_model=D_MODEL, mlp_ratio=4)
    without = LanguageModel(11, 16, "softmax", d_model=D_MODEL, mlp_ratio=0)
    per_block = 2 * 4 * D_MODEL * D_MODEL + 4 * D_MODEL + D_MODEL + 2 * D_MODEL  # MLP + norm2
    extra = sum(p.numel() for p in with_mlp.parameters()) - sum(
        p.numel() for p in without.parameters()
    )
    assert extra == 2 * per_block
    assert all(block.mlp is None for block in without.blocks)


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


def test_linear_feature_maps_set_the_state_they_hold() -> None:
    """`linear`'s feature map alone sets D: ELU+1 qk_dim, FAVOR+ feature_dim, Taylor
    1 + qk_dim + qk_dim^2 (Based's 273 at qk_dim 16); v keeps head_dim = 8."""
    heads, head_dim = 2, D_MODEL // 2
    expected = {
        ("elu", None, 4): 4,
        ("favor", 12, None): 12,
        ("taylor", None, 4): 1 + 4 + 16,
        ("taylor", None, 16): 273,
    }
    for (feature_map, feature_dim, qk_dim), D in expected.items():
        mixer = make("linear", feature_map=feature_map, feature_dim=feature_dim, qk_dim=qk_dim)
        assert mixer.state_size(100) == heads * (D * head_dim + D), feature_map


@pytest.mark.parametrize("feature_map", ["elu", "taylor", "favor"])
@pytest.mark.parametrize("D", [7, 21])
def test_linear_feature_dim_is_the_state_feature_dimension_for_every_map(feature_map, D) -> None:
    """model.feature_map x model.feature_dim compares the maps at equal state: D features for
    each (ELU+1 on D-dim q, k; Taylor on d with 1 + d + d^2 = D; FAVOR+ D random features)."""
    mixer = make("linear", feature_map=feature_map, feature_dim=D)
    assert mixer.feature_dim == D
    assert mixer.state_size(100) == 2 * (D * (D_MODEL // 2) + D)
    x = torch.randn(2, 16, D_MODEL)
    assert mixer(x).shape == x.shape


def test_linear_feature_dim_refusals_name_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"feature_dim.*10.*1 \+ d \+ d\^2.*7, 13, 21"):
        make("linear", feature_map="taylor", feature_dim=10)
    with pytest.raises(ValueError, match=r"qk_dim.*8.*None or 7"):
        make("linear", feature_map="elu", feature_dim=7, qk_dim=8)


def test_based_linear_branch_is_linear_attention_with_the_taylor_map() -> None:
    """Based = `linear` (Taylor map, qk_dim = Based's feature_dim) + a sliding window."""
    based = make("based", feature_dim=4)
    linear = make("linear", feature_map="taylor", qk_dim=4)
    linear.load_state_dict(based.linear.state_dict())
    x = torch.randn(2, 29, D_MODEL)
    torch.testing.assert_close(based(x), linear(x) + based.window_attention(x))


def test_linear_refuses_a_signed_feature_map() -> None:
    with pytest.raises(ValueError, match="feature_map='rff' is invalid: must be one of elu"):
        build_mixer("linear", D_MODEL, feature_map="rff")
