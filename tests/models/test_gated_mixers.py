"""Facts specific to the gated mixers (the generic contract is in test_mixers.py): GLA's
low-rank per-dimension gate in (0, 1], Mamba-2's parameterisation (keys dt B, queries C after
its own conv, the D skip, A = 0 giving unnormalised linear attention), Gated DeltaNet's
unit-norm q, k, its A range and its gate on top of DeltaNet, and the one-line refusals of bad
parameters. The reference layers' convolutions: test_reference_layers.py."""

import pytest
import torch
import torch.nn.functional as F

from models import build_mixer
from models.kernels import MODES, delta_rule, linear_attention
from models.mixers import gla, mamba2

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def make(name: str, d_model: int = D_MODEL, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_mixer(name, d_model, **params).double()


def inputs(T: int = 29, seed: int = 1) -> torch.Tensor:
    return torch.randn(2, T, D_MODEL, generator=torch.Generator().manual_seed(seed))


def unnormalised_linear_attention(q, k, v, log_gate, *, mode, chunk_size, **kw):
    """gated_linear_attention's signature, the gate ignored: eq. 8 without normaliser."""
    return linear_attention(q, k, v, normalize=False, mode=mode, chunk_size=chunk_size, **kw)


# --- gla --------------------------------------------------------------------------------------


def test_gla_gate_is_low_rank_per_key_dimension_in_0_1() -> None:
    """log a = logsigmoid(W_2 W_1 x + b) / 16 with W_1 of rank 16: one gate per key dimension,
    each in (0, 1] and at least sigmoid(logit)^(1/16)."""
    mixer = make("gla")
    assert mixer.head_k_dim == D_MODEL // 4  # fla's expand_k = 0.5
    key_width = mixer.n_heads * mixer.head_k_dim
    first, second = mixer.forget_gate
    assert first.weight.shape == (16, D_MODEL) and first.bias is None
    assert second.weight.shape == (key_width, 16) and second.bias.shape == (key_width,)
    x = 5 * inputs()
    log_gate = mixer.log_gate(x)
    assert log_gate.shape == (2, mixer.n_heads, 29, mixer.head_k_dim)
    logit = x @ first.weight.T @ second.weight.T + second.bias
    expected = (F.logsigmoid(logit) / 16).view(2, 29, mixer.n_heads, -1).transpose(1, 2)
    torch.testing.assert_close(log_gate, expected)
    gate = log_gate.exp()
    assert (gate > 0).all() and (gate <= 1).all()
    assert gate.min() < 0.9  # the inputs move it: not a constant
    head_gates = torch.sigmoid(logit).view(2, 29, mixer.n_heads, -1).transpose(1, 2)
    assert (gate >= head_gates - 1e-12).all()  # tau = 16 pulls every gate towards 1


@pytest.mark.parametrize("mode", MODES)
def test_gla_with_gates_1_is_unnormalised_linear_attention(mode: str, monkeypatch) -> None:
    """logsigmoid(1e4) = 0 in float64: every gate 1, and GLA's recurrence is eq. 8 without
    normaliser on q / sqrt(d), k, v (the norm and output gate unchanged)."""
    mixer = make("gla", mode=mode, chunk_size=8)
    with torch.no_grad():
        mixer.forget_gate[1].weight.zero_()
        mixer.forget_gate[1].bias.fill_(1e4)
    x = inputs()
    gated = mixer(x)
    monkeypatch.setattr(gla, "gated_linear_attention", unnormalised_linear_attention)
    torch.testing.assert_close(gated, mixer(x))


@pytest.mark.parametrize("mode", MODES)
def test_gla_with_gates_0_reads_only_the_current_token(mode: str) -> None:
    """Every gate exp(logsigmoid(-1e5) / 16) = 0: the state before each write is cleared,
    S_t = k_t v_t^T, so o_t = (q_t . k_t) v_t: nothing earlier can be retrieved."""
    mixer = make("gla", mode=mode, chunk_size=8)
    with torch.no_grad():
        mixer.forget_gate[1].weight.zero_()
        mixer.forget_gate[1].bias.fill_(-1e5)
    x = inputs()
    q, k, v, _ = mixer.projections(x)
    expected = (q * k).sum(-1, keepdim=True) * v
    torch.testing.assert_close(mixer(x), mixer.output(x, expected))


# --- mamba2 -----------------------------------------------------------------------------------


def causal_conv(x: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
    """SiLU of a causal depthwise convolution of x [B, T, C] with conv's weight and bias."""
    padded = F.pad(x.transpose(1, 2), (conv.kernel_size[0] - 1, 0))
    return F.silu(F.conv1d(padded, conv.weight, conv.bias, groups=x.shape[-1])).transpose(1, 2)


def mamba_parts(mixer: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """z, x, B, C, dt of Mamba-2 computed by hand from the projection's rows and the conv
    (with bias, SiLU) over x, B, C only: [B, T, width]."""
    z, xbc, u = (x @ mixer.in_proj.weight.T).split(mixer.widths, -1)
    assert mixer.conv.conv.bias is not None
    convolved = causal_conv(xbc, mixer.conv.conv).split(mixer.conv_widths, -1)
    parts = dict(zip("xBC", convolved, strict=True))
    parts["z"] = z
    parts["dt"] = F.softplus(u + mixer.gate.dt_bias)
    return parts


def test_mamba2_keys_are_dt_B_queries_C_values_x_gate_exp_minus_dt_A() -> None:
    """One B and C shared by both heads (n_groups = 1), x (expand 2: 16 channels per head at
    d_model 16) split by head, x, B, C after the conv and SiLU; z and dt skip the conv."""
    mixer = make("mamba2", d_state=4)
    assert mixer.head_dim == 2 * D_MODEL // 2
    x = inputs()
    q, k, v, log_gate, z, _ = mixer.projections(x)
    p = mamba_parts(mixer, x)
    dt = p["dt"].transpose(1, 2)  # [B, H, T]
    A = mixer.gate.A_log.exp()
    P = mixer.head_dim
    for h in range(mixer.n_heads):
        torch.testing.assert_close(q[:, h], p["C"])
        torch.testing.assert_close(k[:, h], p["B"] * dt[:, h, :, None])
        torch.testing.assert_close(v[:, h], p["x"][..., P * h : P * (h + 1)])
        torch.testing.assert_close(log_gate[:, h], -dt[:, h] * A[h])
    torch.testing.assert_close(z, p["z"])
    assert (log_gate < 0).all()


def test_mamba2_groups_give_each_group_of_heads_its_own_B_and_C() -> None:
    mixer = make("mamba2", n_heads=4, d_state=3, n_groups=2)
    x = inputs()
    q, k, _, _, _, _ = mixer.projections(x)
    p = mamba_parts(mixer, x)
    for h in range(4):
        group = slice(3 * (h // 2), 3 * (h // 2 + 1))
        torch.testing.assert_close(q[:, h], p["C"][..., group])
        torch.testing.assert_close(k[:, h], p["B"][..., group] * p["dt"][..., h : h + 1])
    conv_window = 3 * (2 * D_MODEL + 2 * 2 * 3)  # (kernel - 1) x (x, B, C channels)
    assert mixer.state_size(100) == 4 * 3 * (2 * D_MODEL // 4) + conv_window


def test_mamba2_initialisation_is_mamba2s() -> None:
    """A in [1, 16], dt = softplus(dt_bias) in [0.001, 0.1], D = 1."""
    mixer = make("mamba2", 64, n_heads=16)
    A, dt = mixer.gate.A_log.exp(), F.softplus(mixer.gate.dt_bias)
    assert (A >= 1).all() and (A <= 16).all()
    assert (dt >= 1e-3 - 1e-12).all() and (dt <= 1e-1 + 1e-12).all()
    assert (mixer.D == 1).all()


@pytest.mark.parametrize("mode", MODES)
def test_mamba2_with_A_0_is_unnormalised_linear_attention_with_keys_dt_B(
    mode: str, monkeypatch
) -> None:
    """A = exp(-inf) = 0: every gate exp(-dt A) = 1, and Mamba-2 is eq. 8 without normaliser
    on queries C, keys dt B, values x (the skip, norm and output gate unchanged)."""
    mixer = make("mamba2", d_state=4, mode=mode, chunk_size=8)
    x = inputs()
    decayed = mixer(x)
    with torch.no_grad():
        mixer.gate.A_log.fill_(-torch.inf)
    gated = mixer(x)
    assert not torch.allclose(gated, decayed)
    monkeypatch.setattr(mamba2, "gated_linear_attention", unnormalised_linear_attention)
    torch.testing.assert_close(gated, mixer(x))


def test_mamba2_D_skip_adds_D_x_before_the_gated_norm() -> None:
    """With the recurrence's output 0 the mixer is W_o RMSNorm(D x * swish(z))."""
    mixer = make("mamba2", d_state=4)
    x = inputs()
    q, k, v, log_gate, z, _ = mixer.projections(x)
    with torch.no_grad():
        mixer.D.copy_(torch.tensor([0.5, 2.0]))
    b, h, t, p = v.shape
    skip = (mixer.D[:, None, None] * v).transpose(1, 2).reshape(b, t, h * p)
    gated = skip * F.silu(z)
    expected = mixer.out(F.rms_norm(gated, (h * p,), eps=1e-5) * mixer.norm_weight)
    torch.testing.assert_close(mixer.output(torch.zeros_like(v), v, z), expected)


def test_mamba2_per_head_B_and_C_step_reproduces_forward() -> None:
    """n_groups = n_heads (B, C per head) in every mode and step by step."""
    x = inputs(T=19)
    outputs = [make("mamba2", n_groups=2, mode=m, chunk_size=8)(x) for m in MODES]
    for y in outputs[1:]:
        torch.testing.assert_close(y, outputs[0])
    mixer = make("mamba2", n_groups=2).eval()
    state = mixer.init_state(2)
    for t in range(19):
        y_t, state = mixer.step(x[:, t], state)
        torch.testing.assert_close(y_t, outputs[0][:, t])


# --- gated_deltanet ---------------------------------------------------------------------------


def test_gated_deltanet_q_k_unit_norm_beta_in_0_1_mamba_gate() -> None:
    """q, k of norm d_k^-1/2 and 1 (fla's l2norm: |x| / sqrt(|x|^2 + 1e-6) before the
    scale); beta = sigmoid of a bias-free projection of the layer input; log a = -A
    softplus(w_a^T x + dt_bias) with A in (0, 16] (fla's range)."""
    mixer = make("gated_deltanet")
    x = 10 * inputs()
    q, k, v, _ = mixer.features(x)
    beta, log_gate = mixer.write_rate(x), mixer.log_gate(x)
    raw_q, raw_k, _ = mixer.conv(mixer.qkv(x)).split(mixer.widths, -1)
    for out, raw, scale in ((q, raw_q, mixer.head_k_dim**-0.5), (k, raw_k, 1.0)):
        n = raw.view(*raw.shape[:2], mixer.n_heads, -1).transpose(1, 2).norm(dim=-1)
        torch.testing.assert_close(out.norm(dim=-1), scale * n / torch.sqrt(n**2 + 1e-6))
        torch.testing.assert_close(out.norm(dim=-1), scale * torch.ones_like(n), rtol=1e-5, atol=0)
    assert mixer.beta.bias is None
    torch.testing.assert_close(beta, torch.sigmoid(x @ mixer.beta.weight.T).transpose(1, 2))
    dt = F.softplus(x @ mixer.forget_input.weight.T + mixer.forget_gate.dt_bias).transpose(1, 2)
    torch.testing.assert_close(log_gate, -dt * mixer.forget_gate.A_log.exp()[:, None])
    assert (log_gate < 0).all()
    assert v.shape[-1] == 2 * D_MODEL // 2  # expand_v = 2


def test_gated_deltanet_A_is_drawn_in_0_16() -> None:
    torch.manual_seed(0)
    A = build_mixer("gated_deltanet", 64, n_heads=32).forget_gate.A_log.exp()
    assert (A > 0).all() and (A <= 16).all() and A.min() < 1  # below Mamba-2's [1, 16]


@pytest.mark.parametrize("mode", MODES)
def test_gated_deltanet_with_gate_1_is_deltanet(mode: str) -> None:
    """A = 0: every gate 1, and the recurrence is DeltaNet's delta rule on the same q, k, v,
    beta (DeltaNet's own features, which Gated DeltaNet inherits)."""
    mixer = make("gated_deltanet", mode=mode, chunk_size=8)
    with torch.no_grad():
        mixer.forget_gate.A_log.fill_(-torch.inf)
    x = inputs()
    q, k, v, _ = mixer.features(x)
    o = delta_rule(q, k, v, mixer.write_rate(x), mode=mode, chunk_size=8)
    torch.testing.assert_close(mixer(x), mixer.output(x, o))


@pytest.mark.parametrize("mode", MODES)
def test_gated_deltanet_gate_0_clears_the_state_before_each_write(mode: str) -> None:
    """dt A huge: a_t = 0, S_t = beta_t k_t v_t^T, so o_t = beta_t (q_t . k_t) v_t."""
    mixer = make("gated_deltanet", mode=mode, chunk_size=8)
    with torch.no_grad():
        mixer.forget_gate.A_log.fill_(20.0)  # A = 5e8, dt >= 1e-3 -> log a < -4e5
        mixer.forget_gate.dt_bias.fill_(5.0)
    x = inputs()
    q, k, v, _ = mixer.features(x)
    beta, log_gate = mixer.write_rate(x), mixer.log_gate(x)
    assert log_gate.max() < -1e5
    expected = beta[..., None] * (q * k).sum(-1, keepdim=True) * v
    torch.testing.assert_close(mixer(x), mixer.output(x, expected))


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("gla", {"gate_rank": 0}, "gate_rank=0 is invalid: must be an integer >= 1"),
        ("gla", {"gate_rank": 2.5}, "gate_rank=2.5 is invalid"),
        ("gla", {"gate_temperature": 0}, "gate_temperature=0 is invalid: must be a number > 0"),
        ("gla", {"gate_temperature": "hot"}, "gate_temperature='hot' is invalid"),
        ("gla", {"mode": "fast"}, "mode='fast' is invalid"),
        ("mamba2", {"d_state": 0}, "d_state=0 is invalid: must be an integer >= 1"),
        ("mamba2", {"n_groups": 3}, "n_groups=3 is invalid: must be a divisor of n_heads=2"),
        ("mamba2", {"n_groups": 0}, "n_groups=0 is invalid"),
        ("mamba2", {"chunk_size": 0}, "chunk_size=0 is invalid"),
        ("gated_deltanet", {"n_heads": 3}, "n_heads=3 is invalid"),
        ("gated_deltanet", {"mode": "chunked"}, "mode='chunked' is invalid"),
        ("gated_deltanet", {"head_k_dim": 0}, "head_k_dim=0 is invalid: must be an integer >= 1"),
        ("gated_deltanet", {"expand_v": 0.3}, "expand_v=0.3 is invalid: must be a number > 0"),
        ("deltanet", {"conv_size": -1}, "conv_size=-1 is invalid: must be an integer >= 0"),
        ("gla", {"head_k_dim": 2.5}, "head_k_dim=2.5 is invalid"),
        ("mamba2", {"expand": 0}, "expand=0 is invalid: must be an integer >= 1"),
        ("mamba2", {"conv_size": 1.5}, "conv_size=1.5 is invalid"),
    ],
)
def test_bad_params_are_refused_in_one_line_naming_the_parameter(name, params, match) -> None:
    with pytest.raises(ValueError, match=match) as error:
        build_mixer(name, D_MODEL, **params)
    assert "\n" not in str(error.value)
