"""MesaNet (`mesanet`) and its kernel (`models.kernels.mesa`): the chunk and parallel forms
against a step loop written here from the equations (float64, odd lengths, forward and
backward, a sequence split and its state passed on); fla's conjugate gradient against the exact
solve; the optimal linear read-out (exact at lamb -> 0 on independent keys, better than the
plain sum on correlated ones); the layer against fla's `MesaNet` written out step by step; the
parameterisation, the state size and the rank bound. The generic contract (causality, modes,
step, state size, precision, compile) is in test_mixers.py and its neighbours."""

import math

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES, conjugate_gradient
from models.kernels.mesa import mesa_attention

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mesa_steps(q, k, v, beta, log_gate, lamb, state=None):
    """H_kk <- a H_kk + b k k^T, H_kv <- a H_kv + b k v^T, o = H_kv^T (H_kk + diag(lamb))^-1 q,
    one head and one token at a time, with the inverse written out."""
    B, H, T, D = q.shape
    outs, kks, kvs = [], [], []
    for b in range(B):
        for h in range(H):
            Hkk = torch.zeros(D, D) if state is None else state[0][b, h]
            Hkv = torch.zeros(D, v.shape[-1]) if state is None else state[1][b, h]
            for t in range(T):
                a, w, kt = log_gate[b, h, t].exp(), beta[b, h, t], k[b, h, t]
                Hkk = a * Hkk + w * torch.outer(kt, kt)
                Hkv = a * Hkv + w * torch.outer(kt, v[b, h, t])
                outs.append(Hkv.T @ torch.linalg.inv(Hkk + torch.diag(lamb[h])) @ q[b, h, t])
            kks.append(Hkk)
            kvs.append(Hkv)
    D_v = v.shape[-1]
    return torch.stack(outs).view(B, H, T, D_v), (
        torch.stack(kks).view(B, H, D, D),
        torch.stack(kvs).view(B, H, D, D_v),
    )


def mesa_inputs(T: int, seed: int = 0, D: int = 5, Dv: int = 4, gate_scale: float = 1.0):
    g = gen(seed)
    q = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    k = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    v = torch.randn(2, 3, T, Dv, generator=g)
    beta = torch.rand(2, 3, T, generator=g)
    log_gate = -gate_scale * torch.rand(2, 3, T, generator=g)
    lamb = 0.25 + torch.rand(3, D, generator=g)
    return q, k, v, beta, log_gate, lamb


def start_state(seed: int, D: int = 5, Dv: int = 4):
    g = gen(seed)
    root = torch.randn(2, 3, D, D, generator=g)
    return root @ root.mT, torch.randn(2, 3, D, Dv, generator=g)


@pytest.mark.parametrize("T", [1, 13, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"),
    [("recurrent", 8), ("chunk", 8), ("chunk", 20), ("chunk", 64), ("parallel", 8)],
)
def test_mesa_attention_is_the_recurrence_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    leaves = [x.requires_grad_() for x in mesa_inputs(T)]
    S0 = [x.requires_grad_() for x in start_state(9)]
    expected, S_expected = mesa_steps(*leaves, S0)
    o, S = mesa_attention(
        *leaves, mode=mode, chunk_size=chunk_size, initial_state=tuple(S0), return_state=True
    )
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    for s, s_expected in zip(S, S_expected, strict=True):
        torch.testing.assert_close(s, s_expected, rtol=1e-10, atol=1e-10)

    def loss(o, S):
        return o.sin().sum() + S[0].square().sum() + S[1].square().sum()

    grads = torch.autograd.grad(loss(o, S), [*leaves, *S0])
    grads_expected = torch.autograd.grad(loss(expected, S_expected), [*leaves, *S0])
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("mode", "chunk_size"), [("chunk", 64), ("chunk", 4), ("parallel", 8)])
def test_mesa_attention_from_the_empty_state_forward_and_backward(
    mode: str, chunk_size: int
) -> None:
    """No state given or returned (one chunk reads no start state; several start from
    zero): outputs and gradients are the step loop's."""
    leaves = [x.requires_grad_() for x in mesa_inputs(13, seed=7)]
    expected, _ = mesa_steps(*leaves)
    o = mesa_attention(*leaves, mode=mode, chunk_size=chunk_size)
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum(), leaves)
    grads_expected = torch.autograd.grad(expected.sin().sum(), leaves)
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_mesa_attention_split_and_continued_is_the_whole_sequence(mode: str) -> None:
    inputs = mesa_inputs(41, seed=3)
    lamb, seqs = inputs[-1], inputs[:-1]
    whole, S_whole = mesa_attention(*inputs, mode=mode, chunk_size=8, return_state=True)
    cut = 19
    first, S = mesa_attention(
        *(x[:, :, :cut] for x in seqs), lamb, mode=mode, chunk_size=8, return_state=True
    )
    second, S_end = mesa_attention(
        *(x[:, :, cut:] for x in seqs),
        lamb,
        mode=mode,
        chunk_size=8,
        initial_state=S,
        return_state=True,
    )
    torch.testing.assert_close(torch.cat([first, second], 2), whole, rtol=1e-10, atol=1e-10)
    for s, s_whole in zip(S_end, S_whole, strict=True):
        torch.testing.assert_close(s, s_whole, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["chunk", "parallel"])
