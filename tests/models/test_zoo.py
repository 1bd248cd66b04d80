"""Facts specific to the zoo's mixers (the generic contract is in test_mixers.py): RetNet's
gammas and Exercise 4, Exercise 2, the delta rule's overwrite, the sliding window, RWKV's
eq. 11, RFF's unclamped denominator, state memory after 16 vs 4096 steps, yaml == signature."""

import math

import pytest
import torch

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES, delta_rule, linear_attention, linear_attention_cumsum
from models.mixers.base import DenominatorCollapse
from models.mixers.rwkv import token_shift
from models.mixers.sliding_window import sliding_window_attention

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16
ZOO = ("identity", "rff", "retnet", "rwkv", "based", "deltanet", "sliding_window")


def make(name: str, d_model: int = D_MODEL, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer(name, d_model, **params).double()


def test_retnet_gammas_are_multi_scale() -> None:
    mixer = make("retnet", 32, n_heads=4)
    assert mixer.gammas.tolist() == [1 - 2**-5, 1 - 2**-6, 1 - 2**-7, 1 - 2**-8]


@pytest.mark.parametrize("mode", MODES)
def test_exercise_4_retnet_with_gamma_1_is_unnormalised_linear_attention(mode: str) -> None:
    """Retention with every gamma = 1 equals the identity-feature linear attention mixer
    (normalize=False) given the same q, k, v projections; with RetNet's gammas it does not."""
    retnet = make("retnet", mode=mode, chunk_size=8)
    linear = make("identity", normalize=False, mode=mode, chunk_size=8)
    with torch.no_grad():
        qkv = retnet.qkv.weight.clone()
        qkv[D_MODEL : 2 * D_MODEL] *= retnet.head_dim**-0.5  # RetNet's key scaling
        linear.qkv.weight.copy_(qkv)
        linear.out.weight.copy_(torch.eye(D_MODEL))
    x = torch.randn(2, 29, D_MODEL)
    b, h, t, d = 2, retnet.n_heads, 29, retnet.head_dim

    def merged(o: torch.Tensor) -> torch.Tensor:
        return o.transpose(1, 2).reshape(b, t, h * d)

    assert not torch.allclose(merged(retnet.retention(x)), linear(x))
    retnet.gammas.fill_(1.0)
    torch.testing.assert_close(merged(retnet.retention(x)), linear(x))
    q, k, v = retnet.projections(x)  # and both equal Exercise 1's cumulative-sum form
    torch.testing.assert_close(
        retnet.retention(x), linear_attention_cumsum(q, k, v, normalize=False)
    )


def test_exercise_2_identity_features_make_a_linear_map_of_the_query() -> None:
    mixer = make("identity")
    assert mixer.normalize is False
    x = torch.randn(2, 13, D_MODEL)
    q, k, v = mixer.features(x)
    state = mixer.init_state(2)
    for t in range(x.shape[1]):
        y_t, state = mixer.step(x[:, t], state)
    S = state[0]
    torch.testing.assert_close(S, k.transpose(-1, -2) @ v)  # the final state is K^T V
    # the last output is q_T^T (K^T V), out-projected
    torch.testing.assert_close(y_t, mixer.merge_heads(q[:, :, -1:] @ S)[:, 0])
    # q -> output is linear for fixed K, V (Q K^T) V = Q (K^T V); the normaliser breaks it
    q2 = torch.randn_like(q)
    for normalize, linear in ((False, True), (True, False)):

        def attend(queries: torch.Tensor, normalize: bool = normalize) -> torch.Tensor:
            return linear_attention(queries, k, v, normalize=normalize, mode="parallel")

        combined = attend(2 * q - 3 * q2)
        assert torch.allclose(combined, 2 * attend(q) - 3 * attend(q2)) == linear


@pytest.mark.parametrize("mode", MODES)
def test_deltanet_with_beta_1_overwrites_a_repeated_key(mode: str) -> None:
    """Writing key e1 twice with beta = 1 leaves only the latest value, where linear attention
    (eq. 8) would return the sum of both; the mixer hands its features and write rates to
    this kernel unchanged."""
    keys = torch.tensor([[1.0, 0], [0, 1], [1, 0], [0, 1], [0, 1]])
    values = torch.tensor([[1.0, 2], [3, 4], [5, 6], [7, 8], [9, 9]])
    queries = torch.tensor([[0.0, 0], [0, 0], [0, 0], [1, 0], [0, 1]])
    q, k, v = (t[None, None] for t in (queries, keys, values))
    o = delta_rule(q, k, v, torch.ones(1, 1, 5), mode=mode, chunk_size=2)
    torch.testing.assert_close(o[0, 0, 3], torch.tensor([5.0, 6.0]))  # not (1, 2) + (5, 6)
    torch.testing.assert_close(o[0, 0, 4], torch.tensor([9.0, 9.0]))
    mixer = make("deltanet", mode=mode, chunk_size=4)
    x = torch.randn(2, 13, D_MODEL)
    q, k, v, _ = mixer.features(x)
    expected = delta_rule(q, k, v, mixer.write_rate(x), mode="recurrent")
    torch.testing.assert_close(mixer(x), mixer.output(x, expected))


@pytest.mark.parametrize("mode", MODES)
def test_sliding_window_is_softmax_when_the_window_covers_the_sequence(mode: str) -> None:
    window = make("sliding_window", window=20, mode=mode, chunk_size=8)
    softmax = make("softmax")
    softmax.load_state_dict(window.state_dict())
    x = torch.randn(2, 20, D_MODEL)
    torch.testing.assert_close(window(x), softmax(x))
    narrow = make("sliding_window", window=19, mode=mode, chunk_size=8)
    assert not torch.allclose(narrow(x)[:, -1], softmax(x)[:, -1])


@pytest.mark.parametrize("mode", MODES)
def test_sliding_window_ignores_tokens_outside_the_window(mode: str) -> None:
    mixer = make("sliding_window", window=4, mode=mode, chunk_size=3)
    x = torch.randn(2, 20, D_MODEL)
    x2 = x.clone()
    x2[:, 5] += 5.0
    y, y2 = mixer(x), mixer(x2)
    torch.testing.assert_close(y[:, :5], y2[:, :5])  # before it
    assert (y[:, 5:9] - y2[:, 5:9]).abs().amax(-1).min() > 1e-6  # tokens 5..8 see it
    torch.testing.assert_close(y[:, 9:], y2[:, 9:])  # token 9's window is 6..9


@pytest.mark.parametrize("T", [1, 7, 37])
@pytest.mark.parametrize(("window", "chunk_size"), [(1, 4), (4, 3), (5, 16), (16, 16), (20, 8)])
def test_sliding_window_chunk_form_matches_recurrent(T: int, window: int, chunk_size: int) -> None:
    """The blocked form (blocks of max(chunk_size, window - 1) queries, padded at the end)
    against the step loop, forward and backward, window shorter and longer than a block."""
    gen = torch.Generator().manual_seed(T + window)
    leaves = [torch.randn(2, 3, T, 5, generator=gen, dtype=torch.float64) for _ in range(3)]
    outputs = {}
    for mode in ("recurrent", "chunk"):
        inputs = [x.clone().requires_grad_() for x in leaves]
        o = sliding_window_attention(*inputs, window=window, mode=mode, chunk_size=chunk_size)
        outputs[mode] = (o, torch.autograd.grad(o.sin().sum(), inputs))
    torch.testing.assert_close(outputs["chunk"][0], outputs["recurrent"][0])
    for g, g_ref in zip(outputs["chunk"][1], outputs["recurrent"][1], strict=True):
        torch.testing.assert_close(g, g_ref)


def test_rwkv_time_mix_is_eq_11() -> None:
    """wkv of every channel equals eq. 11 evaluated directly (sums of exponentials, float64)."""
    mixer = make("rwkv")
    x = torch.randn(1, 11, D_MODEL)
    _, k, v = mixer.rkv(x, token_shift(x))
    for channel in (0, 7, D_MODEL - 1):
        w = math.exp(mixer.time_decay[channel].item())
        u = mixer.time_first[channel].item()
        kc, vc = k[0, :, channel].tolist(), v[0, :, channel].tolist()
        expected = []
        for t in range(len(kc)):
            weights = [math.exp(-(t - 1 - j) * w + kc[j]) for j in range(t)]
            weights.append(math.exp(u + kc[t]))
            expected.append(sum(a * b for a, b in zip(weights, vc, strict=False)) / sum(weights))
        for mode in MODES:
            wkv, _ = mixer.wkv(k, v, mode)
            torch.testing.assert_close(wkv[0, :, channel], torch.tensor(expected))
    wkv, _ = mixer.wkv(200 * k, v, "chunk")  # e^{200 k} overflows; the running max does not
    assert torch.isfinite(wkv).all()


def test_rff_denominator_goes_negative_and_is_not_clamped() -> None:
    """Pitfall 2: with large inputs cos/sin features have random signs, so phi(q)^T z_t (eq. 9's
    denominator) is tiny or negative, and the mixer divides by it as it is."""
    mixer = make("rff", n_heads=1)
    x = 30 * torch.randn(1, 64, D_MODEL)
    phi_q, phi_k, v = mixer.features(x)
    den = (phi_q * phi_k.cumsum(2)).sum(-1)
    assert (phi_k < 0).any()
    assert (den < 0).any()
    assert den.abs().min() < 1e-2 * den.abs().max()
    expected = linear_attention_cumsum(phi_q, phi_k, v)  # plain eq. 9, eps = 1e-6
    assert expected.abs().max() > 100 * v.abs().max()  # no longer an average of the values
    with pytest.raises(DenominatorCollapse, match="denominator .* collapsed"):
        mixer(x)  # the collapse is reported, never clamped away
    small = mixer.features(0.01 * x)
    assert ((small[0] * small[1].cumsum(2)).sum(-1) > 0).all()  # near 0, features agree


@pytest.fixture
def one_thread():
    """4096 steps of tiny ops: one thread avoids intra-op threading overhead (several x)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", [*ZOO, "softmax"])
def test_state_memory_after_16_and_4096_steps(name: str, one_thread: None) -> None:
    torch.manual_seed(0)
    model = LanguageModel(11, 16, name, d_model=D_MODEL, n_layers=1, short_conv=0)
    mixer = model.blocks[0].mixer.eval()
    state = mixer.init_state(1)
    floats = {}
    with torch.inference_mode():
        for t in range(1, 4097):
            _, state = mixer.step(torch.randn(1, D_MODEL), state)
            if t in (16, 4096):
                floats[t] = sum(s.numel() for s in state)
                assert floats[t] == mixer.state_size(t) == model.state_size(t)
    if name == "softmax":
        assert floats[4096] == 2 * 4096 * D_MODEL > floats[16]
    else:
        assert floats[4096] == floats[16]


def test_based_default_state_size() -> None:
    """H (D d_v + D) with D = 1 + 16 + 256 = 273, d_v = 32, plus a 16-token KV cache."""
    mixer = build_mixer("based", 64)
    assert mixer.feature_dim == 273
    assert mixer.state_size(64) == 2 * (273 * 32 + 273) + 2 * 16 * 64 == 20_066
    assert mixer.state_size(8) == 2 * (273 * 32 + 273) + 2 * 8 * 64


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("sliding_window", {"window": 0}, "window=0"),
        ("based", {"window": -1}, "window=-1"),
        ("based", {"feature_dim": 0}, "feature_dim=0"),
        ("rff", {"feature_dim": 7}, "feature_dim=7"),
        ("rff", {"redraw_every": -1}, "redraw_every=-1"),
        ("retnet", {"mode": "fast"}, "mode='fast'"),
        ("rwkv", {"chunk_size": 0}, "chunk_size=0"),
        ("deltanet", {"n_heads": 5}, "n_heads=5"),
    ],
)
def test_bad_params_name_the_parameter(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_mixer(name, D_MODEL, **params)
