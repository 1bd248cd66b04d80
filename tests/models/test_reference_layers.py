"""DeltaNet, Gated DeltaNet and Mamba-2 as their reference layers build them (fla's
`delta_net.py`, `gated_deltanet.py`, mamba_ssm's `Mamba2Simple`; docs/background.md, section
16): their own causal conv + SiLU on each projection, q / k L2-normalised, beta from the layer
input, the per-head output norm, the default widths; the backbone leaves its shared conv out
of such a mixer's block. The generic contract (modes, causality, step) is in test_mixers.py."""

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.mixers.head_norm import l2norm
from models.mixers.short_conv import ShortConvolution

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16
OWN_CONV = ("deltanet", "gated_deltanet", "mamba2", "gla")


def make(name: str, d_model: int = D_MODEL, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer(name, d_model, **params).double()


def inputs(T: int = 21, seed: int = 1) -> torch.Tensor:
    return torch.randn(2, T, D_MODEL, generator=torch.Generator().manual_seed(seed))


def fla_l2norm(x: torch.Tensor) -> torch.Tensor:
    """fla's `l2norm` written out: x / sqrt(sum x^2 + 1e-6) over the last dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("scale", [1.0, 0.1, 1e-2, 1e-3, 3e-4, 1e-4, 0.0])
def test_l2norm_is_x_over_the_root_of_its_square_plus_1e_6(scale: float) -> None:
    """The delta rule's q, k normalisation (fla's `l2norm`), against the formula at every
    scale down to |x|^2 near 1e-6 and below, where it parts from `F.normalize`: at
    |x|^2 = 1e-6 exactly the output's norm is 1 / sqrt(2), and x = 0 gives 0."""
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0))
    x = scale * x / x.norm(dim=-1, keepdim=True)  # |x| = scale in every row
    expected = x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(l2norm(x), expected, rtol=1e-14, atol=0.0)
    norms = l2norm(x).norm(dim=-1)
    torch.testing.assert_close(norms, torch.full_like(norms, scale / (scale**2 + 1e-6) ** 0.5))
    if scale == 1e-3:  # |x|^2 = eps: half-way, where F.normalize would still give 1
        torch.testing.assert_close(norms, torch.full_like(norms, 2**-0.5))
        torch.testing.assert_close(F.normalize(x, dim=-1).norm(dim=-1), torch.ones_like(norms))


@pytest.mark.parametrize("name", ["deltanet", "kda", "gated_deltaproduct"])
def test_the_delta_rule_mixers_share_the_one_l2norm(name: str) -> None:
    """Each mixer that normalises q and k the delta rule's way calls the one helper
    (`gated_deltanet` through DeltaNet's `features`)."""
    import importlib

    from models.mixers.deltanet import DeltaNet
    from models.mixers.gated_deltanet import GatedDeltaNet

    assert importlib.import_module(f"models.mixers.{name}").l2norm is l2norm
    assert GatedDeltaNet.features is DeltaNet.features


def causal_conv_silu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """SiLU(sum_i w_i x_{t-i}) per channel by an explicit loop: x [B, T, C], weight [C, 1, K]
    (nn.Conv1d's layout: w[..., K - 1] multiplies the current token)."""
    K, out = weight.shape[-1], torch.zeros_like(x)
    for t in range(x.shape[1]):
        for i in range(K):
            if t - i >= 0:
                out[:, t] += weight[:, 0, K - 1 - i] * x[:, t - i]
    return F.silu(out)


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet"])
def test_q_k_v_each_get_their_own_causal_conv_and_silu_then_l2(name: str) -> None:
    """q, k, v = SiLU(conv(W x)) with one filter per channel and no bias (fla's conv_bias
    False); q / (sqrt(|q|^2 + 1e-6) sqrt(d_k)), k / sqrt(|k|^2 + 1e-6) (fla's l2norm); v as
    convolved."""
    mixer = make(name)
    assert mixer.conv.conv.bias is None and mixer.conv.kernel_size == 4
    x = inputs()
    q, k, v, _ = mixer.features(x)
    by_hand = causal_conv_silu(x @ mixer.qkv.weight.T, mixer.conv.conv.weight)
    hq, hk, hv = by_hand.split(mixer.widths, -1)

    def heads(p: torch.Tensor) -> torch.Tensor:
        return p.view(2, x.shape[1], mixer.n_heads, -1).transpose(1, 2)

    torch.testing.assert_close(q, fla_l2norm(heads(hq)) * mixer.head_k_dim**-0.5)
    torch.testing.assert_close(k, fla_l2norm(heads(hk)))
    torch.testing.assert_close(v, heads(hv))


def test_a_key_can_take_the_previous_token_while_the_query_keeps_the_current_one() -> None:
    """What a per-projection conv allows and a shared one before the mixer does not: with the
    key filters set to a one-step shift and the query filters to the identity, k_t is built
    from x_{t-1} alone and q_t from x_t alone."""
    mixer = make("deltanet")
    with torch.no_grad():
        w = mixer.conv.conv.weight
        w.zero_()
        kw = mixer.key_width
        w[:kw, 0, 3] = 1.0  # q: the current token
        w[kw : 2 * kw, 0, 2] = 1.0  # k: the previous token
        w[2 * kw :, 0, 3] = 1.0  # v: the current token
    x = inputs()
    q, k, _, _ = mixer.features(x)
    wq, wk, _ = mixer.qkv.weight.split(mixer.widths, 0)

    def unit(p: torch.Tensor) -> torch.Tensor:
        return fla_l2norm(F.silu(p).view(2, -1, mixer.n_heads, mixer.head_k_dim))

    torch.testing.assert_close(k[:, :, 1:], unit(x[:, :-1] @ wk.T).transpose(1, 2))
    torch.testing.assert_close(q, unit(x @ wq.T).transpose(1, 2) * mixer.head_k_dim**-0.5)