def test_mesa_attention_survives_gates_that_clear_the_state(mode: str) -> None:
    """Log-gates down to -60 per step: products over a block far below float64's smallest
    number; every exponent is a difference <= 0, so nothing overflows."""
    inputs = mesa_inputs(45, seed=5, gate_scale=60.0)
    expected, _ = mesa_steps(*inputs)
    o = mesa_attention(*inputs, mode=mode, chunk_size=32)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)


def test_mesa_attention_refuses_a_lambda_that_is_not_positive() -> None:
    q, k, v, beta, log_gate, lamb = mesa_inputs(5)
    with pytest.raises(ValueError, match="lamb must be > 0"):
        mesa_attention(q, k, v, beta, log_gate, lamb - 2.0)
    with pytest.raises(ValueError, match="lamb must have shape"):
        mesa_attention(q, k, v, beta, log_gate, lamb[:, :2])


def test_conjugate_gradient_without_guards_reaches_the_exact_solve_in_d_steps() -> None:
    """In exact arithmetic D conjugate-gradient steps solve a D x D system; in float64 with
    the guards off they reach `torch.linalg.solve` to rounding."""
    g = gen(0)
    root = torch.randn(50, 6, 6, generator=g)
    A = root @ root.mT + 0.25 * torch.eye(6)
    b = torch.randn(50, 6, generator=g)
    exact = torch.linalg.solve(A, b.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(conjugate_gradient(A, b, 6, eps=0.0), exact, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("D", [4, 16])
def test_fla_conjugate_gradient_is_within_its_guards_of_the_exact_solve(D: int) -> None:
    """fla's setting, 30 steps from 0 with divisions guarded by 1e-5, on MesaNet's systems
    (unit keys, beta in (0, 1), a gate of 0.99, lamb = 0.25, T = 256): x within 5e-3 of the
    exact solve (relative); the guards, not the step count, set that error (from a start at
    the exact solution the iteration stays there)."""
    g, T = gen(D), 256
    k = F.normalize(torch.randn(2, 2, T, D, generator=g), dim=-1)
    q = F.normalize(torch.randn(2, 2, T, D, generator=g), dim=-1)
    beta = torch.rand(2, 2, T, generator=g)
    c = torch.full((2, 2, T), math.log(0.99)).cumsum(-1)
    W = (c[..., :, None] - c[..., None, :]).exp().tril() * beta[..., None, :]
    A = torch.einsum("bhij,bhjd,bhje->bhide", W, k, k) + 0.25 * torch.eye(D)
    exact = torch.linalg.solve(A, q.unsqueeze(-1)).squeeze(-1)
    for x in (conjugate_gradient(A, q, 30), conjugate_gradient(A, q, 30, x0=exact)):
        error = (x - exact).norm(dim=-1) / exact.norm(dim=-1)
        assert error.max() < 5e-3
    from_exact = conjugate_gradient(A, q, 30, x0=exact)
    torch.testing.assert_close(from_exact, exact, rtol=1e-6, atol=1e-6)


def read_back(keys: torch.Tensor, values: torch.Tensor, lamb: float):
    """Write n bindings (beta 1, no decay), then read each with its own key (beta 0): the Mesa
    read-out and the plain sum H_kv^T q, [n, d_v] each."""
    n, D = keys.shape
    q = torch.cat([keys, keys])[None, None]
    k = torch.cat([keys, torch.zeros_like(keys)])[None, None]
    v = torch.cat([values, torch.zeros_like(values)])[None, None]
    beta = torch.cat([torch.ones(n), torch.zeros(n)])[None, None]
    log_gate = torch.zeros(1, 1, 2 * n)
    o = mesa_attention(q, k, v, beta, log_gate, torch.full((1, D), lamb))
    return o[0, 0, n:], (keys @ keys.T) @ values


@pytest.mark.parametrize("n", [3, 6])
def test_the_read_out_recovers_independent_keys_exactly_as_lamb_goes_to_0(n: int) -> None:
    """n <= D linearly independent keys, orthonormal or strongly correlated (each e_i plus a
    shared direction, pairwise overlap ~0.8): at lamb = 1e-10 the Mesa read-out returns every
    stored value (the optimal linear read-out), while the plain sum returns its value plus the
    others' crosstalk on the correlated keys."""
    D = 6
    values = torch.randn(n, 5, generator=gen(n))
    orthonormal = torch.linalg.qr(torch.randn(D, D, generator=gen(1)))[0][:n]
    mesa, plain = read_back(orthonormal, values, 1e-10)
    torch.testing.assert_close(mesa, values, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(plain, values, rtol=1e-12, atol=1e-12)
    correlated = F.normalize(torch.eye(D)[:n] + 0.9 * torch.ones(D) / D**0.5, dim=-1)
    mesa, plain = read_back(correlated, values, 1e-10)
    torch.testing.assert_close(mesa, values, rtol=1e-6, atol=1e-6)
    assert (plain - values).norm() > 0.5 * values.norm()


def test_the_read_out_beats_the_plain_sum_on_correlated_keys_at_lamb_one() -> None:
    """At the layer's initial lamb = 1 the read-out is shrunk (x = (H + I)^-1 q), but after
    normalising the scale away it still lies closer to the stored value than the plain sum's
    on correlated keys."""
    D, n = 8, 8
    values = F.normalize(torch.randn(n, 16, generator=gen(2)), dim=-1)
    keys = F.normalize(torch.eye(D) + 0.6 * torch.ones(D) / D**0.5, dim=-1)
    mesa, plain = read_back(keys, values, 1.0)
    cosine = lambda a: F.cosine_similarity(a, values, dim=-1)  # noqa: E731
    assert (cosine(mesa) > cosine(plain)).all()


def fla_mesanet_layer(mixer, x: torch.Tensor, cg_steps: int | None = None) -> torch.Tensor:
    """fla's `MesaNet.forward` (no cache, no padding) with the mixer's weights, step by step
    in float64: the q and k short convs by their taps + SiLU, v as projected, fla's l2norm
    (eps 1e-6) of q and k, g = logsigmoid(a_proj x), beta = sigmoid(b_proj x),
    lamb = softplus(lambda_params) + 0.25, `naive_mesa_net_exact`'s loop (or, with
    `cg_steps`, its system solved by fla's guarded conjugate gradient from 0, as
    `chunk_mesa_net` does), the per-head RMSNorm (eps 1e-5; gated by swish(g_proj x) with the
    output gate) and o_proj."""
    Bsz, T, _ = x.shape
    H, dk, dv = mixer.n_heads, mixer.head_k_dim, mixer.head_v_dim
    proj = x @ mixer.qkv.weight.T
    qk, v = proj[..., : 2 * H * dk], proj[..., 2 * H * dk :]
    kernel = mixer.conv.conv.weight[:, 0]  # [channels, K], tap K-1 is the current token
    K = kernel.shape[1]
    conv = torch.zeros_like(qk)
    for t in range(T):
        for i in range(K):
            if t - (K - 1 - i) >= 0:
                conv[:, t] += kernel[:, i] * qk[:, t - (K - 1 - i)]
    q, k = F.silu(conv).split(H * dk, -1)
    q, k, v = q.view(Bsz, T, H, dk), k.view(Bsz, T, H, dk), v.view(Bsz, T, H, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    g = F.logsigmoid(x @ mixer.gate.weight.T + mixer.gate.bias)
    beta = torch.sigmoid(x @ mixer.beta.weight.T + mixer.beta.bias)
    lamb = (F.softplus(mixer.lambda_params) + 0.25).view(H, dk)
    o = torch.zeros(Bsz, T, H, dv)
    for b in range(Bsz):
        for h in range(H):
            h_kk, h_kv = torch.zeros(dk, dk), torch.zeros(dk, dv)
            for t in range(T):
                kt = k[b, t, h] * beta[b, t, h]
                h_kk = h_kk * g[b, t, h].exp() + torch.outer(kt, k[b, t, h])
                h_kv = h_kv * g[b, t, h].exp() + torch.outer(kt, v[b, t, h])
                A = h_kk + torch.diag(lamb[h])
                if cg_steps is None:
                    q_star = torch.linalg.solve(A, q[b, t, h])
                else:
                    q_star = conjugate_gradient(A, q[b, t, h], cg_steps)
                o[b, t, h] = h_kv.T @ q_star
    rms = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + 1e-5) * mixer.norm.weight
    if mixer.g_proj is not None:
        rms = rms * F.silu(x @ mixer.g_proj.weight.T).view(Bsz, T, H, dv)
    return rms.reshape(Bsz, T, H * dv) @ mixer.out.weight.T


def make_mesanet(mode: str = "chunk", **params) -> torch.nn.Module:
    torch.manual_seed(0)
    mixer = build_mixer("mesanet", D_MODEL, mode=mode, chunk_size=8, **params).double()
    with torch.no_grad():  # away from their initial values, so each is checked
        mixer.norm.weight.uniform_(0.5, 1.5)
        mixer.lambda_params.uniform_(-1, 1)
        mixer.gate.bias.uniform_(1, 3)
    return mixer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", [{}, {"head_k_dim": 3, "expand_v": 1.5}])
def test_mesanet_layer_is_fla_layer_written_step_by_step(mode: str, params: dict) -> None:
    mixer = make_mesanet(mode, **params)
    x = torch.randn(2, 29, D_MODEL, generator=gen(2))
    torch.testing.assert_close(mixer(x), fla_mesanet_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_mesanet_with_the_output_gate_is_fla_layer() -> None:
    mixer = make_mesanet(use_output_gate=True)
    x = torch.randn(2, 21, D_MODEL, generator=gen(3))
    torch.testing.assert_close(mixer(x), fla_mesanet_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_mesanet_is_within_fla_conjugate_gradient_of_fla_kernel() -> None:
    """fla's kernel solves by 30 guarded CG steps; the exact solve's layer output lies within
    1e-2 (relative to the output's scale) of that computation."""
    mixer = make_mesanet()
    x = torch.randn(2, 29, D_MODEL, generator=gen(4))
    y, cg = mixer(x), fla_mesanet_layer(mixer, x, cg_steps=30)
    assert (y - cg).abs().max() < 1e-2 * y.abs().max()


def test_gate_bias_sets_every_gate_bias_and_a_bad_one_is_refused() -> None:
    """The gate starts near 1 (bias 5: a_t = sigmoid(5), 0.993 a token) unless
    `gate_bias=None`, PyTorch's small draw (fla's start near 1/2)."""
    torch.manual_seed(0)
    assert torch.equal(build_mixer("mesanet", 64).gate.bias, torch.full((2,), 5.0))
    assert build_mixer("mesanet", 64, gate_bias=None).gate.bias.abs().max() <= 64**-0.5
    with pytest.raises(ValueError, match="gate_bias=nan"):
        build_mixer("mesanet", 64, gate_bias=float("nan"))


def test_mesanet_parameterisation_follows_fla() -> None:
    """lamb = softplus(lambda_params) + 0.25 starts at 1 on every head and key channel and is
    spared by weight decay; gate and beta projections carry biases; no output gate by
    default; q, k convolved (2 H d_k channels), v not."""
    torch.manual_seed(0)
    mixer = build_mixer("mesanet", 64, n_heads=4)
    beta, log_gate, lamb = mixer.rates(torch.randn(2, 7, 64))
    torch.testing.assert_close(lamb, torch.ones(4, 16))
    assert beta.shape == log_gate.shape == (2, 4, 7) and (log_gate < 0).all()
    assert mixer.gate.bias.shape == mixer.beta.bias.shape == (4,)
    assert mixer.g_proj is None and mixer.no_weight_decay() == {"lambda_params"}
    assert mixer.conv.conv.in_channels == 2 * 64


@pytest.mark.parametrize(
    ("params", "dk", "dv"), [({}, 32, 32), ({"head_k_dim": 4}, 4, 32), ({"expand_v": 2.0}, 32, 64)]
)
def test_mesanet_state_size_and_rank_bound(params: dict, dk: int, dv: int) -> None:
    """H (d_k^2 + d_k d_v) floats of state plus (conv_size - 1) 2 H d_k of conv windows (q and
    k only); rank bound H d_k (the knob `head_k_dim`); the block's shared conv is off for it;
    `init_state` holds exactly those floats."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, "mesanet", params, d_model=64, short_conv=4)
    mixer = model.blocks[0].mixer
    conv = 3 * 2 * 2 * dk
    assert mixer.state_knob == "head_k_dim" and mixer.head_k_dim == dk
    assert mixer.conv_state_size() == conv
    assert mixer.state_size(64) == mixer.state_size(4096) == 2 * (dk * dk + dk * dv) + conv
    assert sum(s[0].numel() for s in mixer.init_state(3)) == mixer.state_size(64)
    assert mixer.rank_bound(64) == 2 * dk
    assert mixer.owns_short_conv and model.blocks[0].state_size(64) == mixer.state_size(64)


@pytest.mark.parametrize(
    ("params", "match"),
    [({"lambda_lower_bound": 0.0}, "lambda_lower_bound=0.0"), ({"conv_size": -1}, "conv_size")],
)
def test_mesanet_refuses_bad_settings(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_mixer("mesanet", D_MODEL, **params)
