"""The gated kernels (docs/background.md, sections 14-15): every fast mode against the step loop
in float64, forwards and backwards, on lengths that are not multiples of the chunk, from an
initial state; state hand-over; the special cases (gates 1: the ungated kernels; a constant
per-head gate: RetNet); float32 chunk mode under gates far below exp's range."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from models.kernels import (
    delta_rule,
    gated_delta_rule,
    gated_linear,
    gated_linear_attention,
    linear_attention,
)
from tests.models.kernel_checks import graph_nodes, peak_bytes

F64 = torch.float64
MODES = ("recurrent", "parallel", "chunk")
LENGTHS = [1, 7, 37, 130]
CHUNKS = [1, 6, 16, 64]  # 6: chunks padded inside to 8 steps; 1: no in-chunk pairs at all
B, H, D, DV = 2, 3, 5, 4
GAMMAS = [0.95, 0.6, 1.0]


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


def _leaves(*xs: torch.Tensor | None) -> list:
    return [None if x is None else x.detach().clone().requires_grad_() for x in xs]


def _log_gates(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """log a_t <= 0, some exactly 0 (a gate of 1), most between about -0.05 and -3."""
    g = F.logsigmoid(_randn(gen, *shape) + 2) * scale
    return torch.where(torch.rand(*shape, generator=gen) < 0.1, torch.zeros_like(g), g)


def _gla_inputs(T: int, seed: int, per_dim: bool, with_state: bool):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _randn(gen, B, H, T, D), _randn(gen, B, H, T, D), _randn(gen, B, H, T, DV)
    log_gate = _log_gates(gen, B, H, T, *([D] if per_dim else []))
    state = _randn(gen, B, H, D, DV) if with_state else None
    return q, k, v, log_gate, state


def _gdr_inputs(T: int, seed: int, with_state: bool):
    gen = torch.Generator().manual_seed(seed)
    q, k = _randn(gen, B, H, T, D), F.normalize(_randn(gen, B, H, T, D), dim=-1)
    v, beta = _randn(gen, B, H, T, DV), torch.sigmoid(_randn(gen, B, H, T))
    log_gate = _log_gates(gen, B, H, T)
    state = _randn(gen, B, H, D, DV) if with_state else None
    return q, k, v, beta, log_gate, state


def _run(kernel, inputs, mode: str, chunk_size: int):
    """(o, S, gradients of every input that is given) of one call, from a fixed random
    projection of both outputs."""
    leaves = _leaves(*inputs)
    *tensors, state = leaves
    o, S = kernel(
        *tensors, mode=mode, chunk_size=chunk_size, initial_state=state, return_state=True
    )
    gen = torch.Generator().manual_seed(123)
    loss = (o * _randn(gen, *o.shape)).sum() + (S * _randn(gen, *S.shape)).sum()
    given = [x for x in leaves if x is not None]
    return o, S, torch.autograd.grad(loss, given)


def _assert_close(actual, expected, tol: float = 1e-10) -> None:
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


def _assert_modes_match(kernel, inputs, chunk_size: int) -> None:
    o_ref, S_ref, grads_ref = _run(kernel, inputs, "recurrent", chunk_size)
    for mode in ("parallel", "chunk"):
        o, S, grads = _run(kernel, inputs, mode, chunk_size)
        _assert_close(o, o_ref)
        _assert_close(S, S_ref)
        for g, g_ref in zip(grads, grads_ref, strict=True):
            _assert_close(g, g_ref)


# ----------------------------------------------------------------------------- every mode


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("per_dim", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_gated_linear_attention_modes_match_recurrent(T, chunk_size, per_dim, with_state):
    """o, the returned state and the gradients of q, k, v, log_gate and the initial state."""
    inputs = _gla_inputs(T, seed=T + chunk_size, per_dim=per_dim, with_state=with_state)
    _assert_modes_match(gated_linear_attention, inputs, chunk_size)


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("with_state", [False, True])
def test_gated_delta_rule_modes_match_recurrent(T, chunk_size, with_state):
    """o, the returned state and the gradients of q, k, v, beta, log_gate and the state."""
    inputs = _gdr_inputs(T, seed=T + chunk_size, with_state=with_state)
    _assert_modes_match(gated_delta_rule, inputs, chunk_size)


@pytest.mark.parametrize("tile_bytes", [1, 3 * 8 * 5 * 8])
def test_gla_chunk_tiles_match_recurrent(monkeypatch, tile_bytes):
    """The per-dimension chunk sums in tiles of one chunk, and of three chunks (which split
    the block of 4 chunks x 2 x 3 rows unevenly), forwards and backwards, against the step
    loop: 37 steps in chunks of 8 from a state, 4 whole chunks and a tail."""
    monkeypatch.setattr(gated_linear, "GATED_TILE_BYTES", tile_bytes)
    inputs = _gla_inputs(37, seed=10, per_dim=True, with_state=True)
    _assert_modes_match(gated_linear_attention, inputs, 8)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", ["gla", "gla_scalar", "gated_delta_rule"])
def test_gated_state_hand_over(mode, kernel):
    """37 steps cut at 13 and continued from the state equal the whole, output and state."""
    if kernel == "gated_delta_rule":
        *tensors, _ = _gdr_inputs(37, seed=3, with_state=False)
        attend = gated_delta_rule
    else:
        *tensors, _ = _gla_inputs(37, seed=3, per_dim=kernel == "gla", with_state=False)
        attend = gated_linear_attention
    kw = dict(mode=mode, chunk_size=8, return_state=True)
    whole, state = attend(*tensors, **kw)
    first, mid = attend(*(x[:, :, :13] for x in tensors), **kw)
    second, end = attend(*(x[:, :, 13:] for x in tensors), initial_state=mid, **kw)
    _assert_close(torch.cat([first, second], 2), whole)
    _assert_close(end, state)


# ----------------------------------------------------------------------------- special cases


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("per_dim", [True, False])
def test_gates_of_one_give_linear_attention_without_normaliser(mode, per_dim):
    q, k, v, log_gate, S0 = _gla_inputs(37, seed=4, per_dim=per_dim, with_state=True)
    kw = dict(mode=mode, chunk_size=16, return_state=True)
    o, S = gated_linear_attention(q, k, v, torch.zeros_like(log_gate), initial_state=S0, **kw)
    z0 = torch.zeros(B, H, D, dtype=F64)
    o_ref, (S_ref, _) = linear_attention(q, k, v, normalize=False, initial_state=(S0, z0), **kw)
    _assert_close(o, o_ref)
    _assert_close(S, S_ref)


@pytest.mark.parametrize("mode", MODES)
def test_gates_of_one_give_the_delta_rule(mode):
    q, k, v, beta, log_gate, S0 = _gdr_inputs(37, seed=5, with_state=True)
    kw = dict(mode=mode, chunk_size=16, initial_state=S0, return_state=True)
    o, S = gated_delta_rule(q, k, v, beta, torch.zeros_like(log_gate), **kw)
    o_ref, S_ref = delta_rule(q, k, v, beta, **kw)
    _assert_close(o, o_ref)
    _assert_close(S, S_ref)


@pytest.mark.parametrize("mode", MODES)
def test_a_constant_head_gate_is_retnet(mode):
    """log_gate = log(gamma_h) at every step: linear_attention(decay=gamma, normalize=False)."""
    q, k, v, _, S0 = _gla_inputs(37, seed=6, per_dim=False, with_state=True)
    gammas = torch.tensor(GAMMAS, dtype=F64)
    log_gate = gammas.log().view(1, H, 1).expand(B, H, 37)
    kw = dict(mode=mode, chunk_size=16, return_state=True)
    o, S = gated_linear_attention(q, k, v, log_gate, initial_state=S0, **kw)
    z0 = torch.zeros(B, H, D, dtype=F64)
    o_ref, (S_ref, _) = linear_attention(
        q, k, v, decay=gammas, normalize=False, initial_state=(S0, z0), **kw
    )
    _assert_close(o, o_ref)
    _assert_close(S, S_ref)


# ----------------------------------------------------------------------------- float32


@pytest.mark.parametrize("per_chunk", [-80.0, -400.0])
@pytest.mark.parametrize("kernel", ["gla", "gla_scalar", "gated_delta_rule"])
def test_float32_chunk_mode_stays_accurate_when_the_gates_leave_exps_range(per_chunk, kernel):
    """Log-gates summing to `per_chunk` over each chunk of 64 (the gates spread over
    [0.2, 1.8] times that mean): float32 chunk mode against the float64 step loop; output,
    state and every gradient finite, and within 2.5e-7 |per_chunk| of the largest value (the
    cumulative log-gates b round to |b| 2^-24, so the weights exp(b_i - b_j) carry that
    relative error). At -400 exp(-cumsum) alone is inf in float32 (checked below): a form that
    divided by exp(cumsum) would give inf or NaN there."""
    T, C = 150, 64
    gen = torch.Generator().manual_seed(7)
    shape = (B, H, T, D) if kernel == "gla" else (B, H, T)
    log_gate = per_chunk / C * (0.2 + 1.6 * torch.rand(*shape, generator=gen, dtype=F64))
    if per_chunk < -100:  # beyond float32's exp: exp(-cumsum) overflows
        assert torch.isinf(torch.exp(-log_gate[:, :, :C].float().cumsum(2))).any()
    q, k, v = _randn(gen, B, H, T, D), _randn(gen, B, H, T, D), _randn(gen, B, H, T, DV)
    S0 = _randn(gen, B, H, D, DV)
    if kernel == "gated_delta_rule":
        k = F.normalize(k, dim=-1)
        attend, gates = gated_delta_rule, (torch.sigmoid(_randn(gen, B, H, T)), log_gate)
    else:
        attend, gates = gated_linear_attention, (log_gate,)
    inputs = (q, k, v, *gates, S0)
    ref = _run(attend, inputs, "recurrent", C)
    out = _run(attend, [x.float() for x in inputs], "chunk", C)
    for actual, expected in zip((out[0], out[1], *out[2]), (ref[0], ref[1], *ref[2]), strict=True):
        assert torch.isfinite(actual).all()
        scale = expected.abs().max()
        assert (actual.double() - expected).abs().max() <= 2.5e-7 * abs(per_chunk) * scale


# ----------------------------------------------------------------------------- memory, graphs


@pytest.mark.parametrize("kernel", ["gla", "gla_scalar", "gated_delta_rule"])
def test_gated_chunk_memory_is_linear_in_T(kernel):
    """Peak memory of chunk mode, D = Dv = 64: four times the length takes at most 4.4 times
    the memory, and at T = 8192 less than half of one [T, D, Dv] tensor (a state per step)."""
    Dk, peaks = 64, {}
    for T in (2048, 8192):
        gen = torch.Generator().manual_seed(8)
        q, k, v = (torch.rand(1, 1, T, Dk, generator=gen, dtype=F64) for _ in range(3))
        gate = -torch.rand(1, 1, T, *([Dk] if kernel == "gla" else []), generator=gen, dtype=F64)
        if kernel == "gated_delta_rule":
            beta = torch.rand(1, 1, T, generator=gen, dtype=F64)
            call = partial(gated_delta_rule, q, F.normalize(k, dim=-1), v, beta, gate)
        else:
            call = partial(gated_linear_attention, q, k, v, gate)
        peaks[T] = peak_bytes(call)
    assert 0 < peaks[8192] <= 4.4 * peaks[2048]
    assert peaks[8192] < 8192 * Dk * Dk * 8 / 2


@pytest.mark.parametrize("mode", ["recurrent", "chunk"])
def test_no_loop_indexes_one_step_or_chunk_in_autograd(mode):
    """A loop that selects step t (or chunk c) puts a SelectBackward per step in the graph,
    each allocating a gradient of the whole tensor: the loops split their inputs once."""
    kw = dict(mode=mode, chunk_size=4)
    *gla_in, _ = _gla_inputs(64, seed=9, per_dim=True, with_state=False)
    *gdr_in, _ = _gdr_inputs(64, seed=9, with_state=False)
    for out in (
        gated_linear_attention(*_leaves(*gla_in), **kw),
        gated_linear_attention(*_leaves(*gla_in[:3], gla_in[3][..., 0]), **kw),
        gated_delta_rule(*_leaves(*gdr_in), **kw),
    ):
        assert "SelectBackward0" not in graph_nodes(out)


# ----------------------------------------------------------------------------- bad input


def test_bad_gated_input_is_rejected():
    q, k, v, log_gate, _ = _gla_inputs(7, seed=0, per_dim=True, with_state=False)
    _, kd, _, beta, scalar_gate, _ = _gdr_inputs(7, seed=0, with_state=False)
    with pytest.raises(ValueError, match=r"log_gate must have shape \[2, 3, 7, 5\] \(per key"):
        gated_linear_attention(q, k, v, log_gate[..., :4])
    with pytest.raises(ValueError, match=r"log_gate must be finite and <= 0 .* got values in"):
        gated_linear_attention(q, k, v, log_gate + 5)
    with pytest.raises(ValueError, match=r"log_gate must be finite"):
        gated_delta_rule(q, kd, v, beta, torch.full_like(scalar_gate, float("nan")))
    with pytest.raises(
        ValueError, match=r"log_gate must have shape \[2, 3, 7\], got \[2, 3, 7, 5\]"
    ):
        gated_delta_rule(q, kd, v, beta, log_gate)
    with pytest.raises(ValueError, match=r"beta must have shape \[2, 3, 7\], got \[2, 3, 6\]"):
        gated_delta_rule(q, kd, v, beta[..., :6], scalar_gate)
    with pytest.raises(ValueError, match=r"initial_state must have shape \[2, 3, 5, 4\]"):
        gated_linear_attention(q, k, v, log_gate, initial_state=torch.zeros(2, 3, 4, 4))
    for call in (
        lambda: gated_linear_attention(q, k, v, log_gate, mode="fast"),
        lambda: gated_delta_rule(q, kd, v, beta, scalar_gate, mode="fast"),
    ):
        with pytest.raises(ValueError, match="mode='fast' is invalid: must be one of chunk"):
            call()


def test_products_of_gates_below_the_smallest_normal_are_flushed_to_zero() -> None:
    """exp of an exponent below log(tiny) is 0, never a subnormal (slow on CPUs); above it,
    exp itself."""
    from models.kernels.common import causal_exp, gate_exp, normal_floor

    x = torch.tensor([0.0, -10.0, -87.0, -87.5, -100.0, -200.0])
    tiny = torch.finfo(torch.float32).tiny
    y = gate_exp(x)
    assert not ((y != 0) & (y.abs() < tiny)).any()
    assert torch.equal(y[:3], torch.exp(x[:3])) and torch.equal(y[3:], torch.zeros(3))
    assert normal_floor(x) == pytest.approx(-87.336, abs=1e-3)
    gaps = causal_exp(torch.tensor([[0.0, 5.0], [-90.0, 0.0]]), dim=(0, 1))
    assert torch.equal(gaps, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


@pytest.mark.parametrize("kernel", ["gla", "gla_scalar", "gated_delta_rule"])
def test_chunk_mode_never_exponentiates_a_positive_log_gate(monkeypatch, kernel):
    """Every exponential the chunk form takes, forward and backward, is of a difference
    b_later - b_earlier <= 0 (or -inf where masked): with gates summing to -400 a chunk, one
    positive exponent would overflow float32. Checked by recording the largest finite argument
    of every torch exponential called while the kernel runs."""
    T, C = 150, 64
    gen = torch.Generator().manual_seed(11)
    shape = (B, H, T, D) if kernel == "gla" else (B, H, T)
    log_gate = -400 / C * (0.2 + 1.6 * torch.rand(*shape, generator=gen, dtype=F64))
    q, k, v = _randn(gen, B, H, T, D), _randn(gen, B, H, T, D), _randn(gen, B, H, T, DV)
    S0 = _randn(gen, B, H, D, DV)
    if kernel == "gated_delta_rule":
        attend, gates = gated_delta_rule, (torch.sigmoid(_randn(gen, B, H, T)), log_gate)
        k = F.normalize(k, dim=-1)
    else:
        attend, gates = gated_linear_attention, (log_gate,)
    inputs = [x.float() for x in (q, k, v, *gates, S0)]
    largest = []

    def recording(exp):
        def wrapped(x, *args, **kwargs):
            finite = x[torch.isfinite(x)]
            largest.append(finite.max().item() if finite.numel() else float("-inf"))
            return exp(x, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(torch, "exp", recording(torch.exp))
    monkeypatch.setattr(torch.Tensor, "exp", recording(torch.Tensor.exp))
    monkeypatch.setattr(torch.Tensor, "exp_", recording(torch.Tensor.exp_))
    o, S, grads = _run(attend, inputs, "chunk", C)
    assert largest, "the chunk form took no exponential through torch"
    assert max(largest) <= 0.0
    assert all(torch.isfinite(x).all() for x in (o, S, *grads))
