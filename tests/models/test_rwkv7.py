"""RWKV-7 (`rwkv7`): the layer against a step-by-step float64 reference of fla's
`RWKV7Attention` (a first layer, no cache) written here in fla's value-by-key state layout,
in every mode; the gated DPLR kernel split and continued; the decay range, fla's first-layer
initialisation, the state size with the token shift's window, the rank bound and its knob.
The generic contract (causality, modes, step, state size, precision, compile) is in
test_mixers.py and its neighbours; the DPLR kernel's modes against its recurrence in
test_kda.py."""

import math

import pytest
import torch

from harness.records.record import state_record
from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES
from models.kernels.dplr import gated_dplr
from tests.models.kernel_checks import assert_split_continues

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randomise(mixer: torch.nn.Module, seed: int = 0) -> None:
    """Every parameter redrawn (the LoRAs' zero first matrices too), so that each path of the
    layer carries the input; the mixes kept in [0, 1] and the decay LoRA near fla's bias."""
    g = gen(seed)
    with torch.no_grad():
        for name, p in mixer.named_parameters():
            if name.startswith("x_"):
                p.copy_(torch.rand(p.shape, generator=g))
            else:
                p.add_(0.3 * torch.randn(p.shape, generator=g))


def fla_rwkv7_layer(m, x: torch.Tensor) -> torch.Tensor:
    """fla's `RWKV7Attention.forward` for layer 0 (v_first = v, no v_lora) without cache,
    step by step in float64, its state S in fla's layout (value rows, key columns):

        S_t = S_{t-1} (diag(w_t) - kk_t (a_t * kk_t)^T) + v_t k_t^T,   o_t = S_t r_t"""
    B, T, C = x.shape
    H, dk, dv = m.n_heads, m.head_k_dim, m.head_v_dim
    shifted = torch.cat([torch.zeros(B, 1, C), x[:, :-1]], 1)
    delta = shifted - x

    def lora(module, z):
        first, act, second = module.lora
        return second(act(first(z)))

    xr, xw, xk, xv, xa, xg = (x + delta * mu for mu in (m.x_r, m.x_w, m.x_k, m.x_v, m.x_a, m.x_g))
    r, k, v = xr @ m.r_proj.weight.T, xk @ m.k_proj.weight.T, xv @ m.v_proj.weight.T
    w = -0.6065306597126334 * torch.sigmoid(lora(m.w_lora, xw))
    a = torch.sigmoid(lora(m.a_lora, xa))
    g = lora(m.g_lora, xg)
    kk = (k * m.k_k).view(B, T, H, dk)
    kk = kk / kk.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    k = k * (1 + (a - 1) * m.k_a)
    r, w, k, a = (t.view(B, T, H, dk) for t in (r, w, k, a))
    v = v.view(B, T, H, dv)
    o = torch.zeros(B, T, H, dv)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(dv, dk)
            for t in range(T):
                transition = torch.diag(w[b, t, h].exp()) - torch.outer(
                    kk[b, t, h], a[b, t, h] * kk[b, t, h]
                )
                S = S @ transition + torch.outer(v[b, t, h], k[b, t, h])
                o[b, t, h] = S @ r[b, t, h]
    mean = o.mean(-1, keepdim=True)
    var = o.var(-1, unbiased=False, keepdim=True)
    normed = (o - mean) / torch.sqrt(var + m.g_norm.eps)
    normed = normed.reshape(B, T, H * dv) * m.g_norm.weight + m.g_norm.bias
    bonus = ((r * k * m.r_k).sum(-1, keepdim=True) * v).reshape(B, T, H * dv)
    return ((normed + bonus) * g) @ m.o_proj.weight.T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", [{}, {"head_k_dim": 3, "n_heads": 4}])
