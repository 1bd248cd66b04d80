"""Gated DeltaProduct (`gated_deltaproduct`): the layer against a step-by-step float64
reference of fla's `GatedDeltaProduct` written here (n Householder steps per token, the gate
once per token, the read after the last step), in every mode; n = 1 without negative
eigenvalues is Gated DeltaNet; the write rates' range; the state size, equal for every n,
and the rank bound. The generic contract (causality, modes, step, state size, precision,
compile) is in test_mixers.py and its neighbours."""

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fla_layer(m, x: torch.Tensor) -> torch.Tensor:
    """fla's `GatedDeltaProduct.forward` (no cache, no padding) with the mixer's weights,
    step by step: the three short convs by their taps, the keys and values of token t laid
    out (n, heads, dim), l2norm with eps 1e-6, q scaled by d_k^-1/2, beta = 2 sigmoid (or
    sigmoid), g = -exp(A_log) softplus(a_proj x + dt_bias); per token the state decays once,
    takes n delta steps, and is read by q; then the swish-gated RMSNorm and o_proj."""
    B, T, _ = x.shape
    H, dk, dv, n = m.n_heads, m.head_k_dim, m.head_v_dim, m.num_householder
    proj = x @ m.qkv.weight.T
    if m.conv is None:
        conv = F.silu(proj)
    else:
        kernel = m.conv.conv.weight[:, 0]
        K = kernel.shape[1]
        conv = torch.zeros_like(proj)
        for t in range(T):
            for i in range(K):
                if t - (K - 1 - i) >= 0:
                    conv[:, t] += kernel[:, i] * proj[:, t - (K - 1 - i)]
        conv = F.silu(conv)
    q, k, v = conv.split([H * dk, n * H * dk, n * H * dv], -1)
    q, k, v = q.view(B, T, H, dk), k.view(B, T, n, H, dk), v.view(B, T, n, H, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk**-0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(x @ m.beta.weight.T).view(B, T, n, H)
    beta = 2 * beta if m.allow_neg_eigval else beta
    gate = m.forget_gate
    g = -gate.A_log.exp() * F.softplus(x @ m.forget_input.weight.T + gate.dt_bias)
    o = torch.zeros(B, T, H, dv)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(dk, dv)
            for t in range(T):
                S = S * g[b, t, h].exp()
                for j in range(n):
                    kj = k[b, t, j, h]
                    S = S + beta[b, t, j, h] * torch.outer(kj, v[b, t, j, h] - S.T @ kj)
                o[b, t, h] = S.T @ q[b, t, h]
    rms = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + 1e-5) * m.norm.weight
    z = (x @ m.output_gate.weight.T).view(B, T, H, dv)
    return (rms * F.silu(z)).reshape(B, T, H * dv) @ m.out.weight.T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"num_householder": 3, "head_k_dim": 3, "allow_neg_eigval": False, "conv_size": 2},
        {"num_householder": 1, "conv_size": 0},
    ],
)
def test_layer_is_fla_layer_written_step_by_step(mode: str, params: dict) -> None:
    torch.manual_seed(0)
    mixer = build_mixer("gated_deltaproduct", D_MODEL, mode=mode, chunk_size=4, **params)
    mixer = mixer.double()
    with torch.no_grad():
        mixer.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 23, D_MODEL, generator=gen(1))
    torch.testing.assert_close(mixer(x), fla_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_one_step_without_negative_eigenvalues_is_gated_deltanet() -> None:
    """n = 1, beta in (0, 1): Gated DeltaNet's update with the same weights (by the same
    names). Both normalise q and k with fla's l2norm (`models.mixers.head_norm.l2norm`), so
    the two agree to float64 rounding."""
    torch.manual_seed(0)
    product = build_mixer(
        "gated_deltaproduct", D_MODEL, num_householder=1, allow_neg_eigval=False
    ).double()
    gdn = build_mixer("gated_deltanet", D_MODEL).double()
    gdn.load_state_dict(product.state_dict())
    x = torch.randn(2, 21, D_MODEL, generator=gen(2))
    torch.testing.assert_close(product(x), gdn(x), rtol=1e-12, atol=1e-12)


def test_write_rates_reach_up_to_2_with_negative_eigenvalues() -> None:
    mixer = build_mixer("gated_deltaproduct", D_MODEL, num_householder=3)
    x = 3 * torch.randn(2, 9, D_MODEL, generator=gen(3))
    beta = mixer.write_rate(x)
    assert beta.shape == (2, 2, 27)
    assert (beta > 0).all() and (beta < 2).all() and beta.max() > 1
    log_gate = mixer.log_gate(x).view(2, 2, 9, 3)
    assert (log_gate[..., 0] < 0).all() and (log_gate[..., 1:] == 0).all()


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("dk", [None, 4])
def test_state_and_bound_do_not_grow_with_the_householder_steps(n: int, dk: int | None) -> None:
    """H d_k d_v floats of state whatever n, rank bound H d_k; the convs' window grows with
    n: (conv_size - 1) (H d_k + n H d_k + n H d_v)."""
    torch.manual_seed(0)
    params = {"num_householder": n, "head_k_dim": dk}
    model = LanguageModel(11, 64, "gated_deltaproduct", params, d_model=64, short_conv=4)
    mixer = model.blocks[0].mixer
    k = 32 if dk is None else dk
    conv = 3 * (2 * k + n * 2 * k + n * 2 * 64)
    assert mixer.state_knob == "head_k_dim" and mixer.head_k_dim == k
    assert mixer.conv_state_size() == conv and mixer.owns_short_conv
    assert mixer.state_size(64) == mixer.state_size(4096) == 2 * k * 64 + conv
    assert mixer.rank_bound(64) == 2 * k


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"num_householder": 0}, "num_householder=0"),
        ({"allow_neg_eigval": 1}, "allow_neg_eigval=1"),
    ],
)
def test_bad_params_name_the_parameter(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_mixer("gated_deltaproduct", D_MODEL, **params)
