"""The Forgetting Transformer's attention (`forgetting_attention`) and its kernel
(`models.kernels.forgetting`): every mode against the definition written here as a double sum
(float64, odd lengths, forward and backward), softmax attention where nothing is forgotten,
the last token alone where everything is, the layer against fla's `ForgettingAttention` with
`naive_forgetting_attn` written out in float64, and the KV cache's state and bound. The
generic contract (causality, modes, step, state size, precision, compile) is in
test_mixers.py and its neighbours."""

import math

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.backbone import LanguageModel
from models.kernels import MODES, forgetting_attention, softmax_attention

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def by_definition(q, k, v, log_forget):
    """o_t = sum_{s<=t} exp(q_t.k_s / sqrt(d) + sum_{r=s+1..t} log f_r) v_s / (the same sum
    without v_s), one query and one key at a time."""
    B, H, T, d = q.shape
    out = torch.zeros(B, H, T, v.shape[-1])
    for t in range(T):
        logits = []
        for s in range(t + 1):
            forgotten = log_forget[:, :, s + 1 : t + 1].sum(-1)
            logits.append((q[:, :, t] * k[:, :, s]).sum(-1) / math.sqrt(d) + forgotten)
        weights = torch.stack(logits, -1).softmax(-1)  # [B, H, t + 1]
        out[:, :, t] = torch.einsum("bhs,bhsd->bhd", weights, v[:, :, : t + 1])
    return out


def kernel_inputs(T: int, seed: int = 0, d: int = 5, dv: int = 4, scale: float = 1.0):
    g = gen(seed)
    q, k = (torch.randn(2, 3, T, d, generator=g) for _ in range(2))
    v = torch.randn(2, 3, T, dv, generator=g)
    log_forget = F.logsigmoid(scale * torch.randn(2, 3, T, generator=g) + 1.0)
    return q, k, v, log_forget


@pytest.mark.parametrize("T", [1, 13, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"), [("recurrent", 8), ("parallel", 8), ("chunk", 8), ("chunk", 64)]
)
def test_forgetting_attention_is_the_definition_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    leaves = [x.requires_grad_() for x in kernel_inputs(T)]
    expected = by_definition(*leaves)
    o = forgetting_attention(*leaves, mode=mode, chunk_size=chunk_size)
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(o.sin().sum(), leaves)
    grads_expected = torch.autograd.grad(expected.sin().sum(), leaves)
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_nothing_forgotten_is_softmax_attention(mode: str) -> None:
    q, k, v, _ = kernel_inputs(29, seed=1)
    o = forgetting_attention(q, k, v, torch.zeros(2, 3, 29), mode=mode, chunk_size=8)
    torch.testing.assert_close(o, softmax_attention(q, k, v))


@pytest.mark.parametrize("mode", MODES)
def test_everything_forgotten_reads_the_token_itself(mode: str) -> None:
    """log f = -60 at every step: every earlier key is down by e^-60, so o_t = v_t."""
    q, k, v, _ = kernel_inputs(21, seed=2)
    o = forgetting_attention(q, k, v, torch.full((2, 3, 21), -60.0), mode=mode, chunk_size=8)
    torch.testing.assert_close(o, v, rtol=1e-12, atol=1e-12)


def test_a_forget_gate_above_one_is_refused() -> None:
    q, k, v, log_forget = kernel_inputs(5)
    with pytest.raises(ValueError, match="log_forget"):
        forgetting_attention(q, k, v, log_forget + 2.0)


def make(**params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer("forgetting_attention", D_MODEL, chunk_size=8, **params).double()


def fla_forgetting_layer(mixer, x: torch.Tensor) -> torch.Tensor:
    """fla's `ForgettingAttention.forward` (no cache, no padding) with the mixer's weights, in
    float64: q, k, v projections, f = logsigmoid(f_proj x), the q/k GroupNorm (RMS per head,
    eps 1e-5, a gain per channel) with `qk_norm`, `naive_forgetting_attn` (scores q k^T / sqrt(d)
    plus gc_t - gc_s with gc the cumulative sum of f, causal mask, softmax), the sigmoid
    output gate with `use_output_gate`, o_proj."""
    B, T, _ = x.shape
    H, d = mixer.n_heads, mixer.head_dim
    q, k, v = (x @ w.T for w in mixer.qkv.weight.chunk(3, 0))
    f = F.logsigmoid(x @ mixer.f_proj.weight.T + mixer.f_proj.bias)  # [B, T, H]
    if mixer.qk_norm:
        q, k = q.view(B, T, H, d), k.view(B, T, H, d)
        q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + 1e-5) * mixer.q_norm[:, 0]
        k = k * torch.rsqrt(k.square().mean(-1, keepdim=True) + 1e-5) * mixer.k_norm[:, 0]
    q, k, v = (y.reshape(B, T, H, d) for y in (q, k, v))
    gc = f.cumsum(1)
    scores = torch.einsum("bqhd,bkhd->bhqk", q * d**-0.5, k)
    scores = scores + gc.transpose(1, 2)[..., :, None] - gc.transpose(1, 2)[..., None, :]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, T, H * d)
    if mixer.use_output_gate:
        o = torch.sigmoid(x @ mixer.g_proj.weight.T) * o
    return o @ mixer.out.weight.T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", [{}, {"use_output_gate": True, "qk_norm": True, "n_heads": 4}])
