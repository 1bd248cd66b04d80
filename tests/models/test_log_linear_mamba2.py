"""Log-linear Mamba-2 (`log_linear_mamba2`) and its kernel (`models.kernels.log_linear`): every
mode against the step loop in float64 on odd lengths, forward and backward; the step loop
against the paper's definition written as a double sum over the Fenwick blocks; the state
that grows as log T; the rank bound levels(T) H N."""

import math

import pytest
import torch

from models import build_mixer
from models.kernels import gated_linear_attention
from models.kernels.log_linear import level_matrix, log_linear_attention, num_levels

B, H, N, P = 2, 3, 4, 5


def inputs(t: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, B, H, t, N, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, t, P, generator=g, dtype=torch.float64)
    log_gate = -torch.rand(B, H, t, generator=g, dtype=torch.float64)
    weights = torch.rand(B, H, t, 15, generator=g, dtype=torch.float64)
    return q, k, v, log_gate, weights


def in_block(i: int, j: int, level: int) -> bool:
    """The paper's partition of [0, i]: level 0 is {i}; level l >= 1 is non-empty when
    i mod 2^l >= 2^(l-1), and is [s - 2^(l-1), s) with s = i - (i mod 2^(l-1))."""
    if level == 0:
        return i == j
    if i % (1 << level) < 1 << (level - 1):
        return False
    start = i - i % (1 << (level - 1))
    return start - (1 << (level - 1)) <= j < start


def by_definition(q, k, v, log_gate, weights) -> torch.Tensor:
    t = q.shape[2]
    G = torch.cumsum(log_gate, -1)
    o = torch.zeros(B, H, t, P, dtype=torch.float64)
    for i in range(t):
        for j in range(i + 1):
            (level,) = [lv for lv in range(num_levels(t)) if in_block(i, j, lv)]
            scale = weights[:, :, i, level] * torch.exp(G[:, :, i] - G[:, :, j])
            o[:, :, i] += (scale * (q[:, :, i] * k[:, :, j]).sum(-1))[..., None] * v[:, :, j]
    return o


def test_the_levels_partition_every_prefix_and_count_as_the_paper() -> None:
    for i in range(70):
        for j in range(i + 1):
            assert sum(in_block(i, j, lv) for lv in range(9)) == 1, (i, j)
            assert in_block(i, j, int(level_matrix(i + 1, torch.device("cpu"))[i, j]))
    for t in range(2, 300):
        assert num_levels(t) == math.ceil(math.log2(t)) + 1  # fla's get_num_levels(t, 2)


@pytest.mark.parametrize("t", [1, 2, 13, 37])
def test_the_step_loop_is_the_definition(t: int) -> None:
    args = inputs(t)
    torch.testing.assert_close(log_linear_attention(*args, mode="recurrent"), by_definition(*args))


@pytest.mark.parametrize(
    ("t", "chunk_size"), [(1, 4), (37, 8), (37, 4), (65, 16), (65, 64), (9, 1)]
)
def test_every_mode_equals_the_step_loop_forward_and_backward(t: int, chunk_size: int) -> None:
    args = [x.requires_grad_() for x in inputs(t, seed=t)]
    results = {}
    for mode in ("recurrent", "parallel", "chunk"):
        o = log_linear_attention(*args, mode=mode, chunk_size=chunk_size)
        grads = torch.autograd.grad(o.square().sum(), args)
        results[mode] = (o, grads)
    for mode in ("parallel", "chunk"):
        torch.testing.assert_close(results[mode][0], results["recurrent"][0], msg=mode)
        for grad, reference in zip(results[mode][1], results["recurrent"][1], strict=True):
            torch.testing.assert_close(grad, reference, msg=mode)


def test_a_split_sequence_with_its_state_is_the_whole() -> None:
    q, k, v, g, w = inputs(29)
    whole = log_linear_attention(q, k, v, g, w, mode="recurrent")
    first, state = log_linear_attention(
        q[:, :, :11], k[:, :, :11], v[:, :, :11], g[:, :, :11], w[:, :, :11],
        mode="recurrent", return_state=True,
    )  # fmt: skip
    rest = log_linear_attention(
        q[:, :, 11:], k[:, :, 11:], v[:, :, 11:], g[:, :, 11:], w[:, :, 11:],
        mode="recurrent", initial_state=state,
    )  # fmt: skip
    torch.testing.assert_close(torch.cat([first, rest], 2), whole)


def test_equal_level_weights_give_mamba2s_recurrence() -> None:
    q, k, v, g, w = inputs(37)
    ones = torch.ones_like(w)
    expected = gated_linear_attention(q, k, v, g, mode="recurrent")
    torch.testing.assert_close(
        log_linear_attention(q, k, v, g, ones, mode="chunk", chunk_size=8), expected
    )


def test_too_few_level_weights_and_a_chunk_not_a_power_of_two_are_refused() -> None:
    q, k, v, g, w = inputs(37)
    with pytest.raises(ValueError, match="levels"):
        log_linear_attention(q, k, v, g, w[..., :5])
    with pytest.raises(ValueError, match="power of 2"):
        log_linear_attention(q, k, v, g, w, chunk_size=6)
    with pytest.raises(ValueError, match="chunk_size"):
        build_mixer("log_linear_mamba2", 16, chunk_size=12)


def make(**params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer("log_linear_mamba2", 16, **params).double()


@pytest.mark.parametrize(
    "params", [{}, {"d_state": 3, "n_groups": 2, "conv_size": 3}, {"conv_size": 0}]
)
def test_the_mixers_modes_and_step_agree(params: dict) -> None:
    x = torch.randn(2, 37, 16, dtype=torch.float64, requires_grad=True)
    results = {}
    for mode in ("recurrent", "parallel", "chunk"):
        y = make(mode=mode, chunk_size=8, **params)(x)
        results[mode] = (y, torch.autograd.grad(y.square().sum(), x)[0])
    for mode in ("parallel", "chunk"):
        torch.testing.assert_close(results[mode][0], results["recurrent"][0])
        torch.testing.assert_close(results[mode][1], results["recurrent"][1])
    mixer = make(**params).eval()
    state = mixer.init_state(2)
    for t in range(37):
        y_t, state = mixer.step(x[:, t].detach(), state)
        torch.testing.assert_close(y_t, results["chunk"][0][:, t].detach())
        assert mixer.state_size(t + 1) == sum(s.numel() for s in state) // 2


def test_state_grows_as_log_t_and_the_bound_with_it() -> None:
    mixer = make(d_state=6)  # H = 2, P = expand * 16 / 2 = 16, conv over 32 + 12 channels
    conv = 3 * (32 + 2 * 6)
    for t, levels in ((1, 1), (2, 2), (64, 7), (65, 8), (1024, 11)):
        assert mixer.state_size(t) == levels * 2 * 6 * 16 + 1 + conv
        assert mixer.rank_bound(t) == levels * 2 * 6
    assert mixer.grows_with_seq_len and mixer.state_knob == "d_state" and mixer.d_state == 6
    assert mixer.state_size(4096) < 2 * mixer.state_size(64)  # 13 levels against 7
