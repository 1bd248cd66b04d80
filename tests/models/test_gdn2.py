"""Gated DeltaNet-2 (`gdn2`) and its kernel (`models.kernels.gdn2`): the rule against a
step-by-step recurrence of explicit matrices written here from the equation (float64, odd
lengths, every mode, forward and backward, a sequence split and its state passed on), KDA's
rule and KDA's layer where b = w = beta, the layer against a step-by-step float64 reference of
fla's `GatedDeltaNet2` written here, the gates' shapes, the state size and the rank bound. The
generic contract (causality, modes, step, state size, precision, compile) is in test_mixers.py
and its neighbours."""

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES, gdn2_rule, kda_rule
from tests.models.kernel_checks import assert_same_rule, assert_split_continues

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def gdn2_steps(q, k, v, erase, write, log_gate, S=None):
    """S_t = (I - k_t (b_t * k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,
    o_t = S_t^T q_t, one head, one token at a time, as explicit matrices."""
    B, H, T, D = q.shape
    eye, outs, states = torch.eye(D), [], []
    for b in range(B):
        for h in range(H):
            s = torch.zeros(D, v.shape[-1]) if S is None else S[b, h]
            for t in range(T):
                kt = k[b, h, t]
                transition = eye - torch.outer(kt, erase[b, h, t] * kt)
                s = transition @ torch.diag(log_gate[b, h, t].exp()) @ s
                s = s + torch.outer(kt, write[b, h, t] * v[b, h, t])
                outs.append(s.T @ q[b, h, t])
            states.append(s)
    return torch.stack(outs).view(B, H, T, -1), torch.stack(states).view(B, H, D, -1)


def gdn2_inputs(T: int, seed: int = 0, D: int = 5, Dv: int = 4, gate_scale: float = 1.0):
    g = gen(seed)
    q = torch.randn(2, 3, T, D, generator=g)
    k = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    v = torch.randn(2, 3, T, Dv, generator=g)
    erase = torch.rand(2, 3, T, D, generator=g)
    write = torch.rand(2, 3, T, Dv, generator=g)
    log_gate = -gate_scale * torch.rand(2, 3, T, D, generator=g)
    return q, k, v, erase, write, log_gate


@pytest.mark.parametrize("T", [1, 13, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"),
    [("recurrent", 8), ("chunk", 8), ("chunk", 20), ("chunk", 64), ("parallel", 8)],
)
def test_gdn2_rule_is_the_recurrence_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    leaves = [x.requires_grad_() for x in gdn2_inputs(T)]
    S0 = torch.randn(2, 3, 5, 4, generator=gen(9), requires_grad=True)
    expected, S_expected = gdn2_steps(*leaves, S0)
    o, S = gdn2_rule(*leaves, mode=mode, chunk_size=chunk_size, initial_state=S0, return_state=True)
    assert_same_rule((o, S), (expected, S_expected), [*leaves, S0])


@pytest.mark.parametrize("mode", MODES)
def test_gdn2_rule_split_and_continued_is_the_whole_sequence(mode: str) -> None:
    assert_split_continues(gdn2_rule, gdn2_inputs(41, seed=3), 19, mode)


@pytest.mark.parametrize("mode", MODES)
def test_gdn2_rule_with_erase_and_write_equal_to_beta_is_kda(mode: str) -> None:
    """b_t = w_t = beta_t (one number per head and token, broadcast over the channels)."""
    q, k, v, _, _, log_gate = gdn2_inputs(37, seed=4)
    beta = torch.rand(2, 3, 37, generator=gen(5))
    erase, write = beta[..., None].expand_as(k), beta[..., None].expand_as(v)
    o = gdn2_rule(q, k, v, erase, write, log_gate, mode=mode, chunk_size=8)
    torch.testing.assert_close(o, kda_rule(q, k, v, beta, log_gate, mode="recurrent"))


@pytest.mark.parametrize("mode", ["chunk", "parallel"])
def test_gdn2_rule_survives_gates_that_clear_the_state(mode: str) -> None:
    """Log-gates down to -60 per step: the chunk form stays finite and equal to the steps."""
    inputs = gdn2_inputs(45, seed=5, gate_scale=60.0)
    expected, _ = gdn2_steps(*inputs)
    o = gdn2_rule(*inputs, mode=mode, chunk_size=32)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)


def test_gdn2_rule_refuses_gates_of_the_wrong_shape() -> None:
    q, k, v, erase, write, log_gate = gdn2_inputs(9)
    with pytest.raises(ValueError, match="write"):
        gdn2_rule(q, k, v, erase, erase, log_gate)


