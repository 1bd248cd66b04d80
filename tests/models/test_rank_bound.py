"""Each mixer's `rank_bound` against its definition (docs/background.md, section 17): heads x
key-feature dimension for a matrix state, the kept tokens for a KV cache; computed here from
the constructor's settings, not from the mixer's attributes."""

import pytest
import torch

from harness.records.record import state_record
from models import MIXERS, build_mixer
from models.backbone import LanguageModel

D_MODEL = 32


def taylor(d: int) -> int:
    """Taylor features of d inputs: 1 + d + d^2."""
    return 1 + d + d * d


CASES = [
    # (name, params, seq_len, expected bound: heads x key dimension, or tokens kept)
    ("linear", {}, 64, 2 * (D_MODEL // 2)),
    ("linear", {"feature_dim": 8}, 64, 2 * 8),
    ("linear", {"feature_map": "taylor", "qk_dim": 4}, 64, 2 * taylor(4)),
    ("linear", {"feature_map": "favor", "feature_dim": 12, "n_heads": 4}, 64, 4 * 12),
    ("favor", {}, 64, 2 * 64),
    ("favor", {"feature_dim": 24}, 64, 2 * 24),
    ("identity", {"n_heads": 4}, 64, 4 * (D_MODEL // 4)),
    ("rff", {"feature_dim": 16}, 64, 2 * 16),
    ("retnet", {}, 64, 2 * (D_MODEL // 2)),
    ("retnet", {"n_heads": 8}, 64, 8 * (D_MODEL // 8)),
    ("gla", {}, 64, 2 * (D_MODEL // 4)),  # fla's expand_k = 0.5
    ("gla", {"n_heads": 4}, 64, 4 * (D_MODEL // 8)),
    ("gla", {"head_k_dim": 4}, 64, 2 * 4),
    ("deltanet", {}, 64, 2 * (D_MODEL // 2)),
    ("deltanet", {"n_heads": 4}, 64, 4 * (D_MODEL // 4)),
    ("deltanet", {"head_k_dim": 4}, 64, 2 * 4),
    ("deltanet", {"head_k_dim": 48, "expand_v": 0.5}, 64, 2 * 48),
    ("gated_deltanet", {"n_heads": 4}, 64, 4 * (D_MODEL // 4)),
    ("gated_deltanet", {"head_k_dim": 2}, 64, 2 * 2),
    ("mamba2", {}, 64, 2 * 32),
    ("mamba2", {"d_state": 16}, 64, 2 * 16),
    ("mamba2", {"d_state": 2, "expand": 1}, 64, 2 * 2),
    ("mamba2", {"d_state": 16, "n_heads": 4, "n_groups": 2}, 64, 4 * 16),
    ("based", {}, 64, 2 * taylor(16) + 16),
    ("based", {}, 8, 2 * taylor(16) + 8),  # the window holds only the 8 tokens seen
    ("based", {"feature_dim": 4, "window": 32, "n_heads": 4}, 64, 4 * taylor(4) + 32),
    ("rwkv", {}, 64, D_MODEL),  # one rank-1 key per channel
    # log-linear Mamba-2: ceil(log2 T) + 1 level states of rank d_state per head
    ("log_linear_mamba2", {}, 64, 7 * 2 * 32),
    ("log_linear_mamba2", {"d_state": 4}, 65, 8 * 2 * 4),
    ("log_linear_mamba2", {"d_state": 4, "n_heads": 4}, 1, 1 * 4 * 4),
    # gated DPLR rule (KDA, RWKV-7): every transition acts on the key side of a d_k x d_v state
    ("kda", {}, 64, 2 * (D_MODEL // 2)),
    ("kda", {"head_k_dim": 4}, 64, 2 * 4),
    ("gdn2", {}, 64, 2 * (D_MODEL // 2)),
    ("gdn2", {"head_k_dim": 4, "expand_v": 2.0}, 64, 2 * 4),
    ("rwkv7", {}, 64, 2 * (D_MODEL // 2)),
    ("rwkv7", {"head_k_dim": 3}, 64, 2 * 3),
    # n Householder steps per token keep the d_k x d_v state, so the bound does not move with n
    ("gated_deltaproduct", {}, 64, 2 * (D_MODEL // 2)),
    ("gated_deltaproduct", {"num_householder": 3}, 64, 2 * (D_MODEL // 2)),
    ("gated_deltaproduct", {"num_householder": 1, "head_k_dim": 4}, 64, 2 * 4),
    # MesaNet: values enter only H_kv (d_k x d_v), so the solve against H_kk adds no direction
    ("mesanet", {}, 64, 2 * (D_MODEL // 2)),
    ("mesanet", {"head_k_dim": 4, "n_heads": 4}, 64, 4 * 4),
    ("softmax", {}, 64, 64),
    ("softmax", {}, 300, 300),
    ("forgetting_attention", {}, 64, 64),  # a KV cache: the forget gate removes no token
    ("forgetting_attention", {"n_heads": 4}, 300, 300),
    ("sliding_window", {}, 64, 16),
    ("sliding_window", {"window": 40}, 24, 24),
]


@pytest.mark.parametrize(("name", "params", "seq_len", "expected"), CASES)
def test_rank_bound_is_heads_times_key_dimension(
    name: str, params: dict, seq_len: int, expected: int
) -> None:
    torch.manual_seed(0)
    mixer = build_mixer(name, D_MODEL, **params)
    assert mixer.rank_bound(seq_len) == expected


KNOBS = [
    # (name, knob, value, other params): state floats H d_k d_v + conv window, bound H d_k
    ("deltanet", "head_k_dim", 4, {}),
    ("deltanet", "head_k_dim", 32, {"conv_size": 0}),
    ("gated_deltanet", "head_k_dim", 8, {}),
    ("gla", "head_k_dim", 2, {}),
    ("gla", "head_k_dim", 8, {"conv_size": 0}),
    ("mamba2", "d_state", 4, {}),
    ("mamba2", "d_state", 16, {"n_groups": 2}),
    ("linear", "feature_dim", 4, {}),
    ("mesanet", "head_k_dim", 3, {}),
    ("mesanet", "head_k_dim", 6, {"conv_size": 0}),
]


def expected_state(name: str, knob: int, params: dict) -> tuple[int, int]:
    """(mixer floats, conv-window floats) per layer from the constructor's settings: matrix
    state per head d_k x d_v (Mamba-2: d_state x expand d_model / H; MesaNet also d_k x d_k),
    plus the mixer's own convolution over its q, k, v (Mamba-2: x, B, C; MesaNet: q, k)
    channels, (kernel - 1) each."""
    heads = params.get("n_heads", 2)
    kernel = params.get("conv_size", 4)
    window = kernel - 1 if kernel else 0
    if name == "linear":
        return heads * (knob * D_MODEL // heads + knob), 0
    if name == "mesanet":  # H_kk d_k x d_k and H_kv d_k x d_v per head; q, k convolved
        dv = D_MODEL // heads
        return heads * (knob * knob + knob * dv), window * 2 * heads * knob
    if name == "mamba2":
        inner, groups = 2 * D_MODEL, params.get("n_groups", 1)
        return heads * knob * inner // heads, window * (inner + 2 * groups * knob)
    dv = {"deltanet": 1, "gated_deltanet": 2, "gla": 1}[name] * D_MODEL // heads
    conv = window * (2 * heads * knob + heads * dv)
    return heads * knob * dv, conv


@pytest.mark.parametrize(("name", "knob", "value", "params"), KNOBS)
def test_state_and_bound_follow_the_knob(name: str, knob: str, value: int, params: dict) -> None:
    """The key dimension per head moves state and rank bound together, heads and value
    widths fixed; the mixer's conv windows are conv state, left out of the mixer's floats,
    and the record names the knob."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, name, {knob: value, **params}, d_model=D_MODEL, short_conv=4)
    mixer = model.blocks[0].mixer
    floats, conv = expected_state(name, value, params)
    assert mixer.state_knob == knob and getattr(mixer, knob) == value
    assert mixer.state_size(64) == floats + conv and mixer.conv_state_size() == conv
    assert mixer.rank_bound(64) == params.get("n_heads", 2) * value
    state = state_record(model, 64)
    shared = 0 if mixer.owns_short_conv else 3 * D_MODEL  # the block's conv, kernel 4
    assert state["mixer_floats_per_layer"] == floats
    assert state["conv_floats_per_layer"] == conv + shared
    assert state["floats_per_layer"] == floats + conv + shared
    assert state["knob"] == {"name": knob, "value": value}


def test_a_mixer_without_a_knob_records_none() -> None:
    model = LanguageModel(11, 64, "softmax", d_model=D_MODEL)
    assert state_record(model, 64)["knob"] is None


@pytest.mark.parametrize("name", MIXERS.names())
def test_every_mixer_bounds_its_bindings_by_its_state(name: str) -> None:
    """Any registered mixer, with or without a case above: its bound is a positive count of
    key directions (or kept tokens) that its state can hold, so at most its floats, and it
    never falls as the sequence grows."""
    torch.manual_seed(0)
    mixer = build_mixer(name, D_MODEL)
    bounds = [mixer.rank_bound(T) for T in (8, 64, 512)]
    assert all(isinstance(b, int) and b >= 1 for b in bounds), bounds
    assert bounds == sorted(bounds)
    assert all(b <= mixer.state_size(T) for b, T in zip(bounds, (8, 64, 512), strict=True))


@pytest.mark.parametrize("name", ["linear", "deltanet", "mamba2", "softmax"])
def test_the_record_carries_one_layers_bound(name: str) -> None:
    """`state.rank_bound_per_layer` is the mixer's bound; the short convolution adds none."""
    torch.manual_seed(0)
    model = LanguageModel(11, 64, name, d_model=D_MODEL, n_layers=2, short_conv=4)
    state = state_record(model, 64)
    assert state["rank_bound_per_layer"] == model.blocks[0].mixer.rank_bound(64)
    assert (
        state["rank_bound_per_layer"]
        == {
            "linear": 2 * 16,
            "deltanet": 2 * 16,
            "mamba2": 2 * 32,
            "softmax": 64,
        }[name]
    )


def test_the_bound_is_exact_for_a_linear_read_out() -> None:
    """The definition it stands for: with D-dimensional keys, D orthonormal keys are read back
    exactly by q = k, and D + 1 keys cannot all be (S = K^T V has rank <= D)."""
    torch.manual_seed(0)
    D, dv = 8, 16
    keys = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64))[0]
    values = torch.randn(D, dv, dtype=torch.float64)
    S = keys.T @ values  # D x dv
    torch.testing.assert_close(keys @ S, values)
    more_keys = torch.randn(D + 1, D, dtype=torch.float64)
    more_values = torch.randn(D + 1, dv, dtype=torch.float64)
    S = more_keys.T @ more_values
    # the best read-out Q of all D + 1 values: Q S = V needs rank(S) >= rank(V) = D + 1 > D
    best = torch.linalg.lstsq(S.T, more_values.T).solution.T @ S
    assert (best - more_values).abs().max() > 1e-3
