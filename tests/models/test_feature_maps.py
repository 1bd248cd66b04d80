"""Feature maps: the sizes they report, the kernels they estimate, a causal FAVOR+ stabiliser."""

import math

import pytest
import torch

from models import build_mixer
from models.feature_maps import FEATURE_MAPS, build_feature_map


@pytest.mark.parametrize("name", FEATURE_MAPS)
def test_out_dim_is_the_size_produced(name: str) -> None:
    torch.manual_seed(0)
    feature_dim = 48 if name in ("rff", "favor") else None
    phi = build_feature_map(name, 16, feature_dim)
    assert phi(torch.randn(2, 5, 16)).shape == (2, 5, phi.out_dim)
    expected = {"elu": 16, "identity": 16, "rff": 48, "favor": 48, "taylor": 1 + 16 + 256}
    assert phi.out_dim == expected[name]


def test_taylor_is_second_order_expansion_of_exp() -> None:
    phi = build_feature_map("taylor", 16)
    assert phi.out_dim == 273  # Zoology reports 153 for this map
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    s = q @ k / 4
    torch.testing.assert_close(phi(q) @ phi(k), 1 + s + s**2 / 2)


def softmax_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)


def kernel_weights(phi, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    scores = phi(q, is_query=True) @ phi(k).T
    return scores / scores.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("orthogonal", [True, False])
def test_favor_estimates_softmax_attention(orthogonal: bool) -> None:
    torch.manual_seed(0)
    # FAVOR+'s variance grows like exp(|q + k|^2 / sqrt(d)): moderate norms keep 16k features enough
    q, k = torch.randn(4, 8, dtype=torch.float64) / 2, torch.randn(32, 8, dtype=torch.float64) / 2
    phi = build_feature_map("favor", 8, 16384, orthogonal=orthogonal).double()
    exact = softmax_weights(q, k)
    total_variation = (kernel_weights(phi, q, k) - exact).abs().sum(dim=-1).max() / 2
    assert total_variation < 0.03


def test_favor_error_shrinks_with_more_features() -> None:
    q, k = torch.randn(8, 8, dtype=torch.float64) / 2, torch.randn(64, 8, dtype=torch.float64) / 2
    exact = softmax_weights(q, k)
    errors = []
    for feature_dim in (16, 256, 4096):
        torch.manual_seed(1)
        phi = build_feature_map("favor", 8, feature_dim).double()
        errors.append((kernel_weights(phi, q, k) - exact).abs().mean().item())
    assert errors[0] > errors[1] > errors[2]


def test_rff_estimates_the_gaussian_kernel_and_goes_negative() -> None:
    torch.manual_seed(0)
    phi = build_feature_map("rff", 8, 2 * 16384, orthogonal=False).double()
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    qs, ks = q * 8**-0.25, k * 8**-0.25
    exact = torch.exp(-(qs - ks).square().sum() / 2)
    assert abs(phi(q) @ phi(k) - exact) < 0.02
    assert (phi(torch.randn(100, 8, dtype=torch.float64)) < 0).any()  # pitfall 2, not clamped


def test_favor_future_tokens_do_not_change_past_outputs_in_float32() -> None:
    """performer-pytorch's key stabiliser (a max over the whole sequence) fails this."""
    torch.manual_seed(0)
    mixer = build_mixer("favor", d_model=32, n_heads=2, feature_dim=64)
    x = torch.randn(1, 40, 32)
    y = mixer(x)
    x_future = x.clone()
    x_future[:, 30:] *= 30.0
    y_future = mixer(x_future)
    assert torch.equal(y[:, :30], y_future[:, :30])
    assert torch.isfinite(y_future).all()


def test_favor_features_never_overflow() -> None:
    torch.manual_seed(0)
    phi = build_feature_map("favor", 64, 256)
    feats = phi(torch.randn(100, 64) * 50)
    assert torch.isfinite(feats).all() and (feats >= 0).all()
    assert feats.max() <= 1 / math.sqrt(256) + 1e-6


def test_redraw_is_reproducible_and_changes_features() -> None:
    torch.manual_seed(0)
    phi = build_feature_map("favor", 8, 32)
    first = phi.omega.clone()
    phi.redraw(1)
    once = phi.omega.clone()
    phi.redraw(1)
    assert not torch.equal(first, once) and torch.equal(once, phi.omega)


def test_mixer_redraws_every_n_training_steps() -> None:
    torch.manual_seed(0)
    mixer = build_mixer("favor", d_model=16, n_heads=2, feature_dim=16, redraw_every=2)
    omega = mixer.feature_map.omega.clone()
    x = torch.randn(1, 4, 16)
    mixer.train()
    mixer(x)
    assert torch.equal(omega, mixer.feature_map.omega)
    mixer(x)
    assert not torch.equal(omega, mixer.feature_map.omega)
    mixer.eval()
    after = mixer.feature_map.omega.clone()
    mixer(x), mixer(x)
    assert torch.equal(after, mixer.feature_map.omega)


def test_same_seed_same_random_features() -> None:
    torch.manual_seed(3)
    a = build_mixer("favor", d_model=16)
    torch.manual_seed(3)
    b = build_mixer("favor", d_model=16)
    assert torch.equal(a.feature_map.omega, b.feature_map.omega)


@pytest.mark.parametrize(
    ("name", "feature_dim", "match"),
    [
        ("favor", 0, "feature_dim=0"),
        ("rff", 7, "feature_dim=7"),
        ("elu", 8, "feature_dim=8"),
        ("bogus", None, "feature_map='bogus'"),
    ],
)
def test_bad_feature_maps_name_the_parameter(name: str, feature_dim, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_feature_map(name, 8, feature_dim)


@pytest.mark.parametrize("orthogonal", [False, True])
def test_favor_kernel_is_unbiased_over_draws_of_the_directions(orthogonal: bool) -> None:
    """eq. 7: E_omega[phi(q)^T phi(k)] = exp(q^T k / sqrt(d)) exactly, for i.i.d. and for
    orthogonal directions (each row uniform on the sphere), with the stabiliser undone. Checked
    within 4 standard errors of the Monte-Carlo mean at |q' + k'| = 1, 1.5, 2 (x' = x d^-1/4),
    along a coordinate axis (where an uncorrected QR sign convention biases orthogonal
    features by -2% to -3%) and along a random direction."""
    d, draws = 16, 4000
    torch.manual_seed(0)
    phi = build_feature_map("favor", d, d, orthogonal=orthogonal).double()
    axis = torch.zeros(d, dtype=torch.float64)
    axis[0] = 1
    spread = torch.randn(d, dtype=torch.float64)
    directions = torch.stack([axis, spread / spread.norm()])
    # q' = k' = r u / 2, so |q' + k'| = r; x = x' d^(1/4) is what the map receives
    halves = torch.tensor([1.0, 1.5, 2.0], dtype=torch.float64)[:, None, None] / 2
    x = (halves * directions).reshape(-1, d) * d**0.25
    exact = torch.exp((x * x).sum(-1) / math.sqrt(d))
    samples = torch.empty(draws, x.shape[0], dtype=torch.float64)
    for step in range(draws):
        phi.redraw(step)
        features = phi(x) * torch.exp(phi.key_shift())  # keys' stabiliser c undone
        samples[step] = features.square().sum(-1)  # phi(q)^T phi(k) with q = k
    mean, stderr = samples.mean(0), samples.std(0) / math.sqrt(draws)
    assert torch.all((mean - exact).abs() < 4 * stderr), ((mean / exact - 1), stderr / exact)
