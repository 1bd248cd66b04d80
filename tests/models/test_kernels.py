"""Every fast mode of every kernel against its recurrent form (the specification), in float64,
on lengths that are not multiples of the chunk size; state hand-over; exercises 1, 2 and 4
of docs/background.md."""

import math

import pytest
import torch
import torch.nn.functional as F

from models import kernels
from models.kernels import (
    delta_rule,
    linear_attention,
    linear_attention_cumsum,
    linear_chunk,
    rwkv4_wkv,
    softmax_attention,
    taylor_features,
    taylor_linear_attention,
)
from tests.models.kernel_checks import graph_nodes, peak_bytes

F64 = torch.float64
LENGTHS = [1, 7, 37, 130]
CHUNKS = [16, 64]
B, H, D, DV = 2, 3, 5, 4
DECAY = [0.95, 0.6, 1.0]  # one gamma per head, including gamma = 1


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _leaves(*xs: torch.Tensor) -> list[torch.Tensor]:
    return [x.detach().clone().requires_grad_() for x in xs]


def _linear_inputs(T: int, seed: int, positive: bool = True, dtype: torch.dtype = F64):
    gen = torch.Generator().manual_seed(seed)
    q, k = _randn(gen, B, H, T, D, dtype=dtype), _randn(gen, B, H, T, D, dtype=dtype)
    v = _randn(gen, B, H, T, DV, dtype=dtype)
    if positive:  # phi = elu + 1 (eq. 5), so that the normaliser is positive
        q, k = F.elu(q) + 1, F.elu(k) + 1
    return q, k, v


