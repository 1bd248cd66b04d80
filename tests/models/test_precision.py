"""Mixed precision: every mixer under bf16 / fp16 (autocast, as Lightning's `bf16-mixed` and
`16-mixed` run it, and cast to half, as `bf16-true`) stays within a few rounding units of its
float32 output, forward, recurrent steps and backward, and never produces a NaN.

Tolerance: relative error ||y_low - y_fp32|| / ||y_fp32|| <= 3 * eps(dtype), i.e. 0.023 for
bf16 and 0.0029 for fp16. The projections alone round at eps / 2, so every mixer measures
0.4-0.7% in bf16 and 0.05-0.09% in fp16; a decay rounded to 1, an underflowed feature or a
state accumulated in half misses by 5-40% (or is NaN).

`rff` gets inputs of half the scale: at unit scale its random features put some of eq. 9's
denominators at or below 0 (pitfall 2: the collapse the harness ends as `diverged`), where
any rounding is amplified without bound (there, merely rounding its input to bf16 moves its
float64 output by 1% and its gradient by 6%)."""

import pytest
import torch

from models import MIXERS, build_mixer
from models.feature_maps import build_feature_map

D_MODEL, SEQ_LEN = 64, 100  # 100: longer than one chunk (64), not a multiple of it
HALF = (torch.bfloat16, torch.float16)
INPUT_SCALE = {"rff": 0.5}  # denominators of eq. 9 stay > 0.4 t (module docstring)


def tolerance(dtype: torch.dtype) -> float:
    return 3 * torch.finfo(dtype).eps


def relative_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    return ((y.double() - reference.double()).norm() / reference.double().norm()).item()


def make(name: str, **params) -> torch.nn.Module:
    """float32 mixer; signed-feature mixers without their collapse guard (random inputs)."""
    torch.manual_seed(0)
    if "collapse_fraction" in MIXERS.parameters(name):
        params.setdefault("collapse_fraction", 1.0)
    return build_mixer(name, D_MODEL, **params)


def steps(mixer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The outputs of `mixer.step` over the sequence (the recurrent state carried along)."""
    state, outputs = mixer.init_state(x.shape[0]), []
    for t in range(x.shape[1]):
        y_t, state = mixer.step(x[:, t], state)
        outputs.append(y_t)
    return torch.stack(outputs, 1)


def inputs(name: str) -> torch.Tensor:
    x = torch.randn(2, SEQ_LEN, D_MODEL, generator=torch.Generator().manual_seed(1))
    return x * INPUT_SCALE.get(name, 1.0)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", MIXERS.names())
def test_autocast_forward_and_backward_match_fp32(name: str, dtype) -> None:
    mixer = make(name)
    x = inputs(name).requires_grad_()
    reference = mixer(x)
    (reference_grad,) = torch.autograd.grad(reference.square().sum(), x)
    with torch.autocast("cpu", dtype=dtype):
        y = mixer(x)
    (grad,) = torch.autograd.grad(y.float().square().sum(), x)
    assert torch.isfinite(y).all() and torch.isfinite(grad).all()
    assert relative_error(y, reference) <= tolerance(dtype)
    assert relative_error(grad, reference_grad) <= tolerance(dtype)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", MIXERS.names())
def test_autocast_recurrent_steps_match_fp32(name: str, dtype) -> None:
    mixer, x = make(name).eval(), inputs(name)
    with torch.no_grad():
        reference = mixer(x)
        with torch.autocast("cpu", dtype=dtype):
            y = steps(mixer, x)
    assert torch.isfinite(y).all()
    assert relative_error(y, reference) <= tolerance(dtype)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", MIXERS.names())
def test_mixer_cast_to_half_matches_fp32(name: str, dtype) -> None:
    """Parameters and inputs in half (`bf16-true`); the recurrent state stays float32."""
    x = inputs(name)
    reference = make(name)(x)
    mixer = make(name).to(dtype)
    y = mixer(x.to(dtype))
    assert y.dtype == dtype and torch.isfinite(y).all()
    assert relative_error(y, reference) <= tolerance(dtype)
    state = mixer.init_state(2)
    _, state = mixer.step(x[:, 0].to(dtype), state)
    if name not in ("softmax", "sliding_window"):  # a KV cache is not a running sum
        assert torch.float32 in {s.dtype for s in state}


@pytest.mark.parametrize("mode", ["chunk", "recurrent"])
def test_retnet_decays_survive_bf16_in_every_head(mode: str) -> None:
    """gamma_h = 1 - 2^(-5-h): heads 4-7 have gamma = 1 - 2^-9 ... 1 - 2^-12, which is 1.0 in
    bf16 (before, their outputs were off by 42%, 20%, 10%, 5% at T = 512). Each head's
    retention output stays within tolerance of fp32, under autocast and cast to bf16."""
    torch.manual_seed(0)
    mixer = build_mixer("retnet", 128, n_heads=8, mode=mode).eval()
    x = torch.randn(1, 512, 128, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = mixer.retention(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            in_autocast = mixer.retention(x)
        half = mixer.to(torch.bfloat16)
        assert half.gammas.dtype == torch.float32
        assert half.gammas.tolist() == [1 - 2.0 ** (-5 - h) for h in range(8)]
        cast = half.retention(x.to(torch.bfloat16))
    for y in (in_autocast, cast):
        error = (y.double() - reference).norm(dim=(2, 3)) / reference.norm(dim=(2, 3))
        assert (error <= tolerance(torch.bfloat16)).all(), error


def test_favor_key_features_do_not_underflow_in_fp16() -> None:
    """Key features are ~e^-c with c = max |w|^2 / 2 (~30 for d = 32): 1e-13, below fp16's
    smallest number; they are computed and returned in fp32."""
    torch.manual_seed(0)
    feature_map = build_feature_map("favor", 32, 64)
    keys = torch.randn(4, 32).half()
    features = feature_map(keys)
    assert features.dtype == torch.float32
    assert (features > 0).all()
    assert features.max() < 1e-5  # values fp16 could not hold
