"""KDA (`kda`) and its kernels (`models.kernels.dplr`): the gated DPLR rule and KDA's rule
against step-by-step recurrences written here from the equations (float64, odd lengths, every
mode, forward and backward, a sequence split and its state passed on), the layer against a
step-by-step float64 reference of fla's `KimiDeltaAttention` written here, the gate's
parameterisation, the state size and the rank bound. The generic contract (causality, modes,
step, state size, precision, compile) is in test_mixers.py and its neighbours."""

import math

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES, dplr_blocks, gated_delta_rule
from models.kernels.dplr import gated_dplr, kda_rule
from models.kernels.dplr_blocks import UnitLower, pair_blocks
from tests.models.kernel_checks import assert_same_rule, assert_split_continues

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def kda_steps(q, k, v, beta, log_gate, S=None):
    """S_t = (I - b_t k_t k_t^T) diag(w_t) S_{t-1} + b_t k_t v_t^T, o_t = S_t^T q_t, one
    head, one token at a time, as explicit matrices."""
    B, H, T, D = q.shape
    eye, outs, states = torch.eye(D), [], []
    for b in range(B):
        for h in range(H):
            s = torch.zeros(D, v.shape[-1]) if S is None else S[b, h]
            for t in range(T):
                kt, bt = k[b, h, t], beta[b, h, t]
                s = (eye - bt * torch.outer(kt, kt)) @ torch.diag(log_gate[b, h, t].exp()) @ s
                s = s + bt * torch.outer(kt, v[b, h, t])
                outs.append(s.T @ q[b, h, t])
            states.append(s)
    return torch.stack(outs).view(B, H, T, -1), torch.stack(states).view(B, H, D, -1)


def dplr_steps(q, k, v, a, b_, log_gate, S=None):
    """S_t = (diag(w_t) + a_t b_t^T) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, as matrices."""
    B, H, T, D = q.shape
    outs, states = [], []
    for b in range(B):
        for h in range(H):
            s = torch.zeros(D, v.shape[-1]) if S is None else S[b, h]
            for t in range(T):
                diagonal = torch.diag(log_gate[b, h, t].exp())
                s = (diagonal + torch.outer(a[b, h, t], b_[b, h, t])) @ s
                s = s + torch.outer(k[b, h, t], v[b, h, t])
                outs.append(s.T @ q[b, h, t])
            states.append(s)
    return torch.stack(outs).view(B, H, T, -1), torch.stack(states).view(B, H, D, -1)


def kda_inputs(T: int, seed: int = 0, D: int = 5, Dv: int = 4, gate_scale: float = 1.0):
    g = gen(seed)
    q = torch.randn(2, 3, T, D, generator=g)
    k = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    v = torch.randn(2, 3, T, Dv, generator=g)
    beta = torch.rand(2, 3, T, generator=g)
    log_gate = -gate_scale * torch.rand(2, 3, T, D, generator=g)
    return q, k, v, beta, log_gate