def test_rwkv7_is_fla_layer_written_step_by_step(mode: str, params: dict) -> None:
    torch.manual_seed(0)
    mixer = build_mixer("rwkv7", D_MODEL, mode=mode, chunk_size=8, **params).double()
    randomise(mixer)
    x = torch.randn(2, 29, D_MODEL, generator=gen(1))
    torch.testing.assert_close(mixer(x), fla_rwkv7_layer(mixer, x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_gated_dplr_split_and_continued_is_the_whole_sequence(mode: str) -> None:
    g = gen(3)
    q, k, a, b = (torch.randn(2, 3, 41, 5, generator=g) for _ in range(4))
    a, b = 0.4 * a, 0.4 * b
    v = torch.randn(2, 3, 41, 4, generator=g)
    log_gate = -torch.rand(2, 3, 41, 5, generator=g)
    assert_split_continues(gated_dplr, (q, k, v, a, b, log_gate), 22, mode)


def test_rwkv7_decay_and_removal_ranges() -> None:
    """w_t in [exp(-e^{-1/2}), 1) per key channel and token, the removal share alpha in
    (0, 1), kk of unit norm per head; b = -kk, a = alpha * kk."""
    mixer = build_mixer("rwkv7", D_MODEL).double()
    randomise(mixer)
    x = 2 * torch.randn(2, 13, D_MODEL, generator=gen(4))
    r, k, v, a, b, log_w, g = mixer.projections(x, torch.zeros_like(x))
    assert log_w.shape == (2, 2, 13, 8)
    assert (log_w < 0).all() and (log_w > -math.exp(-0.5)).all()
    torch.testing.assert_close(b.norm(dim=-1), torch.ones(2, 2, 13))
    alpha = a / -b
    assert (alpha > 0).all() and (alpha < 1).all()


def test_rwkv7_initialisation_is_fla_first_layer() -> None:
    """fla's `_initialize_weights` at layer_idx 0 (C = K = 64, head dim 32): the mixes
    1 - (n / C)^p, k_k, k_a, r_k, the LoRAs' biases and zero first matrices, W_k orthogonal
    times 0.1; W_o not zero (a named difference) and no value LoRA (no v_first)."""
    torch.manual_seed(0)
    m = build_mixer("rwkv7", 64)
    n = torch.arange(64.0)
    torch.testing.assert_close(m.x_r.data, 1 - (n / 64) ** 0.2)
    torch.testing.assert_close(m.x_w.data, 1 - (n / 64) ** 0.9)
    torch.testing.assert_close(m.x_k.data, 1 - (n / 64) ** 0.7)
    torch.testing.assert_close(m.x_g.data, 1 - (n / 64) ** 0.2)
    linear = n / 63 - 0.5
    zigzag = ((n % 32) - 15.5) / 15.5
    zigzag = zigzag * zigzag.abs()
    torch.testing.assert_close(m.k_k.data, 0.71 - linear * 0.1)
    assert (m.k_a == 1.02).all() and (m.r_k == -0.04).all() and m.r_k.shape == (2, 32)
    torch.testing.assert_close(m.w_lora.lora[2].bias.data, -6 + 6 * n / 63 + 0.5 + zigzag * 2.5)
    torch.testing.assert_close(m.a_lora.lora[2].bias.data, -0.19 + zigzag * 0.3 + linear * 0.4)
    for lora in (m.w_lora, m.a_lora, m.g_lora):
        assert (lora.lora[0].weight == 0).all() and lora.lora[0].weight.shape[0] == 32
    assert m.g_lora.lora[2].bias is None
    wk = m.k_proj.weight.data
    torch.testing.assert_close(wk @ wk.T, 0.01 * torch.eye(64), atol=1e-6, rtol=1e-5)
    assert m.o_proj.weight.abs().sum() > 0
    assert not hasattr(m, "v_lora")
    assert m.g_norm.eps == pytest.approx(32e-5)
    assert {"x_r", "k_k", "k_a", "r_k"} <= m.no_weight_decay()


@pytest.mark.parametrize(("params", "dk"), [({}, 32), ({"head_k_dim": 4}, 4), ({"n_heads": 4}, 16)])
def test_rwkv7_state_size_and_rank_bound(params: dict, dk: int) -> None:
    """H d_k d_v floats of state plus the token shift's d_model (conv state); rank bound
    H d_k; the block's shared conv stays on and counts as conv state too."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, "rwkv7", params, d_model=64, short_conv=4)
    mixer = model.blocks[0].mixer
    heads = params.get("n_heads", 2)
    floats = heads * dk * (64 // heads)
    assert mixer.state_knob == "head_k_dim" and mixer.head_k_dim == dk
    assert mixer.conv_state_size() == 64 and not mixer.owns_short_conv
    assert mixer.state_size(64) == mixer.state_size(4096) == floats + 64
    assert mixer.rank_bound(64) == heads * dk
    state = state_record(model, 64)
    assert state["mixer_floats_per_layer"] == floats
    assert state["conv_floats_per_layer"] == 64 + 3 * 64
    assert state["knob"] == {"name": "head_k_dim", "value": dk}


@pytest.mark.parametrize(
    ("params", "match"),
    [({"head_k_dim": 0}, "head_k_dim=0"), ({"a_low_rank_dim": 0}, "a_low_rank_dim=0")],
)
def test_rwkv7_bad_params_name_the_parameter(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_mixer("rwkv7", D_MODEL, **params)


def test_rwkv7_default_lora_ranks_follow_fla() -> None:
    """fla's formula, max(32, round(scale sqrt(C) factor / 32) 32) with Python's round: at
    d_model 1024, head dim 64: 80 / 32 = 2.5 rounds to 2 (64), and 160 for the gate."""
    big = build_mixer("rwkv7", 1024, n_heads=16)
    ranks = [lora.lora[0].weight.shape[0] for lora in (big.w_lora, big.a_lora, big.g_lora)]
    assert ranks == [64, 64, 160]
    small = build_mixer("rwkv7", 64)
    assert [lo.lora[0].weight.shape[0] for lo in (small.w_lora, small.a_lora, small.g_lora)] == [
        32
    ] * 3