def make(name: str, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer(name, D_MODEL, chunk_size=8, **params).double()


@pytest.mark.parametrize("mode", MODES)
def test_gdn2_layer_with_both_gates_copying_beta_is_the_kda_layer(mode: str) -> None:
    """Every row of W_b and W_w for head h set to KDA's beta row of head h: b = w = beta, and
    with KDA's other weights the two layers give the same outputs."""
    gdn2, kda = make("gdn2", mode=mode), make("kda", mode=mode)
    shared = dict(gdn2.named_parameters())
    with torch.no_grad():
        for name, weight in kda.named_parameters():
            if name != "beta.weight":
                weight.copy_(shared[name] + 0.1 * torch.randn_like(weight))
                shared[name].copy_(weight)
        gdn2.b_proj.weight.copy_(kda.beta.weight.repeat_interleave(gdn2.head_k_dim, 0))
        gdn2.w_proj.weight.copy_(kda.beta.weight.repeat_interleave(gdn2.head_v_dim, 0))
    x = torch.randn(2, 23, D_MODEL, generator=gen(2))
    torch.testing.assert_close(gdn2(x), kda(x), rtol=1e-10, atol=1e-10)


def fla_gdn2_layer(mixer, x: torch.Tensor) -> torch.Tensor:
    """fla's `GatedDeltaNet2.forward` (no cache, no padding) with the mixer's weights, written
    step by step in float64: the three short convs by their taps and SiLU, the l2norm with
    eps 1e-6 (`use_qk_l2norm_in_kernel`), the decay -exp(A_log) softplus(f_proj(x) +
    dt_bias), b = sigmoid(b_proj x), w = sigmoid(w_proj x), `naive_recurrent_gdn2`'s loop
    (decay, erase at b * k, write w * v; q scaled by d_k^-1/2), the sigmoid-gated RMSNorm and
    o_proj."""
    Bsz, T, _ = x.shape
    H, dk, dv = mixer.n_heads, mixer.head_k_dim, mixer.head_v_dim
    proj = x @ mixer.qkv.weight.T
    kernel = mixer.conv.conv.weight[:, 0]  # [channels, K], tap K-1 is the current token
    K = kernel.shape[1]
    conv = torch.zeros_like(proj)
    for t in range(T):
        for i in range(K):
            if t - (K - 1 - i) >= 0:
                conv[:, t] += kernel[:, i] * proj[:, t - (K - 1 - i)]
    conv = F.silu(conv)
    q, k, v = conv.split([H * dk, H * dk, H * dv], -1)
    q, k, v = q.view(Bsz, T, H, dk), k.view(Bsz, T, H, dk), v.view(Bsz, T, H, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk**-0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    f = mixer.f_proj[1](mixer.f_proj[0](x)) + mixer.dt_bias
    g = -mixer.A_log.exp()[:, None] * F.softplus(f.view(Bsz, T, H, dk))
    erase = torch.sigmoid(x @ mixer.b_proj.weight.T).view(Bsz, T, H, dk)
    write = torch.sigmoid(x @ mixer.w_proj.weight.T).view(Bsz, T, H, dv)
    o = torch.zeros(Bsz, T, H, dv)
    for b in range(Bsz):
        for h in range(H):
            S = torch.zeros(dk, dv)
            for t in range(T):
                S = S * g[b, t, h].exp()[:, None]
                kt = k[b, t, h]
                removed = S.T @ (erase[b, t, h] * kt)
                S = S + torch.outer(kt, write[b, t, h] * v[b, t, h] - removed)
                o[b, t, h] = S.T @ q[b, t, h]
    rms = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + 1e-5) * mixer.norm.weight
    gate = mixer.g_proj[1](mixer.g_proj[0](x)).view(Bsz, T, H, dv)
    return (rms * torch.sigmoid(gate)).reshape(Bsz, T, H * dv) @ mixer.out.weight.T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", [{}, {"head_k_dim": 3, "expand_v": 1.5, "gate_rank": 5}])
def test_gdn2_layer_is_fla_layer_written_step_by_step(mode: str, params: dict) -> None:
    mixer = make("gdn2", mode=mode, **params)
    with torch.no_grad():
        mixer.norm.weight.uniform_(0.5, 1.5)  # not all ones, so the gain is checked
        mixer.g_proj[1].bias.uniform_(-1, 1)
    x = torch.randn(2, 29, D_MODEL, generator=gen(2))
    torch.testing.assert_close(mixer(x), fla_gdn2_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_gdn2_gates_are_one_per_channel() -> None:
    """b: one per head, token and key channel; w: one per value channel; both in (0, 1), no
    bias, and the channels of a head differ (not one rate per head as KDA's beta)."""
    torch.manual_seed(0)
    mixer = build_mixer("gdn2", 64, n_heads=4, expand_v=2.0)
    assert not hasattr(mixer, "beta")
    assert mixer.b_proj.weight.shape == (64, 64) and mixer.b_proj.bias is None
    assert mixer.w_proj.weight.shape == (128, 64) and mixer.w_proj.bias is None
    erase, write = mixer.gates(torch.randn(2, 7, 64))
    assert erase.shape == (2, 4, 7, 16) and write.shape == (2, 4, 7, 32)
    for gate in (erase, write):
        assert ((gate > 0) & (gate < 1)).all() and gate.std(-1).min() > 0


@pytest.mark.parametrize(
    ("params", "dk", "dv"), [({}, 32, 32), ({"head_k_dim": 4}, 4, 32), ({"expand_v": 2.0}, 32, 64)]
)
def test_gdn2_state_size_and_rank_bound(params: dict, dk: int, dv: int) -> None:
    """H d_k d_v floats of state plus (conv_size - 1) (2 H d_k + H d_v) of conv windows;
    rank bound H d_k (the knob `head_k_dim`); the block's shared conv is off for it."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, "gdn2", params, d_model=64, short_conv=4)
    mixer = model.blocks[0].mixer
    conv = 3 * (2 * 2 * dk + 2 * dv)
    assert mixer.state_knob == "head_k_dim" and mixer.head_k_dim == dk
    assert mixer.conv_state_size() == conv
    assert mixer.state_size(64) == mixer.state_size(4096) == 2 * dk * dv + conv
    assert mixer.rank_bound(64) == 2 * dk
    assert mixer.owns_short_conv and model.blocks[0].state_size(64) == mixer.state_size(64)