def _linear_state(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return _randn(gen, B, H, D, DV), torch.rand(B, H, D, generator=gen, dtype=F64) + 0.5


def _grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Gradients of a fixed random projection of `out`."""
    gen = torch.Generator().manual_seed(123)
    cotangent = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    return torch.autograd.grad((out * cotangent).sum(), inputs, materialize_grads=True)


def _assert_close(actual, expected, tol: float = 1e-10) -> None:
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- linear attention


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("use_decay", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_linear_attention_modes_match_recurrent(T, chunk_size, use_decay, normalize, with_state):
    q, k, v = _linear_inputs(T, seed=T, positive=normalize)
    decay = torch.tensor(DECAY, dtype=F64) if use_decay else None
    state = _linear_state(seed=1) if with_state else None
    results = {}
    for mode in ("recurrent", "parallel", "chunk"):
        leaves = _leaves(q, k, v) + (_leaves(decay) if use_decay else [])
        kw = dict(decay=leaves[3] if use_decay else None, normalize=normalize, mode=mode)
        o, (S, z) = linear_attention(
            *leaves[:3], **kw, chunk_size=chunk_size, initial_state=state, return_state=True
        )
        results[mode] = (o, S, z, _grads(o, leaves))
    ref = results.pop("recurrent")
    for o, S, z, grads in results.values():
        _assert_close(o, ref[0])
        _assert_close(S, ref[1])
        _assert_close(z, ref[2])
        for g, g_ref in zip(grads, ref[3], strict=True):
            _assert_close(g, g_ref)


@pytest.mark.parametrize("mode", ["recurrent", "parallel", "chunk"])
@pytest.mark.parametrize("use_decay", [False, True])
def test_linear_attention_state_hand_over(mode, use_decay):
    q, k, v = _linear_inputs(37, seed=5)
    kw = dict(decay=torch.tensor(DECAY, dtype=F64) if use_decay else None, mode=mode, chunk_size=8)
    whole, state = linear_attention(q, k, v, **kw, return_state=True)
    cut = 13
    first, mid = linear_attention(
        q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], **kw, return_state=True
    )
    second, end = linear_attention(
        q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], **kw, initial_state=mid, return_state=True
    )
    _assert_close(torch.cat([first, second], 2), whole)
    _assert_close(end[0], state[0])
    _assert_close(end[1], state[1])


def test_linear_attention_many_chunks_with_decay():
    """More chunks than one block of the decayed chunk-state scan (150 chunks: 64 + 64 + 22)."""
    q, k, v = _linear_inputs(301, seed=6)
    kw = dict(decay=torch.tensor(DECAY, dtype=F64), initial_state=_linear_state(3))
    ref, ref_state = linear_attention(q, k, v, mode="recurrent", **kw, return_state=True)
    out, state = linear_attention(q, k, v, mode="chunk", chunk_size=2, **kw, return_state=True)
    _assert_close(out, ref)
    _assert_close(state[0], ref_state[0])
    _assert_close(state[1], ref_state[1])


@pytest.mark.parametrize("rows_per_tile", [1, 2, H])
@pytest.mark.parametrize("variant", ["causal", "decay", "taylor"])
def test_chunk_tiles_match_recurrent(monkeypatch, rows_per_tile, variant):
    """Chunk mode in tiles of a few rows (the weights recomputed in the backward; tiles of
    whole sequences, of single rows, and tiles that split a sequence's heads), forwards and
    backwards, against the step loop. 37 steps in chunks of 8: 4 whole chunks and a tail."""
    T, C = 37, 8
    monkeypatch.setattr(linear_chunk, "CHUNK_TILE_BYTES", rows_per_tile * (T // C) * C * C * 8)
    gen = torch.Generator().manual_seed(rows_per_tile)
    q, k, v = (_randn(gen, B, H, T, n) for n in (D, D, DV))
    decay = torch.tensor(DECAY, dtype=F64) if variant == "decay" else None
    state = _linear_state(seed=2)
    if variant == "taylor":
        q, k = 0.5 * q, 0.5 * k
        Df = 1 + D + D * D
        state = (_randn(gen, B, H, Df, DV), torch.rand(B, H, Df, generator=gen, dtype=F64) + 1)
    else:
        q, k = F.elu(q) + 1, F.elu(k) + 1
    results = []
    for mode in ("recurrent", "chunk"):
        leaves = _leaves(q, k, v) + (_leaves(decay) if decay is not None else [])
        kw = dict(mode=mode, chunk_size=C, initial_state=state, return_state=True)
        if variant == "taylor":
            if mode == "recurrent":
                fq, fk = taylor_features(leaves[0]), taylor_features(leaves[1])
                o, (S, z) = linear_attention(fq, fk, leaves[2], **kw)
            else:
                o, (S, z) = taylor_linear_attention(*leaves, **kw)
        else:
            o, (S, z) = linear_attention(
                *leaves[:3], decay=leaves[3] if decay is not None else None, **kw
            )
        results.append((o, S, z, _grads(o + S.sum() + z.sum(), leaves)))
    (o, S, z, grads), (o_ref, S_ref, z_ref, grads_ref) = results[1], results[0]
    _assert_close(o, o_ref)
    _assert_close(S, S_ref)
    _assert_close(z, z_ref)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        _assert_close(g, g_ref)


def test_normalized_backward_matches_autograd_on_the_division():
    """eq. 9's division with its hand-written backward equals autograd's, eps included."""
    gen = torch.Generator().manual_seed(4)
    num_den = _randn(gen, 2, 3, 5, DV + 1)
    num_den[..., -1] = num_den[..., -1].abs() + 0.5
    eps = torch.tensor(1e-3, dtype=F64)
    leaves = _leaves(num_den, eps)
    ours = kernels.normalized(*leaves)
    ref_leaves = _leaves(num_den, eps)
    num, den = ref_leaves[0].split([DV, 1], -1)
    ref = num / (den + ref_leaves[1])
    _assert_close(ours, ref)
    for g, g_ref in zip(_grads(ours, leaves), _grads(ref, ref_leaves), strict=True):
        _assert_close(g, g_ref)
    assert torch.autograd.gradcheck(kernels.normalized, _leaves(num_den, eps))


def test_linear_attention_float32_chunk_matches_recurrent():
    q, k, v = _linear_inputs(300, seed=7, dtype=torch.float32)
    for decay in (None, torch.tensor(DECAY)):
        ref = linear_attention(q, k, v, decay=decay, mode="recurrent")
        for mode in ("chunk", "parallel"):
            out = linear_attention(q, k, v, decay=decay, mode=mode)
            assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()


def test_linear_attention_cumsum_is_the_recurrent_form():
    """Exercise 1: the parallel form from cumulative sums equals the RNN (eq. 8-9)."""
    q, k, v = _linear_inputs(37, seed=8)
    for normalize in (True, False):
        ref = linear_attention(q, k, v, normalize=normalize, mode="recurrent")
        _assert_close(linear_attention_cumsum(q, k, v, normalize=normalize), ref)


def test_identity_feature_map_makes_a_linear_layer():
    """Exercise 2: phi = identity, no normaliser: S_T = K^T V and o_T = q_T^T (K^T V), linear
    in q (negative features are fine without the normaliser)."""
    q, k, v = _linear_inputs(23, seed=9, positive=False)
    o, (S, z) = linear_attention(q, k, v, normalize=False, return_state=True)
    KtV = torch.einsum("bhtd,bhte->bhde", k, v)
    _assert_close(S, KtV)
    _assert_close(z, k.sum(2))
    _assert_close(o[:, :, -1], torch.einsum("bhd,bhde->bhe", q[:, :, -1], KtV))
    q2 = q.clone()
    q2[:, :, -1] = _randn(torch.Generator().manual_seed(10), B, H, D)
    q_mix = q.clone()
    q_mix[:, :, -1] = 2.0 * q[:, :, -1] - 3.0 * q2[:, :, -1]
    last = [linear_attention(x, k, v, normalize=False)[:, :, -1] for x in (q, q2, q_mix)]
    _assert_close(last[2], 2.0 * last[0] - 3.0 * last[1])


@pytest.mark.parametrize("normalize", [True, False])
def test_retnet_with_gamma_one_is_linear_attention(normalize):
    """Exercise 4: decay = 1 in every head gives the undecayed kernel."""
    q, k, v = _linear_inputs(37, seed=11)
    ones = torch.ones(H, dtype=F64)
    for mode in ("recurrent", "parallel", "chunk"):
        kw = dict(normalize=normalize, mode=mode, chunk_size=16)
        with_ones = linear_attention(q, k, v, decay=ones, **kw)
        without = linear_attention(q, k, v, decay=None, **kw)
        if mode == "recurrent":
            assert torch.equal(with_ones, without)
        else:  # same terms, summed in another order
            _assert_close(with_ones, without, tol=1e-13)


def test_chunk_mode_never_holds_a_state_per_step():
    """Peak memory of chunk mode at T=8192, D=Dv=64 stays far below one [T, D, Dv] tensor."""
    T, Dk = 8192, 64
    gen = torch.Generator().manual_seed(12)
    q, k, v = (torch.rand(1, 1, T, Dk, generator=gen, dtype=F64) for _ in range(3))
    per_step_states = T * Dk * Dk * 8
    for decay in (None, torch.tensor([0.9], dtype=F64)):
        peak = peak_bytes(lambda decay=decay: linear_attention(q, k, v, decay=decay, mode="chunk"))
        assert 0 < peak < per_step_states / 4


# ----------------------------------------------------------------------------- Taylor (Based)


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("return_state", [False, True])
def test_taylor_attention_modes_match_recurrent_linear_attention(
    T, chunk_size, with_state, return_state
):
    """Every mode equals linear attention's step loop on the materialised Taylor features
    (chunk mode takes the weights inside a chunk from q^T k instead)."""
    gen = torch.Generator().manual_seed(T)
    q, k = 0.5 * _randn(gen, B, H, T, D), 0.5 * _randn(gen, B, H, T, D)
    v = _randn(gen, B, H, T, DV)
    Df = 1 + D + D * D
    state = None
    if with_state:
        state = (_randn(gen, B, H, Df, DV), torch.rand(B, H, Df, generator=gen, dtype=F64) + 0.5)
    leaves = _leaves(q, k, v)
    ref, ref_state = linear_attention(
        taylor_features(leaves[0]), taylor_features(leaves[1]), leaves[2], mode="recurrent",
        initial_state=state, return_state=True,
    )  # fmt: skip
    ref_grads = _grads(ref, leaves)
    for mode in ("recurrent", "parallel", "chunk"):
        leaves = _leaves(q, k, v)
        kw = dict(mode=mode, chunk_size=chunk_size, initial_state=state)
        out = taylor_linear_attention(*leaves, **kw, return_state=return_state)
        if return_state:
            out, (S, z) = out
            _assert_close(S, ref_state[0])
            _assert_close(z, ref_state[1])
        _assert_close(out, ref)
        for g, g_ref in zip(_grads(out, leaves), ref_grads, strict=True):
            _assert_close(g, g_ref)


def test_taylor_features_give_the_second_order_kernel():
    gen = torch.Generator().manual_seed(19)
    q, k = _randn(gen, 4, D), _randn(gen, 4, D)
    s = q @ k.T
    _assert_close(taylor_features(q) @ taylor_features(k).T, 1 + s + s**2 / 2)
    assert taylor_features(q).shape[-1] == 1 + D + D * D


# ----------------------------------------------------------------------------- softmax


def test_softmax_attention_is_eq_1():
    gen = torch.Generator().manual_seed(13)
    q, k = _randn(gen, B, H, 9, D), _randn(gen, B, H, 9, D)
    v = _randn(gen, B, H, 9, DV)
    expected = torch.zeros(B, H, 9, DV, dtype=F64)
    for t in range(9):
        logits = torch.einsum("bhd,bhsd->bhs", q[:, :, t], k[:, :, : t + 1]) / math.sqrt(D)
        weights = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
        expected[:, :, t] = torch.einsum("bhs,bhse->bhe", weights, v[:, :, : t + 1])
    _assert_close(softmax_attention(q, k, v), expected)


# ----------------------------------------------------------------------------- RWKV-4


def _wkv_inputs(T: int, seed: int, C: int = 6, k_scale: float = 2.0, dtype: torch.dtype = F64):
    gen = torch.Generator().manual_seed(seed)
    w = torch.cat([torch.tensor([0.0, 0.01, 5.0]), 2 * torch.rand(C - 3, generator=gen)])
    u = torch.randn(C, generator=gen)
    k, v = k_scale * torch.randn(B, T, C, generator=gen), torch.randn(B, T, C, generator=gen)
    return tuple(x.to(dtype) for x in (w, u, k, v))


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("with_state", [False, True])
def test_rwkv4_modes_match_recurrent(T, chunk_size, with_state):
    w, u, k, v = _wkv_inputs(T, seed=T)
    state = None
    if with_state:  # the state left by a random prefix
        w0, u0, k0, v0 = _wkv_inputs(5, seed=99)
        _, state = rwkv4_wkv(w, u, k0, v0, mode="recurrent", return_state=True)
    results = {}
    for mode in ("recurrent", "parallel", "chunk"):
        leaves = _leaves(w, u, k, v)
        out, st = rwkv4_wkv(
            *leaves, mode=mode, chunk_size=chunk_size, initial_state=state, return_state=True
        )
        results[mode] = (out, st, _grads(out, leaves))
    ref_out, ref_state, ref_grads = results.pop("recurrent")
    for out, st, grads in results.values():
        _assert_close(out, ref_out)
        _assert_close(st[2], ref_state[2])  # the running max is the largest exponent
        _assert_close(st[0] * torch.exp(st[2] - ref_state[2]), ref_state[0])
        _assert_close(st[1] * torch.exp(st[2] - ref_state[2]), ref_state[1])
        for g, g_ref in zip(grads, ref_grads, strict=True):
            _assert_close(g, g_ref)


@pytest.mark.parametrize("T", [37, 130])
@pytest.mark.parametrize("chunk_size", [2, 3, 5])
def test_rwkv4_chunk_scan_over_several_levels_matches_recurrent(T, chunk_size):
    """Small chunks make the chunk mode's scan recurse: 130 tokens in chunks of 2 are scanned
    as 65 chunk sums, then 32, 16, 8, 4, 2, with a remainder at most levels."""
    w, u, k, v = _wkv_inputs(T, seed=T + chunk_size)
    _, state = rwkv4_wkv(w, u, *_wkv_inputs(5, seed=98)[2:], mode="recurrent", return_state=True)
    results = {}
    for mode in ("recurrent", "chunk"):
        leaves = _leaves(w, u, k, v)
        out, st = rwkv4_wkv(
            *leaves, mode=mode, chunk_size=chunk_size, initial_state=state, return_state=True
        )
        results[mode] = (out, st, _grads(out, leaves))
    (out, st, grads), (ref, ref_st, ref_grads) = results["chunk"], results["recurrent"]
    _assert_close(out, ref)
    for x, y in zip(st, ref_st, strict=True):
        _assert_close(x, y)
    for g, g_ref in zip(grads, ref_grads, strict=True):
        _assert_close(g, g_ref)


def test_rwkv4_chunk_mode_holds_no_chunk_by_chunk_matrix():
    """Peak memory of chunk mode at T=8192, C=64, forward and backward: below 40 tensors of
    [T, C] (the chunk-by-chunk exponent form held [T, chunk_size, C], 16 of them per tensor)."""
    T, C = 8192, 64
    w, u, k, v = _leaves(*_wkv_inputs(T, seed=21, C=C))

    def forward_backward() -> None:
        rwkv4_wkv(w, u, k[:1], v[:1], mode="chunk", chunk_size=16).sum().backward()

    assert 0 < peak_bytes(forward_backward) < 40 * T * C * 8


@pytest.mark.parametrize("mode", ["recurrent", "parallel", "chunk"])
def test_rwkv4_state_hand_over(mode):
    w, u, k, v = _wkv_inputs(37, seed=14)
    whole, state = rwkv4_wkv(w, u, k, v, mode=mode, chunk_size=8, return_state=True)
    cut = 13
    first, mid = rwkv4_wkv(w, u, k[:, :cut], v[:, :cut], mode=mode, chunk_size=8, return_state=True)
    second, end = rwkv4_wkv(
        w, u, k[:, cut:], v[:, cut:], mode=mode, chunk_size=8, initial_state=mid, return_state=True
    )
    _assert_close(torch.cat([first, second], 1), whole)
    for x, y in zip(end, state, strict=True):
        _assert_close(x, y)


def test_rwkv4_is_eq_11():
    """Direct evaluation of eq. 11 on a tiny input (small exponents: no stabilisation needed)."""
    w, u, k, v = _wkv_inputs(6, seed=15, C=4, k_scale=1.0)
    expected = torch.zeros_like(v)
    for t in range(6):
        num = torch.exp(u + k[:, t]) * v[:, t]
        den = torch.exp(u + k[:, t])
        for j in range(t):
            weight = torch.exp(-(t - 1 - j) * w + k[:, j])
            num, den = num + weight * v[:, j], den + weight
        expected[:, t] = num / den
    for mode in ("recurrent", "parallel", "chunk"):
        _assert_close(rwkv4_wkv(w, u, k, v, mode=mode, chunk_size=4), expected)


def test_rwkv4_is_stable_in_float32():
    """k = +-60 and w * T up to 650: exp(60 + u) alone would overflow float32 for u > 28."""
    w, u, k, v = _wkv_inputs(130, seed=16)
    u = u + 40.0
    k = 60.0 * torch.sign(k)
    ref = rwkv4_wkv(w, u, k, v, mode="recurrent")
    for mode in ("recurrent", "parallel", "chunk"):
        leaves = _leaves(*(x.float() for x in (w, u, k, v)))
        out = rwkv4_wkv(*leaves, mode=mode, chunk_size=16)
        assert all(torch.isfinite(g).all() for g in _grads(out, leaves))
        # float32 rounding of exponents up to ~650 (the step loop accumulates p - w - w ...)
        torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=5e-5)


# ----------------------------------------------------------------------------- delta rule


def _delta_inputs(T: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q, k = _randn(gen, B, H, T, D), F.normalize(_randn(gen, B, H, T, D), dim=-1)
    v, beta = _randn(gen, B, H, T, DV), torch.sigmoid(_randn(gen, B, H, T))
    return q, k, v, beta


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("with_state", [False, True])
def test_delta_rule_modes_match_recurrent(T, chunk_size, with_state):
    inputs = _delta_inputs(T, seed=T)
    state = _linear_state(seed=2)[0] if with_state else None
    results = {}
    for mode in ("recurrent", "parallel", "chunk"):
        leaves = _leaves(*inputs)
        out, S = delta_rule(
            *leaves, mode=mode, chunk_size=chunk_size, initial_state=state, return_state=True
        )
        results[mode] = (out, S, _grads(out, leaves))
    ref_out, ref_S, ref_grads = results.pop("recurrent")
    for out, S, grads in results.values():
        _assert_close(out, ref_out)
        _assert_close(S, ref_S)
        for g, g_ref in zip(grads, ref_grads, strict=True):
            _assert_close(g, g_ref)


@pytest.mark.parametrize("mode", ["recurrent", "parallel", "chunk"])
def test_delta_rule_state_hand_over(mode):
    q, k, v, beta = _delta_inputs(37, seed=17)
    whole, state = delta_rule(q, k, v, beta, mode=mode, chunk_size=8, return_state=True)
    a, b = slice(0, 13), slice(13, None)
    first, mid = delta_rule(
        q[:, :, a], k[:, :, a], v[:, :, a], beta[:, :, a], mode=mode, chunk_size=8,
        return_state=True,
    )  # fmt: skip
    second, end = delta_rule(
        q[:, :, b], k[:, :, b], v[:, :, b], beta[:, :, b], mode=mode, chunk_size=8,
        initial_state=mid, return_state=True,
    )  # fmt: skip
    _assert_close(torch.cat([first, second], 2), whole)
    _assert_close(end, state)


def test_delta_rule_stores_an_association_exactly_with_beta_one():
    """beta = 1 overwrites: after writing v at unit key k, reading at k returns v."""
    q, k, v, _ = _delta_inputs(9, seed=18)
    beta = torch.ones(B, H, 9, dtype=F64)
    _, S = delta_rule(q, k, v, beta, return_state=True)
    _assert_close(torch.einsum("bhd,bhde->bhe", k[:, :, -1], S), v[:, :, -1])


# ----------------------------------------------------------------------------- bad input


def _calls(**kw):
    q, k, v = _linear_inputs(7, seed=0)
    w, u, kw_, vw = _wkv_inputs(7, seed=0)
    _, kd, _, beta = _delta_inputs(7, seed=0)
    return [
        lambda: linear_attention(q, k, v, **kw),
        lambda: rwkv4_wkv(w, u, kw_, vw, **kw),
        lambda: delta_rule(q, kd, v, beta, **kw),
    ]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mode": "fast"}, "mode='fast' is invalid: must be one of chunk, parallel, recurrent"),
        ({"chunk_size": 0}, "chunk_size=0 is invalid: must be an integer >= 1"),
        ({"chunk_size": 2.5}, "chunk_size=2.5 is invalid"),
    ],
)
def test_bad_mode_or_chunk_size_is_rejected(kw, message):
    for call in _calls(**kw):
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            call()


def test_bad_shapes_are_rejected():
    q, k, v = _linear_inputs(7, seed=0)
    w, u, kr, vr = _wkv_inputs(7, seed=0)
    with pytest.raises(ValueError, match=r"got q \[2, 3, 7, 5\], k \[2, 3, 6, 5\]"):
        linear_attention(q, k[:, :, :6], v)
    with pytest.raises(ValueError, match=r"v \[2, 3, 7\]"):
        softmax_attention(q, k, v[..., 0])
    with pytest.raises(ValueError, match=r"decay must have shape \[3\], got \[2\]"):
        linear_attention(q, k, v, decay=torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=r"initial_state\[0\] \(S\) must have shape"):
        linear_attention(q, k, v, initial_state=(torch.zeros(2, 3, 5, 5), torch.zeros(2, 3, 5)))
    with pytest.raises(ValueError, match=r"beta must have shape \[2, 3, 7\], got \[2, 3, 6\]"):
        delta_rule(q, k, v, torch.ones(2, 3, 6, dtype=F64))
    with pytest.raises(ValueError, match=r"w must have shape \[6\], got \[5\]"):
        rwkv4_wkv(w[:5], u, kr, vr)
    with pytest.raises(ValueError, match=r"got k \[2, 7, 6\], v \[2, 6, 6\]"):
        rwkv4_wkv(w, u, kr, vr[:, :6])


# ----------------------------------------------------------------------------- autograd graphs


@pytest.mark.parametrize("mode", ["recurrent", "chunk"])
def test_no_loop_indexes_one_step_or_chunk_in_autograd(mode):
    """Selecting step t (or chunk c) of a tensor inside a loop puts one SelectBackward per step
    in the graph, and each allocates a gradient of the whole tensor: a backward quadratic in T.
    The loops split their inputs once (unbind) instead."""
    q, k, v = _linear_inputs(64, seed=22)
    wq, wu, wk, wv = _wkv_inputs(64, seed=22)
    dq, dk, dv, beta = _delta_inputs(64, seed=22)
    kw = dict(mode=mode, chunk_size=4)
    outs = [
        linear_attention(*_leaves(q, k, v), **kw),
        linear_attention(*_leaves(q, k, v), decay=torch.tensor(DECAY, dtype=F64), **kw),
        rwkv4_wkv(*_leaves(wq, wu, wk, wv), **kw),
        delta_rule(*_leaves(dq, dk, dv, beta), **kw),
    ]
    for out in outs:
        assert "SelectBackward0" not in graph_nodes(out)