@pytest.mark.parametrize("T", [1, 13, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"),
    [("recurrent", 8), ("chunk", 8), ("chunk", 20), ("chunk", 64), ("parallel", 8)],
)
def test_kda_rule_is_the_recurrence_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    leaves = [x.requires_grad_() for x in kda_inputs(T)]
    S0 = torch.randn(2, 3, 5, 4, generator=gen(9), requires_grad=True)
    expected, S_expected = kda_steps(*leaves, S0)
    o, S = kda_rule(*leaves, mode=mode, chunk_size=chunk_size, initial_state=S0, return_state=True)
    assert_same_rule((o, S), (expected, S_expected), [*leaves, S0])


@pytest.mark.parametrize("mode", MODES)
def test_kda_rule_split_and_continued_is_the_whole_sequence(mode: str) -> None:
    assert_split_continues(kda_rule, kda_inputs(41, seed=3), 19, mode)


@pytest.mark.parametrize("mode", ["chunk", "parallel"])
def test_kda_rule_with_one_gate_per_head_is_the_gated_delta_rule(mode: str) -> None:
    q, k, v, beta, log_gate = kda_inputs(37, seed=4)
    per_head = log_gate[..., 0]
    o = kda_rule(q, k, v, beta, per_head.unsqueeze(-1).expand_as(log_gate), mode=mode, chunk_size=8)
    torch.testing.assert_close(o, gated_delta_rule(q, k, v, beta, per_head, mode="recurrent"))


@pytest.mark.parametrize("mode", ["chunk", "parallel"])
def test_kda_rule_survives_gates_that_clear_the_state(mode: str) -> None:
    """Log-gates down to -60 per step: products over a chunk far below float64's smallest
    number; every exponent the chunk form takes is a difference <= 0, so nothing overflows."""
    q, k, v, beta, log_gate = kda_inputs(45, seed=5, gate_scale=60.0)
    expected, _ = kda_steps(q, k, v, beta, log_gate)
    o = kda_rule(q, k, v, beta, log_gate, mode=mode, chunk_size=32)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("T", [1, 16, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"), [("recurrent", 8), ("chunk", 8), ("chunk", 17), ("parallel", 8)]
)
def test_gated_dplr_is_the_recurrence_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    g = gen(T)
    q, k, a, b = (torch.randn(2, 3, T, 5, generator=g) for _ in range(4))
    v = torch.randn(2, 3, T, 4, generator=g)
    a, b = 0.4 * a, 0.4 * b  # transitions of norm about 1
    log_gate = -torch.rand(2, 3, T, 5, generator=g)
    leaves = [x.requires_grad_() for x in (q, k, v, a, b, log_gate)]
    S0 = torch.randn(2, 3, 5, 4, generator=g, requires_grad=True)
    expected, S_expected = dplr_steps(*leaves, S0)
    o, S = gated_dplr(
        *leaves, mode=mode, chunk_size=chunk_size, initial_state=S0, return_state=True
    )
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S, S_expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum() + S.square().sum(), [*leaves, S0])
    grads_expected = torch.autograd.grad(
        expected.sin().sum() + S_expected.square().sum(), [*leaves, S0]
    )
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("rule", ["dplr", "kda"])
@pytest.mark.parametrize(("mode", "T"), [("parallel", 1), ("parallel", 23), ("chunk", 16)])
def test_one_chunk_from_the_empty_state_forward_and_backward(rule: str, mode: str, T: int) -> None:
    """One chunk, no state given or returned: the outputs alone (no start or end state
    formed), forward and backward."""
    g = gen(T + 5)
    q, k, kk = (F.normalize(torch.randn(2, 3, T, 5, generator=g), dim=-1) for _ in range(3))
    v = torch.randn(2, 3, T, 4, generator=g)
    log_gate = -torch.rand(2, 3, T, 5, generator=g)
    if rule == "kda":
        fn, steps, rates = kda_rule, kda_steps, [torch.rand(2, 3, T, generator=g)]
    else:
        fn, steps, rates = gated_dplr, dplr_steps, [torch.rand(2, 3, T, 5, generator=g) * kk, -kk]
    leaves = [x.requires_grad_() for x in (q, k, v, *rates, log_gate)]
    expected, _ = steps(*leaves)
    o = fn(*leaves, mode=mode, chunk_size=16)
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum(), leaves)
    grads_expected = torch.autograd.grad(expected.sin().sum(), leaves)
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("rule", ["dplr", "kda"])
@pytest.mark.parametrize("min_log_gate", [-1.0, -30.0])
def test_chunks_tile_by_tile_are_the_recurrence(monkeypatch, rule: str, min_log_gate) -> None:
    """Tiles of one chunk each (DPLR_TILE_BYTES 1), the pairs taken inside (one block) or by
    `pair_blocks` (a bound of -30 a step: blocks of 2): forward and backward, state in and
    out."""
    monkeypatch.setattr(dplr_blocks, "DPLR_TILE_BYTES", 1)
    T, g = 29, gen(3)
    q, k, kk = (F.normalize(torch.randn(2, 3, T, 5, generator=g), dim=-1) for _ in range(3))
    v = torch.randn(2, 3, T, 4, generator=g)
    log_gate = min_log_gate * torch.rand(2, 3, T, 5, generator=g)
    if rule == "kda":
        fn, steps, rates = kda_rule, kda_steps, [torch.rand(2, 3, T, generator=g)]
    else:
        fn, steps, rates = gated_dplr, dplr_steps, [torch.rand(2, 3, T, 5, generator=g) * kk, -kk]
    leaves = [x.requires_grad_() for x in (q, k, v, *rates, log_gate)]
    S0 = torch.randn(2, 3, 5, 4, generator=g, requires_grad=True)
    expected, S_expected = steps(*leaves, S0)
    o, S = fn(*leaves, chunk_size=8, initial_state=S0, return_state=True)
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S, S_expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum() + S.square().sum(), [*leaves, S0])
    grads_expected = torch.autograd.grad(
        expected.sin().sum() + S_expected.square().sum(), [*leaves, S0]
    )
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("L", [1, 5, 16, 37, 64])
@pytest.mark.parametrize("min_log_gate", [None, -0.05, -1.0, -70.0])
def test_pair_blocks_are_the_masked_sums(L: int, min_log_gate: float | None) -> None:
    """Rows (x1 at c_prev, strict; x2 at c, j <= i) against columns (y1, y2) at c, the
    blocks one step (no bound, or a step steeper than SPAN), a power of two below L or the
    whole chunk."""
    g = gen(L)
    x, y = torch.randn(3, 2, L, 4, generator=g), torch.randn(3, 2, L, 4, generator=g)
    c = (-torch.rand(3, L, 4, generator=g)).cumsum(-2)
    c_prev = F.pad(c[:, :-1], (0, 0, 1, 0))
    cx = torch.stack([c_prev, c], 1)
    M = pair_blocks(x, y, cx, c, (True, False), min_log_gate)
    for gx, strict in enumerate((True, False)):
        mask = torch.ones(L, L).tril(-1 if strict else 0)
        gaps = (cx[:, gx, :, None] - c[:, None]).exp()
        for gy in range(2):
            expected = torch.einsum("nid,njd,nijd->nij", x[:, gx], y[:, gy], gaps) * mask
            block = M[:, gx * L : (gx + 1) * L, gy * L : (gy + 1) * L]
            torch.testing.assert_close(block, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("L", [2, 13, 16, 70])
def test_unit_lower_solves_and_its_transpose(L: int) -> None:
    """The inverse by products of powers (L <= 64) and the triangular solve (beyond)."""
    N = (0.3 * torch.randn(4, L, L, generator=gen(L))).tril(-1)
    R = torch.randn(4, L, 3, generator=gen(1))
    solver, exact = UnitLower(N), torch.linalg.inv(torch.eye(L) + N)
    torch.testing.assert_close(solver.solve(R), exact @ R, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(solver.solve_transposed(R), exact.mT @ R, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rule", ["dplr", "kda"])
def test_chunk_form_is_finite_under_strong_decay_over_long_chunks(dtype, rule: str) -> None:
    """Log-gates down to -12 per step over chunks of 64 and one parallel block of 150 steps
    (cumulative log-gates near -450, far past float32's exp range), with the caller's bound
    and without one: the chunk form is finite and the float64 step loop's, forward and
    backward (float32: to its rounding of the cumulative log-gates)."""
    T, D = 150, 5
    g = gen(11)
    q, k, kk = (F.normalize(torch.randn(2, 2, T, D, generator=g), dim=-1) for _ in range(3))
    v = torch.randn(2, 2, T, 3, generator=g)
    if rule == "kda":
        fn, rates = kda_rule, [torch.rand(2, 2, T, generator=g)]
    else:  # RWKV-7's a = alpha * kk, b = -kk
        fn, rates = gated_dplr, [torch.rand(2, 2, T, D, generator=g) * kk, -kk]
    log_gate = -12.0 * torch.rand(2, 2, T, D, generator=g) ** 3  # mostly mild, some strong
    inputs = [x.to(dtype).requires_grad_() for x in (q, k, v, *rates, log_gate)]
    wide = [x.detach().double().requires_grad_() for x in inputs]
    expected = fn(*wide, mode="recurrent")
    grads_expected = torch.autograd.grad(expected.sin().sum(), wide)
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    for mode in ("chunk", "parallel"):
        for bound in (-12.0, None):
            o = fn(*inputs, mode=mode, chunk_size=64, min_log_gate=bound)
            grads = torch.autograd.grad(o.sin().sum(), inputs)
            assert torch.isfinite(o).all() and all(torch.isfinite(x).all() for x in grads)
            torch.testing.assert_close(o.double(), expected, rtol=tol, atol=tol)
            for grad, grad_expected in zip(grads, grads_expected, strict=True):
                torch.testing.assert_close(grad.double(), grad_expected, rtol=tol, atol=tol)


def test_a_broken_gate_bound_is_refused() -> None:
    q, k, v, beta, log_gate = kda_inputs(9)
    with pytest.raises(ValueError, match="min_log_gate"):
        kda_rule(q, k, v, beta, log_gate, min_log_gate=-0.5)
    with pytest.raises(ValueError, match="min_log_gate"):
        gated_dplr(q, k, v, k, -k, log_gate, min_log_gate=-0.5)


def fla_kda_layer(mixer, x: torch.Tensor) -> torch.Tensor:
    """fla's `KimiDeltaAttention.forward` (no cache, no padding) with the mixer's weights,
    written step by step in float64: the three short convs by their taps, the l2norm with
    eps 1e-6, the gate -exp(A_log) softplus(f_proj(x) + dt_bias), beta = sigmoid(b_proj x),
    `naive_recurrent_kda`'s loop (gate, then delta correction; q scaled by d_k^-1/2), the
    sigmoid-gated RMSNorm and o_proj."""
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
    beta = torch.sigmoid(x @ mixer.beta.weight.T)
    o = torch.zeros(Bsz, T, H, dv)
    for b in range(Bsz):
        for h in range(H):
            S = torch.zeros(dk, dv)
            for t in range(T):
                S = S * g[b, t, h].exp()[:, None]
                kt = k[b, t, h]
                S = S + beta[b, t, h] * torch.outer(kt, v[b, t, h] - S.T @ kt)
                o[b, t, h] = S.T @ q[b, t, h]
    rms = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + 1e-5) * mixer.norm.weight
    gate = mixer.g_proj[1](mixer.g_proj[0](x)).view(Bsz, T, H, dv)
    return (rms * torch.sigmoid(gate)).reshape(Bsz, T, H * dv) @ mixer.out.weight.T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", [{}, {"head_k_dim": 3, "expand_v": 1.5, "gate_rank": 5}])
def test_kda_layer_is_fla_layer_written_step_by_step(mode: str, params: dict) -> None:
    torch.manual_seed(0)
    mixer = build_mixer("kda", D_MODEL, mode=mode, chunk_size=8, **params).double()
    with torch.no_grad():
        mixer.norm.weight.uniform_(0.5, 1.5)  # not all ones, so the gain is checked
        mixer.g_proj[1].bias.uniform_(-1, 1)
    x = torch.randn(2, 29, D_MODEL, generator=gen(2))
    torch.testing.assert_close(mixer(x), fla_kda_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_kda_gate_parameterisation_follows_fla() -> None:
    """A = exp(A_log) in [1, 16] per head; softplus(dt_bias) in [1e-4 or 1e-3, 0.1] per key
    channel; the gate low-rank (rank d_v by default), no biases on f_proj; every log-gate
    <= 0 and one per head, token and key dimension."""
    torch.manual_seed(0)
    mixer = build_mixer("kda", 64, n_heads=4)
    A = mixer.A_log.exp()
    assert A.shape == (4,) and (A >= 1).all() and (A <= 16).all()
    dt = F.softplus(mixer.dt_bias)
    assert dt.shape == (4 * 16,) and (dt >= 1e-4 - 1e-9).all() and (dt <= 0.1 + 1e-6).all()
    first, second = mixer.f_proj
    assert first.weight.shape == (16, 64) and first.bias is None
    assert second.weight.shape == (64, 16) and second.bias is None
    assert mixer.g_proj[1].bias.shape == (64,)
    log_gate = mixer.log_gate(torch.randn(2, 7, 64))
    assert log_gate.shape == (2, 4, 7, 16) and (log_gate <= 0).all()
    assert log_gate.std(-1).min() > 0  # the key dimensions of a head differ


@pytest.mark.parametrize(
    ("params", "dk", "dv"), [({}, 32, 32), ({"head_k_dim": 4}, 4, 32), ({"expand_v": 2.0}, 32, 64)]
)
def test_kda_state_size_and_rank_bound(params: dict, dk: int, dv: int) -> None:
    """H d_k d_v floats of state plus (conv_size - 1) (2 H d_k + H d_v) of conv windows;
    rank bound H d_k (the knob `head_k_dim`); the block's shared conv is off for it."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, "kda", params, d_model=64, short_conv=4)
    mixer = model.blocks[0].mixer
    conv = 3 * (2 * 2 * dk + 2 * dv)
    assert mixer.state_knob == "head_k_dim" and mixer.head_k_dim == dk
    assert mixer.conv_state_size() == conv
    assert mixer.state_size(64) == mixer.state_size(4096) == 2 * dk * dv + conv
    assert mixer.rank_bound(64) == 2 * dk
    assert mixer.owns_short_conv and model.blocks[0].state_size(64) == mixer.state_size(64)


def test_kda_refuses_a_bad_gate_rank() -> None:
    with pytest.raises(ValueError, match="gate_rank=0"):
        build_mixer("kda", D_MODEL, gate_rank=0)


def test_kda_dt_is_log_uniform() -> None:
    """The dt draw spans [1e-3, 0.1] in log space (half of the channels below 1e-2)."""
    torch.manual_seed(0)
    dt = F.softplus(build_mixer("kda", 256, n_heads=2).dt_bias)
    below = (dt < 1e-2).double().mean().item()
    assert abs(below - 0.5) < 0.1
    assert math.isclose(dt.min().item(), 1e-3, rel_tol=0.2)