def test_mamba2_convolves_x_B_C_with_a_bias_not_z_or_dt() -> None:
    mixer = make("mamba2")
    assert mixer.conv.conv.bias is not None
    assert mixer.conv.conv.in_channels == mixer.inner + 2 * mixer.d_state  # x, B, C
    x = inputs()
    z, _, u = (x @ mixer.in_proj.weight.T).split(mixer.widths, -1)
    _, _, _, log_gate, z_mixer, _ = mixer.projections(x)
    torch.testing.assert_close(z_mixer, z)
    dt = F.softplus(u + mixer.gate.dt_bias).transpose(1, 2)
    torch.testing.assert_close(log_gate, -dt * mixer.gate.A_log.exp()[:, None])


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet"])
def test_beta_is_a_bias_free_projection_of_the_layer_input(name: str) -> None:
    mixer = make(name)
    assert mixer.beta.bias is None
    x = inputs()
    torch.testing.assert_close(
        mixer.write_rate(x), torch.sigmoid(x @ mixer.beta.weight.T).transpose(1, 2)
    )


def test_deltanet_output_is_a_per_head_rmsnorm_then_the_out_projection() -> None:
    """y = W_o RMSNorm_h(o) * w, no output gate (fla's use_gate False)."""
    mixer = make("deltanet")
    with torch.no_grad():
        mixer.norm.weight.copy_(torch.linspace(0.5, 2, mixer.head_v_dim))
    o = torch.randn(2, mixer.n_heads, 7, mixer.head_v_dim)
    rms = o.square().mean(-1, keepdim=True).add(1e-5).sqrt()
    normed = (o / rms * mixer.norm.weight).transpose(1, 2).reshape(2, 7, -1)
    torch.testing.assert_close(mixer.output(inputs(T=7), o), mixer.out(normed))


def test_default_widths_are_the_references_at_two_heads() -> None:
    """d_model 64, 2 heads: DeltaNet d_k = d_v = 32 (expand 1); Gated DeltaNet d_k 32,
    d_v 64 (expand_v 2); Mamba-2 inner 128 (expand 2), heads of 64, d_state 32; GLA d_k 16
    (expand_k 0.5), d_v 32."""
    torch.manual_seed(0)
    dn, gdn, m2, gla = (build_mixer(n, 64) for n in ("deltanet", "gated_deltanet", "mamba2", "gla"))
    assert (dn.n_heads, dn.head_k_dim, dn.head_v_dim) == (2, 32, 32)
    assert (gdn.n_heads, gdn.head_k_dim, gdn.head_v_dim) == (2, 32, 64)
    assert (m2.n_heads, m2.inner, m2.head_dim, m2.d_state) == (2, 128, 64, 32)
    assert (gla.n_heads, gla.head_k_dim, gla.head_v_dim) == (2, 16, 32)


@pytest.mark.parametrize("name", [*OWN_CONV, "linear"])
def test_the_block_conv_is_off_exactly_where_the_mixer_owns_one(name: str) -> None:
    model = LanguageModel(11, 16, name, d_model=D_MODEL, n_layers=1, short_conv=4)
    owns = name in OWN_CONV
    assert model.blocks[0].mixer.owns_short_conv is owns
    assert (model.blocks[0].conv is None) is owns
    if owns:  # the ablation: no own conv, and the block's shared conv feeds the mixer
        ablated = LanguageModel(11, 16, name, {"conv_size": 0}, d_model=D_MODEL, short_conv=4)
        assert not ablated.blocks[0].mixer.owns_short_conv
        assert ablated.blocks[0].conv is not None


def test_gla_owns_its_convs_as_fla_with_use_short_conv() -> None:
    """GLA's q, k, v each through a causal conv + SiLU (no bias), as fla's GLA with
    use_short_conv=True (not fla's default: the docstring says why); the block's shared conv
    is then off."""
    mixer = make("gla")
    assert mixer.owns_short_conv and mixer.conv.conv.bias is None
    x = inputs()
    q, k, v, _ = mixer.features(x)
    hq, hk, hv = causal_conv_silu(x @ mixer.qkv.weight.T, mixer.conv.conv.weight).split(
        mixer.widths, -1
    )

    def heads(p: torch.Tensor) -> torch.Tensor:
        return p.view(2, x.shape[1], mixer.n_heads, -1).transpose(1, 2)

    torch.testing.assert_close(q, heads(hq) * mixer.head_k_dim**-0.5)
    torch.testing.assert_close(k, heads(hk))
    torch.testing.assert_close(v, heads(hv))
    model = LanguageModel(11, 16, "gla", {"conv_size": 4}, d_model=D_MODEL, short_conv=4)
    assert model.blocks[0].conv is None


def test_short_convolution_step_reproduces_forward() -> None:
    torch.manual_seed(0)
    conv = ShortConvolution(5, 3, bias=True).double()
    x = torch.randn(2, 9, 5)
    y = conv(x)
    window = conv.init_window(2, dtype=torch.float64)
    for t in range(9):
        y_t, window = conv.step(x[:, t], window)
        torch.testing.assert_close(y_t, y[:, t])
    assert conv.window_floats == 5 * 2