def test_layer_is_fla_layer_written_out(mode: str, params: dict) -> None:
    mixer = make(mode=mode, **params)
    if mixer.qk_norm:
        with torch.no_grad():  # gains not all ones, so they are checked
            mixer.q_norm.uniform_(0.5, 1.5)
            mixer.k_norm.uniform_(0.5, 1.5)
    x = torch.randn(2, 27, D_MODEL, generator=gen(3))
    torch.testing.assert_close(mixer(x), fla_forgetting_layer(mixer, x), rtol=1e-10, atol=1e-10)


def test_steps_on_the_cache_are_the_parallel_form() -> None:
    mixer = make(use_output_gate=True)
    x = torch.randn(2, 19, D_MODEL, generator=gen(4))
    state, outs = mixer.init_state(2), []
    for t in range(19):
        y, state = mixer.step(x[:, t], state)
        outs.append(y)
    torch.testing.assert_close(torch.stack(outs, 1), mixer(x), rtol=1e-10, atol=1e-10)
    keys, values, decay = state
    assert keys.shape == values.shape == (2, 2, 19, 8) and decay.shape == (2, 2, 19)
    assert (decay[..., -1] == 0).all() and (decay[..., :-1] < 0).all()


def test_state_is_a_kv_cache_with_one_sum_per_head_and_token() -> None:
    """T (2 d_model + H) floats, growing with T; rank bound T; no knob; the block's shared
    conv is kept (no conv of its own)."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, "forgetting_attention", {"n_heads": 4}, d_model=32, short_conv=4)
    mixer = model.blocks[0].mixer
    assert mixer.grows_with_seq_len and mixer.state_knob is None
    assert mixer.state_size(64) == 64 * (2 * 32 + 4) and mixer.state_size(300) == 300 * 68
    assert mixer.rank_bound(64) == 64 and mixer.rank_bound(300) == 300
    assert not mixer.owns_short_conv


def test_forget_bias_sets_every_gate_bias_and_a_bad_one_is_refused() -> None:
    """b_f = 5 by default in every head, so f = sigmoid(5 + w_f^T x) near 0.993 for small
    w_f^T x; another number sets it; None keeps PyTorch's draw (|b_f| <= 1 / sqrt(d_model))."""
    assert torch.equal(make().f_proj.bias, torch.full((2,), 5.0))
    assert torch.equal(make(forget_bias=2.0).f_proj.bias, torch.full((2,), 2.0))
    assert make(forget_bias=None).f_proj.bias.abs().max() <= D_MODEL**-0.5
    with pytest.raises(ValueError, match="forget_bias=nan"):
        make(forget_bias=float("nan"))
